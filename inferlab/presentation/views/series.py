"""The series on the page: per machine, every run's paired ratio beside the pooled value,
its confidence and prediction intervals (the figure), and the pooled points with what
they rest on (a collapsed table)."""

from __future__ import annotations

from markupsafe import Markup

from inferlab.presentation import figures as plots
from inferlab.presentation import sections
from inferlab.presentation.report_tables import raw_block

SECTION = {"id": "series", "title": "Series of runs",
           "caption": Markup(
               "A machine's evidence is its <em>series</em>: the runs of prefill and decode "
               "made with the same code, config, hardware and threads. Each point is pooled "
               "over them (random effects on the log scale: the run-level variance, which "
               "no process inside one run samples, estimated from the series, or for a "
               "first run a prior from the committed series of machines of the same "
               "kind). A whole run slower or faster at every point (another tenant) is "
               "told apart: that common part rests on the runs, not the points, so with "
               "few runs it widens the intervals (its sd in the table). The claims, the "
               "traffic comparison and the manuscript are judged on the pooled values.")}
COLUMNS = {
    "stage": "stage", "impl": "implementation", "T": "tokens", "cache_len": "cache (keys)",
    "batch": "batch", "splits": "splits", "causal": "mask", "dtype": "dtype", "runs": "runs",
    "processes": "processes", "median_ms": "median (ms)", "ci_low_ms": "95% CI low",
    "ci_high_ms": "95% CI high", "pi_low_ms": "next run low", "pi_high_ms": "next run high",
    "ratio": "ratio", "ratio_runs": "runs with a ratio", "ratio_ci_low": "95% CI low",
    "ratio_ci_high": "95% CI high",
    "ratio_pi_low": "next run low", "ratio_pi_high": "next run high",
    "run_sd_origin": "run-level sd from", "ratio_run_common_sd": "ratio's run-common sd (log)",
    "outlying": "runs spread beyond the stage's",
    "in_latest": "in the latest run",
    "status": "status"}


def figures(page: sections.Page) -> list[dict]:
    caption = Markup(
        "Each point's paired ratio in every run of the series (dots; a triangle: a run made "
        "beside a busy process; a hollow square: a run whose load was not recorded; a red "
        "ring: a run outside the 95 % prediction interval the "
        "other runs give), the pooled value (black), its 95 % confidence interval (thick "
        "bar: the machine's value, what a claim is judged on) and the 95 % prediction "
        "interval of one more run (thin bar).")
    return [sections.figure([plots.series_figure(f, key) for key, f in
                             page.frames("series").items()], caption)]


def tables(page: sections.Page) -> list[dict]:
    blocks = []
    for k in page.present("series"):
        frame = k.frame("series")
        pooled = frame.frame["kind"] == "pooled"
        table = type(frame)(frame.frame[pooled].reset_index(drop=True),
                            frame.nonfinite[pooled].reset_index(drop=True))
        blocks.append(raw_block(k.key, "series", table, COLUMNS))
    return [sections.raw(blocks)]
