"""What one exact search of a serving gallery costs on this CPU, alone and beside a second
scanner, and what the BLAS under it does with small batches of queries.

A replica answers ``/v1/classify`` by scanning its whole gallery per batch of queries (the
``"exact"`` index, :class:`~oahu.inference.matmul.MatmulIndex`: one matrix product per depth).
A 35,000-item gallery of three depths of 200 is 84 MB of float32, far more than any cache, so a
search streams it from memory. Two replicas on one machine share its memory system; this script
measures how much that costs each of them, which bounds what a second replica adds:

- ``alone`` / ``beside``: ms per search of a synthetic gallery (``--items`` × 3 depths × 200,
  unit rows) at batches of 1, 4 and 16 queries, in one process, then in two processes at once
  (each on one thread, as a replica's query thread runs), ranking the gallery by a float32
  product through ``--products`` (by default the library the index chooses for this CPU;
  ``products`` in the JSON) and by a bfloat16 one (``MatmulIndex(bfloat16=True)``, not the
  default);
- ``gemm``: the product alone for one depth, (Q, 200) by the index's (200, N) layout, through
  torch (MKL here) and through numpy (OpenBLAS), for Q = 1 to 32.

::

    python benchmarks/gallery_scan.py --out benchmarks/results/gallery-scan-epyc-avx512.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, machine

from oahu.inference.matmul import (
    CPU_PRODUCTS,
    CpuProducts,
    MatmulIndex,
    cpu_products,
)
from oahu.threads import use_native_threads

BATCHES = (1, 4, 16)
PRECISIONS = ("float32", "bfloat16")
GEMM_QUERIES = (1, 2, 4, 8, 16, 32)
DEPTHS, DIM = 3, 200


def per_call_ms(fn: Callable[[], Any], seconds: float) -> float:
    """Mean wall time of ``fn`` over about ``seconds``, after one warm-up call."""
    fn()
    started, n = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        fn()
        n += 1
    return (time.perf_counter() - started) / n * 1e3


def searches(items: int, seconds: float, products: CpuProducts) -> dict[str, dict[str, float]]:
    """ms per search of the exact index at each batch size, in this process, by precision of
    the product that ranks the gallery."""
    rng = np.random.default_rng(0)
    gallery = rng.standard_normal((DEPTHS, items, DIM), dtype=np.float32)
    gallery /= np.linalg.norm(gallery, axis=-1, keepdims=True)
    out: dict[str, dict[str, float]] = {}
    for precision in PRECISIONS:
        index = MatmulIndex(gallery, products=products, bfloat16=precision == "bfloat16")
        out[precision] = {}
        for batch in BATCHES:
            queries = rng.standard_normal((DEPTHS, batch, DIM), dtype=np.float32)
            queries /= np.linalg.norm(queries, axis=-1, keepdims=True)
            search = lambda q=queries, i=index: i.search(q, 5)  # noqa: E731
            out[precision][str(batch)] = per_call_ms(search, seconds)
    return out


def gemm(items: int, seconds: float) -> dict[str, dict[str, float]]:
    """ms per product of Q queries by one depth, torch against numpy, the index's layout."""
    rng = np.random.default_rng(1)
    gallery_t = rng.standard_normal((DIM, items), dtype=np.float32)
    as_tensor = torch.from_numpy(gallery_t)
    out = {}
    for q in GEMM_QUERIES:
        queries = rng.standard_normal((q, DIM), dtype=np.float32)
        tensor = torch.from_numpy(queries)
        out[str(q)] = {
            "torch": per_call_ms(lambda t=tensor: t @ as_tensor, seconds),
            "numpy": per_call_ms(lambda a=queries: a @ gallery_t, seconds),
        }
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=35_000)
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--products", choices=CPU_PRODUCTS, default="auto",
                        help="the library that multiplies in the searches")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    use_native_threads(1)
    if args.child:  # one of the two scanners side by side: its searches on stdout
        print(json.dumps(searches(args.items, args.seconds, args.products)), flush=True)
        return {}
    out: dict[str, Any] = {
        "code_version": code_version(),
        "machine": machine(),
        "items": args.items,
        "depths": DEPTHS,
        "dim": DIM,
        "products": cpu_products() if args.products == "auto" else args.products,
        "alone": searches(args.items, args.seconds, args.products),
    }
    command = [sys.executable, __file__, "--child", "--items", str(args.items),
               "--seconds", str(args.seconds), "--products", args.products]  # fmt: skip
    pair = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    out["beside"] = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in pair]
    out["gemm"] = gemm(args.items, args.seconds / 2)
    for precision in PRECISIONS:
        for batch in map(str, BATCHES):
            alone = out["alone"][precision][batch]
            beside = ", ".join(f"{run[precision][batch]:.2f}" for run in out["beside"])
            print(f"{precision}, batch {batch}: {alone:.2f} ms alone, {beside} ms beside another")
    for q, ms in out["gemm"].items():
        print(f"gemm Q={q}: torch {ms['torch']:.2f} ms, numpy {ms['numpy']:.2f} ms")
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
