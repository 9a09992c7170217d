"""Exercise 4, measured: naive vs tiled vs tiled_fast, side by side in one run.

Uses the pipeline's one timing harness (``inferlab.measurement.measure.time_interleaved``):
every implementation is warmed up, then the three are interleaved in rounds, so drift on a
shared machine hits all alike. Prints the median with its 95 % interval, the noisy flag and
the ratios against naive and against plain tiling. Nothing is written to results/ (this is
a developer's benchmark, not pipeline evidence).

    .venv/bin/python benchmarks/tiled_vs_naive.py --lengths 1024 2048 4096 --heads 12
"""

from __future__ import annotations

import argparse
import os

import torch

from inferlab.algorithms.attention import naive_attention, tiled_attention, tiled_attention_fast
from inferlab.measurement.measure import time_interleaved


def _cases(q, k, v, causal: bool, block: int) -> dict:
    return {
        "naive": lambda: naive_attention(q, k, v, causal=causal),
        "tiled": lambda: tiled_attention(q, k, v, causal, block, block),
        "tiled_fast": lambda: tiled_attention_fast(q, k, v, causal, block, block),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args()

    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    print(f"torch {torch.__version__}, threads {args.threads}, heads {args.heads}, "
          f"d {args.head_dim}, {args.dtype}, causal {args.causal}, blocks {args.block}")
    print(f"{'T':>6} {'impl':>11} {'median_ms':>10} {'95 % interval':>19} noisy "
          f"{'x naive':>8} {'x tiled':>8}")
    for T in args.lengths:
        q, k, v = (torch.randn(1, args.heads, T, args.head_dim, dtype=dtype) for _ in range(3))
        timings = time_interleaved(_cases(q, k, v, args.causal, args.block),
                                   threads=args.threads, min_rounds=args.rounds,
                                   max_rounds=args.rounds)
        for name, t in timings.items():
            low, high = t.ci_ms
            print(f"{T:>6} {name:>11} {t.median_ms:>10.2f} {low:>9.2f}-{high:<9.2f} "
                  f"{'yes' if t.noisy else 'no':>5} "
                  f"{t.median_ms / timings['naive'].median_ms:>8.2f} "
                  f"{t.median_ms / timings['tiled'].median_ms:>8.2f}")


if __name__ == "__main__":
    main()
