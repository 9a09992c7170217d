"""The GPU call's plan, computed and checked before anything is timed.

The lent GPU machine gives one command at most ``COMMAND_LIMIT_S`` and a session
``DEVICE_TIME_S`` of device time in all, its start included (the device tool's
README.md). The call (``scripts/gpu-check.sh``) runs the stages of the pipeline's
declaration (``pipeline.STAGES``, in its order), each as ``python -m inferlab stage NAME``
with the config's ``cuda:`` blocks (resolved here as a CUDA device resolves them,
``config.effective_config``), then the DRAM bytes under ncu, then the kernel tests in the
time left. Its plan says, per step: the points, workers, rounds and budget of a timing
stage; the step limit the stage is given (``--limit-s``: it stops timing there, at a point
boundary, and writes what it measured); the backstop (``timeout -s TERM -k KILL_AFTER_S``)
behind it; and what the step is expected to take. The script reads its steps, their order
and their limits from here (``python -m inferlab.workflow.gpu_plan steps``), restating none.

A plan fits when, with at least ``MARGIN`` (25 %) to spare under each limit:

* its planned steps (the stages; ncu's bytes and the kernel tests are extras that run in
  what is left) at their backstops, and the fixed costs, end within the script's own
  budget ``SCRIPT_BUDGET_S``;
* the call's ``timeout_s`` (the script's budget and its last pack) is within one command;
* the machine's start, the transfers and that ``timeout_s`` are within the device time.

Expected times come from the simulated GPU clock's model (``inferlab.measurement.simclock``:
the chapter's published times, slower than an H200's) and the per-process costs below; the
dry run replays the same plan on that clock (``inferlab.workflow.gpu_dry_run``).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from inferlab.core import layout
from inferlab.core.pipeline import STAGES
from inferlab.measurement import simclock
from inferlab.workflow.config import effective_config, load_config

# The lent machine (the device tool's README.md and KINDS.md)
COMMAND_LIMIT_S = 600      # "one command's run (timeout_s at most): 10 minutes"
DEVICE_TIME_S = 900        # "15 minutes" of device time, all calls and starts together
START_UP_S = 120           # a machine's start: "a minute or more"; two planned
TRANSFER_S = 15            # ~7 MB of working tree and wheels up, < 1 MB back
MARGIN = 0.25              # at least this fraction of every limit left unplanned
# The call
SCRIPT_BUDGET_S = 435      # GPU_CHECK_BUDGET_S: the script stops starting steps past it
FINAL_S = 10               # after the budget: the last pack and the $OUT check
FIXED_S = 25               # install (2 s), this plan (3 s), preflight (5-10 s), packs
KILL_AFTER_S = 10          # SIGKILL this long after the backstop's SIGTERM
STOP_GRACE_S = 20          # a stopped stage: its point's round in progress, the case
#                            being read, the worker's end, the artifact written and
#                            registered. On the H200 (4 December 2026) prefill wrote 18.5 s
#                            past its limit, when its readings stopped only between points
# Costs on the H200 no config states (docs/gpu-run.md's estimates)
STAGE_START_S = 8          # python, torch, CUDA's context, the config checked, code hashed
WORKER_START_S = 6         # a timing worker: python, torch, CUDA, the flush buffer
PLAN_POINT_S = 1.0         # a point's SDPA backends checked under the profiler (both masks)
READ_CASE_S = 0.2          # a case's readings (memory, the kernel under the profiler)
COMPILE_S = 1.1            # a Triton specialization compiled (once: then Triton's cache)
WRITE_S = 3.0              # the artifact encoded, hashed, registered
# measured whole on the H200 (4 December 2026: probe 31 s, correctness 23 s, model 10 s);
UNTIMED_S = {"probe": 31.0, "correctness": 23.0, "model": 10.0}
DEFAULT_STAGE_S = 8.0      # else a stage that only reads artifacts: 5-8 s there
NCU_CASE_S = 8.0           # one case in its own process under ncu (inferlab.measurement.ncu)
# in what is left, at most this long (there: 80 s and 44 s)
TESTS = (("tests-kernels", 100), ("tests-cuda", 60))


@dataclass(frozen=True)
class Step:
    """One step of the call. ``limit_s``: the stage's ``--limit-s`` (None: a stage that
    does not time points one by one, so nothing in it would stop there); ``timeout_s``:
    the backstop; ``planned``: counted in the plan's total (the extras are not: they take
    what is left, at most ``timeout_s``)."""

    name: str
    timeout_s: int
    expected_s: float
    stage: str | None = None
    limit_s: int | None = None
    planned: bool = True
    points: int = 0
    workers: int = 0
    rounds: int = 0
    budget_s: float | None = None
    full_s: float | None = None  # a timing stage's timings uncut, on the simulated clock


@dataclass(frozen=True)
class Check:
    limit: str
    used_s: float
    limit_s: float

    @property
    def margin(self) -> float:
        return 1.0 - self.used_s / self.limit_s

    @property
    def fits(self) -> bool:
        return self.margin >= MARGIN


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    budget_s: int = SCRIPT_BUDGET_S

    @property
    def planned_s(self) -> float:
        """The planned steps at their backstops, and the fixed costs."""
        return FIXED_S + sum(s.timeout_s for s in self.steps if s.planned)

    @property
    def expected_s(self) -> float:
        return FIXED_S + sum(s.expected_s for s in self.steps if s.planned)

    @property
    def call_timeout_s(self) -> int:
        """The device tool's ``timeout_s`` for the call."""
        return self.budget_s + FINAL_S

    def checks(self) -> list[Check]:
        return [Check("the script's budget (GPU_CHECK_BUDGET_S)", self.planned_s, self.budget_s),
                Check("one command", self.call_timeout_s, COMMAND_LIMIT_S),
                Check("device time (start, transfers, the call)",
                      START_UP_S + TRANSFER_S + self.call_timeout_s, DEVICE_TIME_S)]

    def problems(self) -> list[str]:
        return [f"{c.limit}: {c.used_s:.0f} s of {c.limit_s:.0f} s leaves {c.margin:.0%}, "
                f"under the {MARGIN:.0%} margin; lower the cuda blocks' budget_s in "
                "config.yaml (or SCRIPT_BUDGET_S in inferlab/workflow/gpu_plan.py)"
                for c in self.checks() if not c.fits]


