"""The GPU call's dry run on a CPU: its config, and the exactness check of its kernels.

``scripts/gpu-check.sh --dry-run`` replays the GPU call's plan (``gpu_plan``) here: the same
steps, limits and backstops, the stages run with the plan's points, workers, rounds and
budgets, timed by the simulated GPU clock (``inferlab.measurement.simclock``: the
chapter's times on a virtual clock), in a temporary copy of the repository. Its config is
``simulated_config``: config.yaml with each section's ``cuda:`` block copied over its
``cpu:`` block (the plan's grid: its lengths, caches, batches, cases, workers, rounds and
budgets, on the CPU that runs it), the inputs shrunk to what this CPU builds in seconds
(``SHRINK``: the simulated clock times the chapter's shape whatever the inputs' heads and
tiles), one thread, and the
machine id ``simulated-<the GPU's>``, so that nothing it writes can pass for evidence.

Our Triton kernels cannot be timed on a CPU, so the stages' rows say so; ``exactness``
checks each configuration the plan times at the stage's lengths with Triton's interpreter
instead (``kernels.inexact``, one head: heads only multiply the work), cheapest first,
as far as ``EXACTNESS_TILES`` interpreted tile steps allow (~5 ms each); the rest are rows
saying they were not checked here, and why.
"""

from __future__ import annotations

import argparse
import copy
import csv
import math
import sys
from pathlib import Path

import yaml

from inferlab.workflow.config import load_config

SIMULATED_MACHINE = "simulated-cuda-nvidia-h200"
# What this CPU builds and reads in a few seconds in place of the GPU's sizes, by section
# (into its cpu: block, or its shared keys): one head; the probe's copy and largest matmul
# small; the tiled loops' blocks of 1,024, since a prefill point's readings run each case
# under the CPU's profiler (blocks of 128 at 8,192 tokens: 20 s for the tiled case alone);
# one correctness length (its sweep is computed, not simulated: 21 s at two lengths).
SHRINK = {"probe": {"heads": 1, "copy_mib": 64, "matmul_max_n": 4096},
          "correctness": {"heads": 1, "lengths": [512]},
          "prefill": {"heads": 1, "blocks": [1024]},
          "decode": {"heads": 1}}
EXACTNESS_TILES = 600
BLOCK_N = 64  # the kernels' key tile (inferlab.algorithms.kernels)
FIELDS = ("kernel", "T", "cache_len", "batch", "dtype", "causal", "block", "splits",
          "tiles", "status")


def simulated_config(raw: dict) -> dict:
    """``raw`` (validated) as the dry run's complete config (module docstring)."""
    sim = copy.deepcopy(raw)
    for name, section in sim.items():
        if isinstance(section, dict) and "cuda" in section:
            section["cpu"] = dict(section["cuda"])
            for key, value in SHRINK.get(name, {}).items():  # a shared key stays shared
                (section["cpu"] if key in section["cuda"] else section)[key] = value
    sim.update(device="cpu", machine=SIMULATED_MACHINE, threads=1, grid=None)
    return sim


def _configs(raw: dict) -> list[dict]:
    """Every Triton configuration the plan times, with its interpreted tile steps."""
    from inferlab.workflow.config import effective_config

    found = []
    cfg = effective_config(raw, "prefill", "cuda")["prefill"]
    if "triton_flash" in cfg["implementations"]:
        for size in cfg["sizes"]:
            for T in size["T"]:
                for causal in size.get("causal", cfg["causal"]):
                    for block in (64, 128):  # the query tiles of its configurations
                        tiles = math.ceil(T / block) * math.ceil(T / BLOCK_N)
                        found.append({"kernel": "triton_flash", "T": T, "dtype": size["dtype"],
                                      "causal": causal, "block": block, "batch": cfg["batch"],
                                      "tiles": tiles // 2 if causal else tiles})
    cfg = effective_config(raw, "decode", "cuda")["decode"]
    if "triton_decode" in cfg["implementations"]:
        for n in cfg["cache_lens"]:
            for b in cfg["batches"]:
                for dtype in cfg["dtypes"]:
                    for s in (s for s in cfg["splits"] if s <= n):
                        found.append({"kernel": "triton_decode", "cache_len": n, "batch": b,
                                      "dtype": dtype, "splits": s,
                                      "tiles": b * math.ceil(n / BLOCK_N)})
    return sorted(found, key=lambda c: c["tiles"])


def _words(bad: dict | None) -> str:
    """``exactness.inexact``'s result as the dry run's CSV says it."""
    if bad is None:
        return "ok"
    if bad["error_bound"] is None:
        return "error: inexact: non-finite output"
    return (f"error: inexact: max error {bad['max_error']:.3g} against float64, over its "
            f"bound {bad['error_bound']:.3g}")


def _check(config: dict, seed: int) -> str:
    from inferlab.algorithms import kernels
    from inferlab.algorithms.exactness import inexact
    from inferlab.stages.common import random_qkv

    if config["kernel"] == "triton_flash":
        q, k, v = random_qkv((config["batch"], 1, config["T"], 64), config["dtype"], "cpu", seed)
        out = kernels.flash_attention(q, k, v, config["causal"], config["block"], BLOCK_N)
        return _words(inexact(out, q, k, v, config["causal"]))
    q, k, v = random_qkv((config["batch"], 1, 1, 64), config["dtype"], "cpu", seed,
                         keys=config["cache_len"])
    return _words(inexact(kernels.flash_decode(q, k, v, config["splits"]), q, k, v))


def exactness(raw: dict, out: Path, most_tiles: int = EXACTNESS_TILES) -> list[dict]:
    """Each planned Triton configuration checked under the interpreter, cheapest first,
    within ``most_tiles``; one CSV row each, written as it goes."""
    from inferlab.algorithms import kernels

    ok, why = kernels.triton_status()
    rows, spent = [], 0
    for config in _configs(raw):
        row = {**config}
        if not (ok and kernels.INTERPRETED):
            row["status"] = f"not checked: needs Triton's interpreter (TRITON_INTERPRET=1): {why}"
        elif spent + config["tiles"] > most_tiles:
            row["status"] = (f"not checked in the dry run: {config['tiles']:,} interpreted tile "
                             f"steps, {most_tiles - spent:,} of {most_tiles:,} left (the GPU "
                             "call checks it compiled, at its stage's sizes)")
        else:
            spent += config["tiles"]
            row["status"] = _check(config, raw["seed"])
        rows.append(row)
        with out.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferlab.workflow.gpu_dry_run",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cfg = sub.add_parser("config", help="write the dry run's config (a complete config.yaml)")
    cfg.add_argument("out", type=Path)
    ex = sub.add_parser("exactness", help="the planned Triton configurations, interpreted")
    ex.add_argument("--out", type=Path, required=True)
    for p in (cfg, ex):
        p.add_argument("--configfile", action="append", default=[], type=Path)
    args = parser.parse_args(argv)
    raw = load_config(args.configfile)
    if args.command == "config":
        args.out.write_text(yaml.safe_dump(simulated_config(raw), sort_keys=False))
        return 0
    rows = exactness(raw, args.out)
    bad = [r for r in rows if r["status"].startswith("error")]
    for row in bad:
        print(f"gpu_dry_run: {row['kernel']} inexact: {row['status']}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
