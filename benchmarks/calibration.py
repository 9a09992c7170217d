"""Do the harness's 95 % intervals hold on the next run? Coverage, measured.

Runs a small set of the pipeline's own points (prefill and decode, built by the stages'
``point_cases`` from config.yaml) several times, each run in fresh worker processes
(``inferlab.measure.time_points``, as the stages do), and reports for the paired ratios
(ratio != 1):

* coverage: over every ordered pair of runs (i, j), the share of ratios of run j that lie
  inside run i's 95 % interval (the goal: >= 90 %);
* the between-run difference |r_j / r_i - 1| of each ratio: its median and largest;
* the median interval half-width (goal: <= 5 %) and the median between-process share.

``--workers 1 --rounds 12`` gives the old one-process intervals for comparison. Nothing is
written to results/ (a developer's benchmark, not pipeline evidence; not a timed test).
Timings on a shared machine are noisy: say how loaded it was beside the figures.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/calibration.py --runs 4 --workers 3 --rounds 4
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time

from inferlab.config import effective_config, load_config
from inferlab.stages import decode, prefill
from inferlab.workers import time_points


def _points(heads: int) -> list[tuple[str, object, str]]:
    """(stage factory, point, name): prefill at 1,024 and 2,048 tokens, both masks (naive,
    tiled_fast, flash), decode at 4,096 and 16,384 keys, batch 1 (split 1 and 16, flash)."""
    raw = load_config(overrides=["device=cpu", f"prefill.cpu.heads={heads}",
                                 "prefill.implementations=[naive, tiled_fast, sdpa]",
                                 "prefill.cpu.backends=[flash]", "decode.splits=[1, 16]",
                                 "decode.backends=[flash]", "decode.triton=false"])
    pre = prefill.Params.from_config(effective_config(raw, "prefill", "cpu"))
    dec = decode.Params.from_config(effective_config(raw, "decode", "cpu"))
    points = [("inferlab.stages.prefill:point_cases",
               prefill.plan_point(pre, T, "float32", (False, True), "cpu", 0), f"prefill T={T}")
              for T in (1024, 2048)]
    points += [("inferlab.stages.decode:point_cases",
                decode.plan_point(dec, n, 1, "float32", "cpu", 0), f"decode cache={n}")
               for n in (4096, 16384)]
    return points


def _one_run(points, args) -> dict[tuple[str, str], tuple[float, float, float, float | None]]:
    """(point, case) -> (ratio, low, high, between share) for every paired ratio != 1;
    each stage's points in one ``time_points`` call, as the stage does."""
    found = {}
    for factory in dict.fromkeys(f for f, _, _ in points):
        mine = [(point, name) for f, point, name in points if f == factory]
        results = time_points(factory, [p for p, _ in mine], workers=args.workers,
                              rounds=args.rounds, budget_s=1e7, time_cap_s=1e6,
                              threads=args.threads, warmup=2, min_run_s=0.05,
                              names=[n for _, n in mine])
        for (_, name), result in zip(mine, results, strict=True):
            for label, timing in result.timings.items():
                ratio = timing.ratio
                if timing.status == "ok" and ratio is not None and ratio.ref != label:
                    found[(name, label)] = (ratio.median, ratio.ci_low, ratio.ci_high,
                                            ratio.between_share)
    return found


def _summary(runs: list[dict]) -> dict:
    inside, diffs = [], []
    for a, b in itertools.permutations(runs, 2):
        for key, (_, low, high, _) in a.items():
            if key in b:
                inside.append(low <= b[key][0] <= high)
                diffs.append(abs(b[key][0] / a[key][0] - 1))
    halves = [(high - low) / 2 / r for run in runs for r, low, high, _ in run.values()]
    shares = [s for run in runs for *_, s in run.values() if s is not None]
    return {"pairs": len(inside), "coverage": statistics.fmean(inside),
            "median_diff": statistics.median(diffs), "max_diff": max(diffs),
            "median_halfwidth": statistics.median(halves),
            "median_between_share": statistics.median(shares) if shares else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args()
    points = _points(args.heads)
    print(f"{args.runs} runs x {len(points)} points, {args.workers} workers x {args.rounds} "
          f"rounds, {args.threads} threads; load average {os.getloadavg()[0]:.2f}")
    runs = []
    for i in range(args.runs):
        started = time.perf_counter()
        runs.append(_one_run(points, args))
        print(f"run {i + 1}: {len(runs[-1])} ratios in {time.perf_counter() - started:.0f} s; "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
    for key in runs[0]:
        cells = "  ".join(f"{r[key][0]:.3f} [{r[key][1]:.3f}, {r[key][2]:.3f}]"
                          for r in runs if key in r)
        print(f"{key[0]:>20} {key[1]:>24}  {cells}")
    s = _summary(runs)
    share = "n/a" if s["median_between_share"] is None else f"{s['median_between_share']:.2f}"
    print(f"coverage {s['coverage']:.0%} of {s['pairs']} (run, other run) pairs; between runs: "
          f"median |diff| {s['median_diff']:.1%}, largest {s['max_diff']:.1%}; median "
          f"half-width {s['median_halfwidth']:.1%}; median between-process share {share}")


if __name__ == "__main__":
    main()