# --------------------------------------------------------------------------- timing stages


def _point_seconds(calls: list[float], warmup: int, rounds: int, cap_s: float,
                   min_run_s: float) -> float:
    """One point in one worker, as ``measure.time_cases`` spends it: the warm-up calls,
    then rounds of one timing a case (calls sized by wall time), a round starting only
    while it fits in the worker's cap, the first always."""
    walls = [simclock.wall_seconds(t) for t in calls]
    warm = sum(w if w > cap_s else warmup * w for w in walls)
    one_round = sum(max(1, math.ceil(min_run_s / w)) * w for w in walls)
    fitted = math.floor((cap_s - warm) / one_round) if one_round > 0 else rounds
    return warm + one_round * max(1, min(rounds, fitted))


def _prefill(params) -> tuple[list[tuple[list[float], int, int]], int, int]:
    """Per point (its cases' simulated call times, workers, warm-up); rounds; the Triton
    specializations compiled (a tile and a mask each)."""
    from inferlab.stages import prefill

    points = []
    for T, dtype, masks, workers, warmup, _ in params.points():
        rows = prefill.dropped_rows(params, SimpleNamespace(threads=1), T, dtype, masks, {})
        ours = "triton_flash" in params.implementations  # one configuration a mask
        calls = [simclock.prefill_seconds(r["impl"], T, params.batch, r["causal"]) for r in rows]
        calls += [simclock.prefill_seconds("triton_flash", T, params.batch, c)
                  for c in masks if ours]
        points.append((calls, workers, warmup))
    compiled = len(params.causal) if "triton_flash" in params.implementations else 0
    return points, params.timing.worker_rounds, compiled


def _decode(params) -> tuple[list[tuple[list[float], int, int]], int, int]:
    from inferlab.measurement.workers import STOPPED, PointResult
    from inferlab.stages import decode

    points, stopped = [], PointResult({}, {}, [], {}, STOPPED)
    # the stage's own order (decode.run): cache length, batch, dtype
    for n in params.cache_lens:
        for b in params.batches:
            for dtype in params.dtypes:
                rows = decode.point_rows(params, n, b, dtype, params.heads, params.heads,
                                         stopped, None)
                ours = "triton_decode" in params.implementations
                splits = [s for s in params.splits if s <= n] if ours else []
                calls = [simclock.decode_seconds(r["impl"], n, b) for r in rows]
                calls += [simclock.decode_seconds("triton_decode", n, b) for _ in splits]
                points.append((calls, params.timing.workers, params.timing.warmup))
    return points, params.timing.worker_rounds, \
        2 if "triton_decode" in params.implementations else 0  # split and merge


def timing_step(name: str, cfg: dict) -> Step:
    """A stage timed point by point (``budget_s`` in its section) as one step."""
    import importlib

    params = importlib.import_module(STAGES[name].module).Params.from_config(cfg)
    points, rounds, compiled = (_prefill if name == "prefill" else _decode)(params)
    timing = params.timing
    workers = max(w for _, w, _ in points)
    full = workers * WORKER_START_S + compiled * COMPILE_S
    for calls, point_workers, warmup in points:
        cap = timing.point_cap_s / point_workers
        full += point_workers * _point_seconds(calls, warmup, rounds, cap, timing.min_run_ms / 1e3)
        full += sum(2 * t + READ_CASE_S for t in calls)  # the readings, in one worker
    overhead = len(points) * PLAN_POINT_S + WRITE_S
    limit = math.ceil(params.budget_s + overhead)
    return Step(f"stage-{name}", stage=name, limit_s=limit,
                timeout_s=limit + STAGE_START_S + STOP_GRACE_S,
                expected_s=STAGE_START_S + overhead + min(full, params.budget_s),
                points=len(points), workers=workers, rounds=rounds, budget_s=params.budget_s,
                full_s=full)


