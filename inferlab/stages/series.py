"""series -> series.csv: every timed point of prefill and decode pooled over this machine's
series, the register's runs made alike (the same code, effective config, hardware and
threads), as the evidence the chapter's claims are judged on.

One run is not the unit of evidence on a shared VM (docs/series.md): about half the
variance between runs is run-level, which no process inside one run samples
(``measurement.pooling``). So per point and quantity (median time, paired ratio, causal
over full) there is a ``run`` row per run that measured it and a ``pooled`` row (random
effects over the runs); the columns are described in schemas/series.schema.json. A point
no run measured keeps the latest run's status and cause.

The runs are the register's kept versions (``evidence.history``): a version whose kept
file was edited, or holds a value no clock measures, is left out and logged with the
reason. At most ``max_runs`` of the latest runs are pooled (the machine as it is now).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferlab.core.pipeline import STAGES
from inferlab.evidence.history import kept_versions, kind_keys
from inferlab.judging.series_view import TIMED, is_number, missing
from inferlab.measurement.environment import hardware
from inferlab.measurement.intervals import process_var
from inferlab.measurement.pooling import (
    ALPHA,
    Run,
    RunLevel,
    combine_priors,
    pool,
    process_variance,
    run_variance,
    with_prior,
)

# a first run's prior: the latest this many series (two or more runs made alike) of each
# machine of its kind
PRIOR_GROUPS = 3
# quantity -> (its column, interval columns, the processes' sd column)
QUANTITIES = {
    "median_ms": ("median_ms", ("ci_low_ms", "ci_high_ms"), "process_sd"),
    "ratio": ("ratio", ("ratio_ci_low", "ratio_ci_high"), "ratio_process_sd"),
    "causal_over_full": ("causal_over_full", ("causal_over_full_ci_low",
                                              "causal_over_full_ci_high"),
                         "causal_over_full_process_sd"),
}
PI = {"median_ms": ("pi_low_ms", "pi_high_ms"), "ratio": ("ratio_pi_low", "ratio_pi_high"),
      "causal_over_full": ("causal_over_full_pi_low", "causal_over_full_pi_high")}
RUN_SD = {"median_ms": "run_sd", "ratio": "ratio_run_sd",
          "causal_over_full": "causal_over_full_run_sd"}
# the part of the run-level sd a run shares across the stage's points (pooling.RunLevel.common)
COMMON_SD = {"median_ms": "run_common_sd", "ratio": "ratio_run_common_sd"}
SPREAD = {"median_ms": "median_ms_spread", "ratio": "ratio_spread"}
# a paired quantity needs its partner timed in the same run: the runs it rests on
RUNS_OF = {"ratio": "ratio_runs", "causal_over_full": "causal_over_full_runs"}
# a rate over the time: the latest run's scaled by its time over the pooled time; a rate
# over a ceiling (fraction -> its rate): the pooled rate over the highest ceiling the
# series' runs read (a ceiling is the fastest the machine was seen doing: a probe beside a
# busy process reads it low, and the pooled time is not that run's)
RATES = ("achieved_gflops", "achieved_gbs")
FRACTIONS = {"frac_matmul_ceiling": "achieved_gflops", "frac_copy_ceiling": "achieved_gbs"}
# a point the latest run did not reach (its budget or limit): judged from the earlier runs
NOT_REACHED = ("dropped", "stopped")
# what a run's row carries besides its timing (the latest run's, where it measured them)
CARRIED = ("fused_sdpa", "peak_extra_bytes", "memory_method", "flops", "kernel", "threads",
           "cache_bytes", "floor_ms", "timing_method", "ratio_to")


@dataclass(frozen=True)
class Params:
    max_runs: int

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        return cls(max_runs=cfg["series"]["max_runs"])


# the build facts that change a timing as much as the hardware does: torch (its version
# and commit), its BLAS and cuDNN
SOFTWARE = ("torch", "torch_git_version", "blas_info", "cudnn_version")


def _software(env: dict) -> tuple:
    build = env.get("build") or {}
    return tuple(build.get(k) for k in SOFTWARE)


def made_alike(a: dict, b: dict) -> bool:
    """Two register entries of one stage made the same way: code, effective config,
    hardware with torch's threads (``environment.hardware``) and torch's build
    (``SOFTWARE``)."""
    pa, pb = a["provenance"], b["provenance"]
    ea, eb = pa.get("environment") or {}, pb.get("environment") or {}
    return (pa["code_sha256"] == pb["code_sha256"] and pa["config_sha256"] == pb["config_sha256"]
            and hardware(ea) == hardware(eb) and _software(ea) == _software(eb))


def _key(row: dict, stage: str) -> tuple:
    return tuple(row.get(c) for c in STAGES[stage].key_columns)


def _runs_of(rows: list[tuple[int, dict]], quantity: str) -> list[tuple[int, Run, dict]]:
    """(version, Run, row) of every run whose row measured ``quantity``."""
    column, (_, high), sd = QUANTITIES[quantity]
    found = []
    for version, row in rows:
        value = row.get(column)
        if row.get("status") != "ok" or value is None or value != value or value <= 0:
            continue
        workers = int(row.get("workers") or 1)
        own = row.get(sd)
        var = own ** 2 if own is not None and own == own else None
        if var is None and workers >= 2:  # an older version: backed out of its interval
            backed = process_var(value, row.get(high), workers)
            var = None if backed is None else backed * workers
        found.append((version, Run(math.log(value), workers, var, version), row))
    return found


def _is_reference(row: dict) -> bool:
    return row.get("ratio_to") is not None and row.get("ratio_to") == row.get("impl")


class _Series:
    """One timed stage's runs: per point the rows of each run, newest last."""

    def __init__(self, stage: str, versions: list, latest: dict):
        self.stage, self.latest = stage, latest["version"]
        self.versions = versions
        self.points: dict[tuple, list[tuple[int, dict]]] = {}
        self.load = {v.entry["version"]: ((v.entry["provenance"].get("environment") or {})
                                          .get("load") or {}).get("under_load")
                     for v in versions}
        for v in versions:
            for row in v.table.frame.to_dict(orient="records"):
                row = {k: (None if missing(x) else x) for k, x in row.items()}
                self.points.setdefault(_key(row, stage), []).append((v.entry["version"], row))
        self.order = list(self.points)  # the points in the order the runs first have them

    def run_levels(self, prior: dict[str, RunLevel]) -> dict[str, tuple[RunLevel, float | None,
                                                                       int]]:
        """quantity -> (run level, pooled process variance, its df)."""
        out = {}
        for q in QUANTITIES:
            per_point = [[r for _, r, row in _runs_of(rows, q) if not _is_reference(row)]
                         for rows in self.points.values()]
            proc, df = process_variance(per_point)
            if proc is None and f"process:{q}" in prior:  # every run one process: the prior's
                proc, df = prior[f"process:{q}"].var, prior[f"process:{q}"].df
            level = run_variance(per_point, proc)
            if level.var is None and proc is None:
                # every run one process: the processes' variance is not told apart from the
                # runs', but their sum is what one more run varies by (series_total)
                total = run_variance(per_point, 0.0)
                if total.var is not None:
                    level, proc, df = RunLevel(total.var, total.df, "series_total"), 0.0, 0
            if level.var is None:  # no estimate of its own (one run, or no point with two)
                level = prior.get(q) or RunLevel(None, 0, "none")
            else:  # the runs' common part, with few degrees of freedom, pooled with the prior's
                level = with_prior(level, prior.get(q))
            if level.var is None:  # nothing known of the runs' variance: the processes'
                level = RunLevel(0.0, 0, "none")  # interval only, and the row says so
            out[q] = (level, proc, df)
        return out


