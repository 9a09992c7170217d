"""Does the series' prediction interval hold the next run? Out of sample, on the register.

For a results key and each group of runs made alike (the series stage's own rule), every
window of k consecutive runs is pooled as the series stage pools them, with the prior it
would carry (the committed series of machines of the same kind, never the run tested: for
k = 1 the run level, for k >= 2 the part of it common to a run's points), and each
paired ratio (ratio != 1) and median time of the run after the window is checked against
the window's 95 % prediction interval. Prints, per k and stage, how often it held.

    .venv/bin/python benchmarks/series_coverage.py --key cpu-amd-epyc-avx512bf16-2c --k 1 2 3
    .venv/bin/python benchmarks/series_coverage.py --key K --versions 5-12   # those runs only

A run made under load (its provenance's environment.load) is counted apart: every line
names the load of the windows' next runs (light, busy), so the busy-neighbour condition
reads on its own line.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inferlab.evidence.history import kept_versions  # noqa: E402
from inferlab.stages.series import TIMED, made_alike, pooled, prior_of  # noqa: E402

QUANTITIES = {"ratio": ("ratio_pi_low", "ratio_pi_high"),
              "median_ms": ("pi_low_ms", "pi_high_ms")}


def _groups(versions) -> list[list]:
    groups: list[list] = []
    for v in versions:
        group = next((g for g in groups if made_alike(g[0].entry, v.entry)), None)
        (groups.append([v]) if group is None else group.append(v))
    return groups


def _key(row: dict) -> tuple:
    return tuple(str(row.get(c)) for c in ("stage", "impl", "T", "cache_len", "batch", "dtype",
                                           "causal", "splits", "block_q"))


def _under_load(version) -> bool | None:
    env = version.entry["provenance"].get("environment") or {}
    return (env.get("load") or {}).get("under_load")


def coverage(root: Path, key: str, k: int, stage: str, wanted: set[int] | None):
    """{(quantity, load): [inside, total]} over every window of ``k`` runs and the run
    after it, in every group of runs made alike."""
    counts: dict = defaultdict(lambda: [0, 0])
    versions = [v for v in kept_versions(root, key, stage).found
                if wanted is None or v.entry["version"] in wanted]
    for group in _groups(versions):
        for start in range(len(group) - k):
            window, after = group[start:start + k], group[start + k]
            # the prior the series stage would give the window (for k >= 2 its common
            # part's), never from the run it is tested on
            prior = prior_of(root, key, stage, [*window, after], runs=k)[0]
            rows, _ = pooled(stage, window, prior)
            bounds = {_key(r): r for r in rows if r["kind"] == "pooled" and r["status"] == "ok"}
            nexts, _ = pooled(stage, [after], {})
            for r in nexts:
                if r["kind"] != "run":
                    continue
                p = bounds.get(_key(r))
                for q, (low, high) in QUANTITIES.items():
                    if p is None or p.get(low) is None or r.get(q) is None:
                        continue
                    if q == "ratio" and (r.get("ratio_to") == r.get("impl")):
                        continue
                    c = counts[(q, _under_load(after))]
                    c[0] += p[low] <= r[q] <= p[high]
                    c[1] += 1
    return counts


def half_widths(root: Path, key: str, stage: str, wanted: set[int] | None) -> list[tuple]:
    """(runs, ratios, median relative 95 % CI half-width) of the pooled paired ratios, for
    each group of runs made alike. A kernel's ratio to itself is 1 exactly (zero width) and
    is left out: counting it would narrow the median."""
    versions = [v for v in kept_versions(root, key, stage).found
                if wanted is None or v.entry["version"] in wanted]
    out = []
    for group in _groups(versions):
        rows, _ = pooled(stage, group, prior_of(root, key, stage, group, runs=len(group))[0])
        widths = sorted((r["ratio_ci_high"] - r["ratio_ci_low"]) / 2 / r["ratio"] for r in rows
                        if r["kind"] == "pooled" and r["status"] == "ok"
                        and r.get("ratio_to") != r.get("impl")
                        and r.get("ratio_ci_low") is not None and r.get("ratio"))
        if widths:
            mid = len(widths) // 2
            median = (widths[mid] if len(widths) % 2
                      else (widths[mid - 1] + widths[mid]) / 2)
            out.append((len(group), len(widths), median))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".")
    parser.add_argument("--key", required=True, help="results key, e.g. cpu-amd-epyc-avx512bf16-2c")
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--versions", default=None,
                        help="only these register versions of each stage, e.g. 5-12")
    args = parser.parse_args(argv)
    wanted = None
    if args.versions:
        lo, _, hi = args.versions.partition("-")
        try:
            wanted = set(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            parser.error(f"--versions {args.versions!r}: expected N or N-M")
    if any(k < 1 for k in args.k):
        parser.error(f"--k {args.k}: every k must be >= 1")
    register = Path(args.root) / "evidence" / args.key / "register.jsonl"
    if not register.is_file():  # R8-22: an unknown key printed an empty table, exit 0
        held = sorted(p.name for p in (Path(args.root) / "evidence").glob("*")
                      if (p / "register.jsonl").is_file())
        parser.error(f"--key {args.key!r}: no {register}; the keys here: "
                     f"{', '.join(held) or 'none'}")
    print(f"{'k':>2}  {'stage':8} {'quantity':10} {'load':6} {'inside':>7} {'of':>5}  share")
    for k in args.k:
        for stage in TIMED:
            for (q, load), (inside, total) in sorted(
                    coverage(Path(args.root), args.key, k, stage, wanted).items(),
                    key=lambda kv: (kv[0][0], str(kv[0][1]))):
                load_text = {True: "busy", False: "light", None: "?"}[load]
                print(f"{k:>2}  {stage:8} {q:10} {load_text:6} {inside:>7} {total:>5}  "
                      f"{inside / total:6.1%}")
    print(f"\n{'stage':8} {'runs':>4} {'ratios':>6}  "
          "median 95 % CI half-width of the pooled ratios")
    for stage in TIMED:
        for runs, n, median in half_widths(Path(args.root), args.key, stage, wanted):
            print(f"{stage:8} {runs:>4} {n:>6}  {median:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