def _other_step(name: str) -> Step:
    expected = UNTIMED_S.get(name, DEFAULT_STAGE_S)
    # no --limit-s: a stage reads it only where it times points (workers.time_points stops
    # at it); the others end on their own, or at the backstop
    return Step(f"stage-{name}", stage=name, timeout_s=math.ceil(1.5 * expected),
                expected_s=expected)


def plan(raw: dict) -> Plan:
    """The call's plan for the validated config ``raw`` (its cuda blocks): the stages that
    run on the device, in their declared order, planned; then those that run nothing on it
    (``Stage.needs_device`` false: series, traffic, claims, manuscript), extras in what is
    left, since any host can derive them from the measured stages once they are merged
    (``inferlab stage NAME --machine KEY --configfile profiles/book.yaml``); then ncu's
    bytes and the kernel tests, extras too."""
    steps, derived = [], []
    for name, declared in STAGES.items():
        cfg = effective_config(raw, name, "cuda")
        budgeted = declared.timed and "budget_s" in cfg.get(name, {})
        step = timing_step(name, cfg) if budgeted else _other_step(name)
        if declared.needs_device:
            steps.append(step)
        else:
            derived.append(replace(step, planned=False))
    steps += derived
    from inferlab.measurement.ncu import CASES

    ncu = len(CASES) * NCU_CASE_S  # an extra, as the tests: in what the stages leave
    steps.append(Step("ncu", timeout_s=math.ceil(ncu + 5), expected_s=ncu, planned=False))
    steps += [Step(name, timeout_s=most, expected_s=most, planned=False) for name, most in TESTS]
    return Plan(tuple(steps))


def load_plan(configfiles=()) -> Plan:
    return plan(load_config(configfiles))


# --------------------------------------------------------------------------- the CLI


def steps_text(p: Plan) -> str:
    """What the script reads: ``budget_s B`` and ``timeout_s T``, then one line a step:
    ``NAME STAGE LIMIT TIMEOUT PLANNED`` ("-" for none; PLANNED 1 or 0)."""
    lines = [f"budget_s {p.budget_s}", f"timeout_s {p.call_timeout_s}",
             f"kill_after_s {KILL_AFTER_S}"]
    lines += [f"step {s.name} {s.stage or '-'} {s.limit_s or '-'} {s.timeout_s} {int(s.planned)}"
              for s in p.steps]
    return "\n".join(lines) + "\n"


def report(p: Plan) -> str:
    lines = [f"{'step':<18}{'points':>7}{'workers':>8}{'rounds':>7}{'budget':>7}{'limit':>6}"
             f"{'timeout':>8}{'expected':>9}"]
    for s in p.steps:
        lines.append(f"{s.name:<18}{s.points or '-':>7}{s.workers or '-':>8}{s.rounds or '-':>7}"
                     f"{s.budget_s or '-':>7}{s.limit_s or '-':>6}{s.timeout_s:>8}"
                     f"{s.expected_s:>8.0f}{'' if s.planned else '*':1}")
    lines.append(f"planned {p.planned_s:.0f} s (expected {p.expected_s:.0f} s); * in what is left")
    lines += [f"{c.limit}: {c.used_s:.0f} of {c.limit_s:.0f} s, margin {c.margin:.0%}"
              f"{'' if c.fits else '  TOO LITTLE'}" for c in p.checks()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferlab.workflow.gpu_plan",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("check", "steps"),
                        help="check: the plan and its margins; steps: what the script reads")
    parser.add_argument("--configfile", action="append", default=[], type=Path,
                        help="default profiles/book.yaml (the GPU call's)")
    parser.add_argument("--steps-out", type=Path, help="check: also write the steps there")
    args = parser.parse_args(argv)
    try:
        p = load_plan(args.configfile or [layout.REPO_ROOT / "profiles" / "book.yaml"])
    except ValueError as exc:
        print(f"gpu_plan: {exc}", file=sys.stderr)
        return 2
    problems = p.problems()
    if args.command == "steps":
        sys.stdout.write(steps_text(p))
    else:
        print(report(p))
        if args.steps_out and not problems:
            args.steps_out.write_text(steps_text(p))
    for problem in problems:
        print(f"gpu_plan: the plan does not fit: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