def _point_name(stage: str, key: tuple) -> str:
    return ", ".join(f"{c}={x}" for c, x in zip(STAGES[stage].key_columns, key, strict=True)
                     if x is not None)


def _point_rows(series: _Series, key: tuple, levels: dict) -> list[dict]:
    rows = series.points[key]
    stage = series.stage
    latest_row = next((row for v, row in reversed(rows) if v == series.latest), rows[-1][1])
    base = {"stage": stage, **dict(zip(STAGES[stage].key_columns, key, strict=True))}
    measured = [(v, row) for v, row in rows if row.get("status") == "ok"]
    carried = next((row for _, row in reversed(measured)), latest_row)
    pooled = {**base, "kind": "pooled", "version": series.latest,
              **{c: carried.get(c) for c in CARRIED}, "in_latest":
              latest_row.get("status") == "ok", "runs": len(measured),
              "processes": sum(int(r.get("workers") or 1) for _, r in measured) or None}
    latest_failed = any(v == series.latest for v, _ in rows) and \
        latest_row.get("status") not in ("ok", *NOT_REACHED)
    if not measured or latest_failed:  # no run measured it, or the latest run failed it
        # (an error, oom, unavailable: the point's evidence now): its status says why
        return [{**pooled, "in_latest": False, **{c: latest_row.get(c) for c in (
            "status", "cause", "budget_left_s", "reason")}}]
    pooled["status"] = "ok"
    out = []
    run_rows = {v: {**base, "kind": "run", "version": v, "runs": 1,
                    "processes": int(r.get("workers") or 1), "status": "ok",
                    "under_load": series.load.get(v), **{c: r.get(c) for c in CARRIED}}
                for v, r in measured}
    for q, (column, (low, high), _) in QUANTITIES.items():
        found = _runs_of(rows, q)
        if not found:
            continue
        for v, _, r in found:
            run_rows[v].update({column: r[column], low: r.get(low), high: r.get(high)})
            if q in RUNS_OF:
                run_rows[v][RUNS_OF[q]] = 1
        if q in RUNS_OF:
            pooled[RUNS_OF[q]] = len(found)
        if _is_reference(carried) and q == "ratio":
            pooled.update({column: 1.0, low: 1.0, high: 1.0, PI[q][0]: 1.0, PI[q][1]: 1.0})
            continue
        level, proc, df = levels[q]
        if series.order.index(key) in level.outliers:  # its runs spread beyond the stage's
            pooled["outlying"] = ";".join(filter(None, [pooled.get("outlying"), q]))
        next_w = int(latest_row.get("workers") or found[-1][1].processes)
        values = [math.exp(r.log_value) for _, r, _ in found]
        try:
            result = pool([r for _, r, _ in found], level, proc, df, next_w)
        except OverflowError:  # an interval past floating point: no run measured that
            point = _point_name(stage, key)
            raise ValueError(
                f"{stage} ({point}): its runs' {column} values " + ", ".join(
                    f"{x:.3g} (v{v})" for (v, _, _), x in zip(found, values, strict=True))
                + f" with the run-level sd pooled over all of the stage's points ("
                f"{math.sqrt(level.var or 0):.3g} in log) give an interval beyond floating "
                "point: a value of these runs, here or at another point, is no measurement; "
                "`inferlab history` shows each version's") from None
        if q in SPREAD:
            pooled[SPREAD[q]] = max(values) / min(values) - 1 if len(values) >= 2 else None
        pooled[RUN_SD[q]] = None if level.origin == "none" else math.sqrt(level.var)
        if q in COMMON_SD:
            pooled[COMMON_SD[q]] = None if level.common is None else math.sqrt(level.common)
        if q == "median_ms":
            pooled["run_sd_origin"] = level.origin
            pooled["prior_source"] = "; ".join(level.source) or None
            pooled["median_ms_new"] = values[-1]
        if result is None:  # no variance known to pool with: the runs' geometric mean,
            # and no interval (the row says ``run_sd_origin`` none; nothing is made up)
            pooled[column] = math.exp(sum(r.log_value for _, r, _ in found) / len(found))
            continue
        pooled.update({column: result.value, low: result.ci[0], high: result.ci[1],
                       PI[q][0]: result.pi[0], PI[q][1]: result.pi[1]})
        for v, run, _ in found:  # each run against what the others predict
            others = [r for w, r, _ in found if w != v]
            try:
                alone = pool(others, level, proc, df, run.processes) if others else None
            except OverflowError:  # the others' interval is unbounded: nothing is outside
                alone = None
            if alone is not None:
                run_rows[v][f"outside_pi_{q}"] = not (alone.pi[0] <= math.exp(run.log_value)
                                                      <= alone.pi[1])
    latest_ok = carried.get("median_ms")
    for rate in RATES:
        if carried.get(rate) is not None and latest_ok and pooled.get("median_ms"):
            pooled[rate] = carried[rate] * latest_ok / pooled["median_ms"]
    for frac, rate in FRACTIONS.items():
        roofs = [r[rate] / r[frac] for _, r in measured
                 if is_number(r.get(rate)) and is_number(r.get(frac)) and r[frac] > 0]
        if roofs and is_number(pooled.get(rate)):
            pooled[frac] = pooled[rate] / max(roofs)
    for r in run_rows.values():
        flags = [f for q in QUANTITIES if (f := r.pop(f"outside_pi_{q}", None)) is not None]
        r["outside_pi"] = any(flags) if flags else None
        out.append(r)
    return [pooled, *out]


