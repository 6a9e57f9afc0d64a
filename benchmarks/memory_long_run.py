"""Memory of a long-running learner: resident memory along a stream of 10^7 constraints.

A service runs for months; everything the learner keeps must stay bounded however many
constraints it has seen. A benchmark stream cannot show that: Fashion-MNIST's 35,000 items are
mentioned again and again, so the constraint graph never reaches its bound on remembered items.
This stream mixes the two cases a consumer meets: half of the items come from a fixed pool (seen
again, so components merge and links accumulate), half are new items never seen before (so the
graph must forget). Items are drawn from a mixture of Gaussian classes at d = 784, generated a
block at a time (10^7 triplets of 784 floats would be 94 GB), and learned by the default learner
(or ``--set`` changes to it, e.g. ``batch_size=256``).

Recorded every 1% of the stream: resident memory of the process (MiB), what the learner's
memories hold (items known to the graph, links, held items, replayed constraints) and the size
of a checkpoint of the learner; at the end the peak resident memory (``ru_maxrss``). Written to
``results/memory-long-run<tag>.json`` after every sample (``complete`` says whether the run
got to the end; a run stopped early keeps what it measured), with a plot beside it at the end.

    python -m benchmarks.memory_long_run --constraints 10000000 --set batch_size=256
    python -m benchmarks.memory_long_run --constraints 1000000            # strict
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from benchmarks.learning_curves import resident_mb
from benchmarks.provenance import code_version, cpu_model, machine
from oahu.learners.oahu.learner import OAHU
from oahu.persistence import learner_to_bytes
from oahu.settings import parse_settings

RESULTS = Path(__file__).resolve().parent / "results"
WIDTH = 784
CLASSES = 50
POOL = 35_000  # items that recur, as a benchmark's development split does
BLOCK = 8_192  # triplets generated and learned at a time


class MixtureStream:
    """Triplets (anchor and positive of one class, negative of another) over items of a
    seeded mixture of ``CLASSES`` Gaussian classes: each item is one of ``POOL`` recurring
    items with probability 1/2, else a new one."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.means = self.rng.normal(size=(CLASSES, WIDTH)).astype(np.float32)
        self.pool_labels = np.sort(self.rng.integers(0, CLASSES, size=POOL))
        self.pool = self._items(self.pool_labels)
        # The pool's items of class c are pool[starts[c] : starts[c] + counts[c]].
        self.counts = np.bincount(self.pool_labels, minlength=CLASSES)
        self.starts = np.cumsum(self.counts) - self.counts

    def _items(self, labels: np.ndarray) -> np.ndarray:
        noise = self.rng.normal(scale=2.0, size=(len(labels), WIDTH)).astype(np.float32)
        return self.means[labels] + noise

    def items(self, n: int) -> np.ndarray:
        """``n`` unlabelled items, for ``prepare``."""
        return self._items(self.rng.integers(0, CLASSES, size=n))

    def triplets(self, n: int) -> np.ndarray:
        """The next ``n`` triplets, (n, 3, WIDTH)."""
        same = self.rng.integers(0, CLASSES, size=n)
        other = (same + self.rng.integers(1, CLASSES, size=n)) % CLASSES
        labels = np.stack([same, same, other], axis=1).ravel()
        out = self._items(labels)
        recurring = self.rng.random(len(labels)) < 0.5
        picks = self.starts[labels] + self.rng.integers(0, self.counts[labels])
        out[recurring] = self.pool[picks[recurring]]
        return out.reshape(n, 3, WIDTH)


def memories(learner: OAHU) -> dict[str, int]:
    step = learner.update_step
    return {
        "graph_known_items": len(step.graph.known),
        "graph_links": step.graph.n_links,
        "graph_held_items": step.graph.size,
        "replay_held": step.replay.size,
    }


def run(
    constraints: int,
    seed: int,
    params: dict[str, Any],
    on_sample: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The learner's memory along ``constraints`` constraints of the mixture stream, sampled
    every 1%; ``on_sample`` gets the result so far after each sample (``complete`` False until
    the last), so that a run stopped early still leaves what it measured."""
    stream = MixtureStream(seed)
    learner = OAHU(WIDTH, seed=seed, device="cpu", **params)
    learner.prepare(stream.items(5_000))
    every = max(constraints // 100, BLOCK)
    samples: list[dict[str, Any]] = []
    learning = 0.0
    done = 0

    # What does not change along the run is read once (the commit takes two git calls), not at
    # each of the hundred samples.
    fixed = {
        "constraints": constraints,
        "seed": seed,
        "params": params,
        "learner_params": learner.get_params(),
        "commit": code_version(),
        "cpu": cpu_model(),
        "machine": machine(),
    }

    def result() -> dict[str, Any]:
        return {
            **fixed,
            "constraints_learned": done,
            "complete": done == constraints,
            "samples": list(samples),
            "peak_resident_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "triplets_per_s": done / learning if learning else None,
        }

    with tqdm(total=constraints, unit="constraint") as bar:
        while done < constraints:
            n = min(BLOCK, constraints - done)
            block = stream.triplets(n)
            started = time.perf_counter()
            learner.learn("triplet", block)
            learning += time.perf_counter() - started
            done += n
            bar.update(n)
            if done % every < n or done == constraints:
                samples.append(
                    {
                        "constraints": done,
                        "resident_mb": resident_mb(),
                        "learning_seconds": learning,
                        "checkpoint_mb": len(learner_to_bytes(learner)) / 2**20,
                        **memories(learner),
                    }
                )
                if on_sample is not None and done < constraints:
                    on_sample(result())
    return result()


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    ns = [s["constraints"] for s in samples]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    axes[0].plot(ns, [s["resident_mb"] for s in samples], label="resident memory")
    axes[0].plot(ns, [s["checkpoint_mb"] for s in samples], label="checkpoint")
    axes[0].set_ylabel("MiB")
    axes[0].set_ylim(bottom=0)
    axes[1].plot(ns, [s["graph_known_items"] for s in samples], label="items known to the graph")
    axes[1].plot(ns, [s["graph_links"] for s in samples], label="links between components")
    axes[1].set_ylabel("count")
    for ax in axes:
        ax.set_xlabel("constraints learned")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    batch = result["learner_params"]["batch_size"]
    fig.suptitle(
        f"oahu default learner (B = {batch}) on {result['constraints']:,} constraints, half of "
        f"them over new items: peak resident memory {result['peak_resident_mb']:.0f} MiB",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--constraints", type=int, default=10_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--tag", default="", help="suffix of the result's file names")
    args = parser.parse_args()
    out = RESULTS / f"memory-long-run{args.tag}.json"

    def save(result: dict[str, Any]) -> None:
        # Written whole to a temporary file and moved over the result: a run stopped while it
        # writes leaves the last complete one.
        partial = out.with_suffix(".json.part")
        partial.write_text(json.dumps(result, indent=1))
        partial.replace(out)

    result = run(args.constraints, args.seed, parse_settings(args.set, "--set"), on_sample=save)
    save(result)
    plot(result, out.with_suffix(".png"))
    last = result["samples"][-1]
    print(
        f"{args.constraints:,} constraints at {result['triplets_per_s']:,.0f}/s: peak resident "
        f"{result['peak_resident_mb']:.0f} MiB, at the end {last['resident_mb']:.0f} MiB, "
        f"checkpoint {last['checkpoint_mb']:.1f} MiB"
    )


if __name__ == "__main__":
    main()
