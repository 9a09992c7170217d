"""Decode on the page: time and achieved bandwidth against the cache length beside the
model's floor and the copy ceiling, the raw rows of the latest run (the series section
pools the runs)."""

from __future__ import annotations

from markupsafe import Markup

from inferlab.presentation import figures as plots
from inferlab.presentation import sections
from inferlab.presentation.report_tables import raw_block

SECTION = {"id": "decode", "title": "Decode", "caption": None}
COLUMNS = {
    "impl": "implementation", "splits": "splits", "cache_len": "cache (keys)", "batch": "batch",
    "dtype": "dtype", "median_ms": "median (ms)", "rounds": "rounds", "converged": "converged",
    "noisy": "noisy", "ratio": "÷ fused", "ratio_ci_low": "95% low", "ratio_ci_high": "95% high",
    "ratio_run_sd": "run-level sd (log)",
    "cache_bytes": "cache (MiB)", "achieved_gbs": "achieved (GB/s)",
    "frac_copy_ceiling": "of copy ceiling", "floor_ms": "floor (ms)", "kernel": "kernel",
    "status": "status"}


def figures(page: sections.Page) -> list[dict]:
    copy = {k.key: ((k.evidence["probe"].data or {}).get("ceilings") or {}).get("copy_gbs")
            for k in page.keys}
    caption = Markup(
        "One decode step against the cache length, one column per batch: time (top)\n"
        "beside the model's floor (the cache read at the copy bandwidth measured on the "
        "machine), and\nthe bandwidth achieved (bottom) beside that copy ceiling. Colour: "
        "split-KV by its number of\nsplits (lighter: more) and each fused backend. {}"
    ).format(sections.NOISY_NOTE)
    return [sections.figure([plots.decode_figure(f, key, copy.get(key))
                          for key, f in page.frames("decode").items()], caption)]


def tables(page: sections.Page) -> list[dict]:
    present = page.present("decode")
    return [sections.raw([raw_block(k.key, "decode", k.frame("decode"), COLUMNS) for k in present])]
