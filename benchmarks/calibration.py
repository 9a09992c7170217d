"""Do the harness's 95 % intervals hold on the next run? Coverage, measured.

Runs a small set of the pipeline's own points (prefill and decode, built by the stages'
``point_cases`` from config.yaml) several times, each run in fresh worker processes
(``inferlab.measurement.workers.time_points``, as the stages do), and reports for the paired ratios
(ratio != 1):

* coverage: over every ordered pair of runs (i, j), the share of ratios of run j that lie
  inside run i's 95 % interval (the goal: >= 90 %);
* the between-run difference |r_j / r_i - 1| of each ratio: its median and largest;
* the median interval half-width (goal: <= 5 %) and the median between-process share.

Each stage's points run with the stage's own harness settings from config.yaml (workers,
rounds a worker, timing length, warm-up), one thread as under `snakemake --cores 1`; the
command line overrides them to compare others (``--workers 1 --rounds 12``: the old
one-process intervals). Nothing is written to results/ (a developer's benchmark, not
pipeline evidence; not a timed test). Timings on a shared machine are noisy: say how
loaded it was beside the figures.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/calibration.py --runs 4
    PYTHONPATH=$PWD .venv/bin/python benchmarks/calibration.py --runs 4 --workers 8 \
        --save benchmarks/out/raw.json   # each run's per-process paired ratios
    PYTHONPATH=$PWD .venv/bin/python benchmarks/calibration.py \
        --load benchmarks/out/raw.json --workers 3   # the same runs, as 3 workers would be
    PYTHONPATH=$PWD .venv/bin/python benchmarks/calibration.py --stage decode --grid full \
        --rounds 3 --min-run-ms 50     # decode as it was timed before: 3 rounds of 50 ms

What it found on the 2-vCPU EPYC (cpu-amd-epyc-avx512bf16-2c), decode's whole grid, four
runs of each setting alternated run by run (load average 0.4-1.1), 3 workers, with the
confidence interval of the mean (± t·s/√W) the harness then used:

    3 rounds of 50 ms timings:   coverage 85 %, |diff| median 5.0 %, largest 21 %, half-width 12 %
    12 rounds of 10 ms timings*: coverage 92 %, |diff| median 2.6 %, largest 15 %, half-width 10 %

(* the first 12 of 15 rounds a worker), the same time per point; so decode takes rounds of
10 ms (config.yaml). More processes narrowed that interval but made it hold less: over 8
workers x 3 rounds, subsampled to 3, 4, 6 and 8 workers, the coverage fell from 85 % to
77 % as the half-width fell from 12 % to 5 %. That is what a confidence interval of the
mean does: the next run's mean is as uncertain as this one, so it holds it 83-91 % of the
time (W large to 3), and less as W grows. The same data with the *prediction* interval
(± t·s·√(2/W), what the harness uses now): 90 %, 91 %, 86 %, 87 % for 3, 4, 6, 8 workers.

With the prediction interval, four runs per setting, one after the other (load 0.2-1.1):

    (coverage, |diff| median and largest, median half-width)
    decode, 3 workers x 12 rounds:   83 %, 1.9 %, 16 %,  5.5 %
    decode, 4 workers x  9 rounds:   94 %, 1.4 %, 15 %,  5.1 %
    prefill (small), 3 x 3 rounds:   82 %, 1.5 %, 6.1 %, 3.6 %
    prefill (small), 4 x 2 rounds:   83 %, 1.9 %, 14 %,  5.3 %

so decode takes 4 workers x 9 rounds and prefill then kept 3 x 3. Since then the warm-up
calls are interleaved as the rounds are, so the untimed settling round that followed them
went: three runs of the small prefill grid, alternated with the code before, took 31-36 s
against 35-38 s (load 0.8-1.1), with coverage 98 % against 96 % (half-width 14 % against
12 %: a noisy afternoon); decode's whole grid, four runs each, alternated: 32-34 s against
33-35 s, coverage 89 % against 85 %, |diff| median 1.9 % / 1.5 %, largest 12.5 % / 16.9 %,
half-width 4.9 % / 4.7 %, so no change beyond the noise. The time saved pays for a fourth
prefill worker; the 8 x 3 data above, reanalysed (``--load``) as 3 and as 4 workers of 3
rounds, give coverage 90 % / 91 %, between-run median 4.1 % / 2.9 %, half-width 16 % / 12 %.
With 3 processes the
sample deviation itself is uncertain (2 degrees of freedom): where the processes agree by
chance the interval is narrow (e.g. ±0.4 %) and the next run falls outside it; t(2) pays
for that on average, not point by point. A variance pooled over the stage's points
(empirical Bayes, limma's moderated variance, its prior fitted to the points) narrowed the
intervals but held less often (77-93 % over the data sets above), so it is not used. What no
process inside one run samples is the variance of the run itself (what the host's other
tenants do for minutes, not seconds); the report sets each run beside the previous one
for that reason.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import time
from pathlib import Path

from inferlab.measurement.intervals import between_share, process_interval
from inferlab.measurement.measure import ratio_groups
from inferlab.measurement.workers import time_points
from inferlab.stages import decode, prefill
from inferlab.workflow.config import effective_config, load_config


def _stages(args) -> list[tuple[str, object, list[tuple[object, str]]]]:
    """(stage factory, its harness settings, [(point, name)]) per stage asked for. small:
    prefill at 1,024 and 2,048 tokens, both masks (naive, tiled_fast, flash), decode at
    4,096 and 16,384 keys, batch 1 (split 1 and 16, flash); full: prefill at those lengths
    with every implementation, decode's whole grid (config.yaml's cpu block)."""
    small = ["prefill.implementations=[naive, tiled_fast, sdpa]", "prefill.cpu.backends=[flash]",
             "decode.splits=[1, 16]", "decode.backends=[flash]", "decode.triton=false"]
    raw = load_config(overrides=["device=cpu", f"prefill.cpu.heads={args.heads}",
                                 *(small if args.grid == "small" else [])])
    pre = prefill.Params.from_config(effective_config(raw, "prefill", "cpu"))
    dec = decode.Params.from_config(effective_config(raw, "decode", "cpu"))
    found = []
    if args.stage in ("prefill", "both"):
        found.append(("inferlab.stages.prefill:point_cases", pre.timing,
                      [(prefill.plan_point(pre, T, "float32", (False, True), "cpu", 0),
                        f"prefill T={T}") for T in (1024, 2048)]))
    if args.stage in ("decode", "both"):
        grid = ([(n, 1) for n in (4096, 16384)] if args.grid == "small" else
                [(n, b) for n in dec.cache_lens for b in dec.batches])
        found.append(("inferlab.stages.decode:point_cases", dec.timing,
                      [(decode.plan_point(dec, n, b, "float32", "cpu", 0),
                        f"decode cache={n} batch={b}") for n, b in grid]))
    return found


def _one_run(stages, args) -> dict[str, list[list[float]]]:
    """"point|case" -> the case's per-round ratios to its reference, one list per process,
    for every paired ratio != 1; each stage's points in one ``time_points`` call, as the
    stage does, with the stage's own settings (config.yaml) unless the command line sets
    them."""
    found = {}
    for factory, timing, mine in stages:
        min_run_ms = timing.min_run_ms if args.min_run_ms is None else args.min_run_ms
        results = time_points(factory, [p for p, _ in mine],
                              workers=args.workers or timing.workers,
                              rounds=args.rounds or timing.worker_rounds, budget_s=1e7,
                              time_cap_s=1e6, threads=args.threads, warmup=timing.warmup,
                              min_run_s=min_run_ms / 1e3, names=[n for _, n in mine])
        for (_, name), result in zip(mine, results, strict=True):
            ok = {label: t for label, t in result.timings.items() if t.status == "ok"}
            for label, timing_ in ok.items():
                ratio = timing_.ratio
                if ratio is not None and ratio.ref != label:
                    found[f"{name}|{label}"] = ratio_groups(timing_.per_process,
                                                            ok[ratio.ref].per_process)
    return found


def intervals_of(run: dict[str, list[list[float]]], workers: int | None = None,
                 rounds: int | None = None) -> dict[str, tuple[float, float, float, float | None]]:
    """"point|case" -> (ratio, low, high, between-process share), made as the harness
    makes them (``inferlab.measurement.intervals``) from the first ``workers`` processes and their
    first ``rounds`` rounds (default: all): a saved run reanalysed as a smaller one."""
    found = {}
    for key, groups in run.items():
        groups = [g[:rounds] for g in groups[:workers] if g]
        if groups:
            found[key] = (*process_interval(groups), between_share(groups))
    return found


def _summary(runs: list[dict]) -> dict:
    """Coverage (each ordered pair of runs: the second's ratio inside the first's
    interval), the between-run differences and the median half-width and share."""
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


def _report(runs: list[dict]) -> None:
    for key in runs[0]:
        cells = "  ".join(f"{r[key][0]:.3f} [{r[key][1]:.3f}, {r[key][2]:.3f}]"
                          for r in runs if key in r)
        print(f"{key:>48}  {cells}")
    s = _summary(runs)
    share = "n/a" if s["median_between_share"] is None else f"{s['median_between_share']:.2f}"
    print(f"coverage {s['coverage']:.0%} of {s['pairs']} (run, other run) pairs; between runs: "
          f"median |diff| {s['median_diff']:.1%}, largest {s['max_diff']:.1%}; median "
          f"half-width {s['median_halfwidth']:.1%}; median between-process share {share}")


def _measure(args) -> list[dict]:
    stages = _stages(args)
    print(f"{args.runs} runs x {sum(len(m) for *_, m in stages)} points "
          f"({args.stage}, {args.grid}); workers {args.workers or 'as configured'}, rounds "
          f"{args.rounds or 'as configured'}, {args.threads} thread(s); load average "
          f"{os.getloadavg()[0]:.2f}")
    raw = []
    for i in range(args.runs):
        started = time.perf_counter()
        raw.append(_one_run(stages, args))
        print(f"run {i + 1}: {len(raw[-1])} ratios in {time.perf_counter() - started:.0f} s; "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        if args.save:  # after every run: an interrupted benchmark keeps the runs it made
            Path(args.save).write_text(json.dumps({"args": vars(args), "runs": raw}))
    return raw


def _check_saved(saved) -> list[dict]:
    """The runs of a file ``--save`` wrote, every value checked; a ValueError naming the
    first that is not what it wrote (a run, a point, a process, a ratio)."""
    if not isinstance(saved, dict) or "runs" not in saved:
        raise ValueError("expected an object with 'args' and 'runs'")
    if not isinstance(saved.get("args"), dict):
        raise ValueError("no 'args' (the settings the runs were made with) as an object")
    runs = saved["runs"]
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ValueError("'runs' is not a list of runs (objects of point|case -> processes)")
    for i, run in enumerate(runs, start=1):
        for key, groups in run.items():
            if not isinstance(groups, list):
                raise ValueError(f"run {i}, {key!r}: {groups!r} is not a list of processes")
            for j, group in enumerate(groups, start=1):
                if not isinstance(group, list):
                    raise ValueError(f"run {i}, {key!r}, process {j}: {group!r} is not a "
                                     "list of ratios")
                for ratio in group:
                    if isinstance(ratio, bool) or not isinstance(ratio, int | float) \
                            or not math.isfinite(ratio) or ratio <= 0:
                        raise ValueError(f"run {i}, {key!r}, process {j}: {ratio!r} is not a "
                                         "ratio (a finite number > 0)")
    return runs


def _check_args(p: argparse.ArgumentParser, args) -> None:
    """Refuse, naming it, every argument no run could use."""
    for name in ("runs", "workers", "rounds", "heads", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name} {value}: must be at least 1")
    if args.min_run_ms is not None and not (math.isfinite(args.min_run_ms)
                                            and args.min_run_ms > 0):
        p.error(f"--min-run-ms {args.min_run_ms}: must be a number of milliseconds > 0 (the "
                "shortest a timing may run)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--stage", choices=("prefill", "decode", "both"), default="both")
    p.add_argument("--grid", choices=("small", "full"), default="small")
    p.add_argument("--workers", type=int, help="default: the stage's (config.yaml)")
    p.add_argument("--rounds", type=int, help="rounds a worker; default: the stage's")
    p.add_argument("--min-run-ms", type=float, help="default: the stage's")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--threads", type=int, default=1,
                   help="1, as `snakemake --cores 1` runs the stages")
    p.add_argument("--save", metavar="FILE",
                   help="write each run's per-process paired ratios to FILE (JSON), after "
                        "every run")
    p.add_argument("--load", metavar="FILE",
                   help="measure nothing: reanalyse the runs a --save wrote, with at most "
                        "--workers processes of --rounds rounds each")
    args = p.parse_args()
    _check_args(p, args)
    if args.load:
        try:
            saved = json.loads(Path(args.load).read_bytes())
            raw = _check_saved(saved)
        except OSError as exc:
            p.error(f"--load {args.load}: not a file --save wrote: it cannot be read "
                    f"({exc.strerror or exc})")
        except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
            p.error(f"--load {args.load}: not a file --save wrote: {exc}")
        print(f"{len(raw)} runs from {args.load} (made with {saved['args']}); reanalysed with "
              f"workers {args.workers or 'all'}, rounds {args.rounds or 'all'}")
    else:
        if args.runs < 2:
            p.error(f"--runs {args.runs}: coverage needs at least 2 runs to compare")
        raw = _measure(args)
    if len(raw) < 2:
        raise SystemExit(f"{len(raw)} run(s): coverage needs at least 2 runs to compare")
    _report([intervals_of(run, args.workers, args.rounds) for run in raw])


if __name__ == "__main__":
    main()