def pooled(stage: str, versions: list, prior: dict[str, RunLevel]) -> tuple[list[dict], dict]:
    """The rows of ``stage``'s points over ``versions`` (its runs made alike, oldest
    first: the latest is the last) and the run levels they carry."""
    series = _Series(stage, versions, versions[-1].entry)
    levels = series.run_levels(prior)
    return [row for key in series.order for row in _point_rows(series, key, levels)], levels


def prior_of(root, key: str, stage: str, current: list,
             runs: int = 1) -> tuple[dict[str, RunLevel], list[str]]:
    """quantity -> the run-level variance of the committed series of machines of this
    kind (every group of two or more runs made alike, but the current one), pooled. For a
    series of ``runs`` >= 2 runs the processes' variance is its own: the prior's run level
    only (its common part lends the series' few degrees of freedom its own: ``with_prior``)."""
    # the run-level variance of each quantity, and ("process:<q>") its process variance,
    # for a series whose runs have one process each
    levels: dict[str, list[RunLevel]] = {k: [] for q in QUANTITIES for k in (q, f"process:{q}")}
    notes = []
    mine = {v.entry["sha256"] for v in current}
    for other in kind_keys(root, key):
        versions = kept_versions(root, other, stage)
        kept = _once([v for v in versions.found if v.entry["sha256"] not in mine])
        groups: list[list] = []
        for v in kept:
            group = next((g for g in groups if made_alike(g[0].entry, v.entry)), None)
            if group is None:
                groups.append([v])
            else:
                group.append(v)
        # the latest groups: the harness as it is now, not as it was many rounds ago
        for group in [g for g in groups if len(g) >= 2][-PRIOR_GROUPS:]:
            series = _Series(stage, group, group[-1].entry)
            names = f"{other} {stage} v" + ",".join(str(v.entry["version"]) for v in group)
            for q, (level, proc, df) in series.run_levels({}).items():
                if level.origin == "series":
                    levels[q].append(RunLevel(level.var, level.df, "prior", (names,),
                                                common=level.common, common_df=level.common_df))
                if proc is not None:
                    levels[f"process:{q}"].append(RunLevel(proc, df, "prior", (names,)))
        notes += versions.left_out
    return {q: combine_priors(found) for q, found in levels.items()
            if runs < 2 or not q.startswith("process:")}, notes


