"""A short fingerprint (SHA-256) of the default learner's model after a stream: the network's
tensors, α and the replay/mining state, byte for byte. Two builds that print the same
fingerprint learned the same model to the bit on this machine; a refactoring that claims to
change no arithmetic is checked this way (the suite's tests check values within tolerances).

    python benchmarks/model_fingerprint.py                       # Fashion-MNIST, 10,000 triplets
    python benchmarks/model_fingerprint.py --batch-sizes 1 256 --constraints 10000 --seed 0
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json

import torch

import oahu


def fingerprint(learner: oahu.Learner) -> str:
    """SHA-256 of the learner's whole state as ``torch.save`` writes it."""
    buffer = io.BytesIO()
    torch.save(learner.get_state(), buffer)
    return hashlib.sha256(buffer.getvalue()).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--constraints", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--preset", default=None)
    args = parser.parse_args()
    stream = oahu.build_stream(args.dataset, n_constraints=args.constraints, seed=args.seed)
    out = {}
    for batch_size in args.batch_sizes:
        learner = oahu.OAHU(
            stream.n_features, preset=args.preset, batch_size=batch_size, device="cpu"
        )
        learner.prepare(stream.X[stream.dev_idx])
        oahu.replay(learner, stream, progress=False)
        out[f"B={batch_size}"] = fingerprint(learner)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