def _once(versions: list, ctx=None) -> list:
    """Each artifact once: the same bytes registered again are one measurement, which two
    runs would count twice (the later version is kept, the latest among them)."""
    later = {v.entry["sha256"]: v for v in versions}
    for v in versions:
        if later[v.entry["sha256"]] is not v and ctx is not None:
            ctx.log(f"[series] left out: {ctx.key} {v.entry['stage']} v{v.entry['version']}: "
                    f"the same artifact as v{later[v.entry['sha256']].entry['version']} (one "
                    "measurement: pooled once)")
    return [v for v in versions if later[v.entry["sha256"]] is v]


def run(params: Params, ctx) -> list[dict]:
    rows: list[dict] = []
    for stage in TIMED:
        latest = ctx.evidence[stage].entry
        history = kept_versions(ctx.root, ctx.key, stage)
        for note in history.left_out:
            ctx.log(f"[series] left out: {note}")
        alike = _once([v for v in history.found if made_alike(v.entry, latest)
                       and v.entry["version"] <= latest["version"]], ctx)[-params.max_runs:]
        others = [v for v in history.found if not made_alike(v.entry, latest)
                  and hardware(v.entry["provenance"].get("environment") or {})
                  != hardware(latest["provenance"].get("environment") or {})]
        if others:
            ctx.log(f"[series] {stage}: {len(others)} versions of {ctx.key!r} were made on other "
                    "hardware than the latest (another machine under this id?): not pooled")
        if not alike or alike[-1].entry["sha256"] != latest["sha256"]:
            why = next((n for n in history.left_out  # the version's own reason, else
                        if n.startswith(f"{ctx.key} {stage} v{latest['version']}:")  # the
                        or n.startswith(f"{ctx.key}: ")),  # register's (an unreadable line)
                       f"{ctx.key} {stage} v{latest['version']}: not in the register")
            raise ValueError(f"the latest {stage} cannot be pooled: {why}. Rerun it here "
                             f"(snakemake --forcerun {stage})")
        # the prior of this kind: for a first run; for a series whose points have no two
        # runs (no estimate of its own), its run level only (its processes are its own)
        prior, notes = prior_of(ctx.root, ctx.key, stage, alike, runs=len(alike))
        for note in notes:
            ctx.log(f"[series] prior: left out {note}")
        found, levels = pooled(stage, alike, prior)
        ctx.log(f"[series] {stage}: {len(alike)} run(s) v" + ",".join(
            str(v.entry["version"]) for v in alike) + "; run-level sd " + ", ".join(
            f"{q} {math.sqrt(lv.var):.1%} ({lv.origin})" if lv.origin != "none"
            else f"{q} unknown (no series of its own, no prior of its kind: process-level "
            "intervals only)" for q, (lv, _, _) in levels.items()
            if any(is_number(r.get(QUANTITIES[q][0])) for r in found)))
        for q in levels:
            names = [_point_name(stage, _key(r, stage)) for r in found if r["kind"] == "pooled"
                     and q in (r.get("outlying") or "").split(";")]
            if names:
                ctx.log(f"[series] {stage}: {q}: the runs of {'; '.join(names)} spread beyond "
                        f"the stage's other points (chi-square, {ALPHA * 100:g} % family-wise): "
                        "they widen every point's interval (`outlying` in series.csv)")
        rows += found
    return rows
