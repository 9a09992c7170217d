"""Prefill on the page: the speed-up figure (the claims' own rows against the chapter's
ranges), the memory figure, the raw rows of the latest run (the series section pools the runs)."""

from __future__ import annotations

from markupsafe import Markup

from inferlab.presentation import figures as plots
from inferlab.presentation import sections
from inferlab.presentation.report_tables import raw_block

SECTION = {"id": "prefill", "title": "Prefill", "caption": None}
COLUMNS = {
    "impl": "implementation", "block_q": "B", "dtype": "dtype", "causal": "mask", "T": "tokens",
    "median_ms": "median (ms)", "ci_low_ms": "95% low (ms)", "ci_high_ms": "95% high (ms)",
    "rounds": "rounds", "converged": "converged", "noisy": "noisy",
    "ratio": "÷ naive", "ratio_ci_low": "95% low", "ratio_ci_high": "95% high",
    "ratio_run_sd": "run-level sd (log)",
    "causal_over_full": "causal ÷ full",
    "peak_extra_bytes": "peak extra (MiB)", "achieved_gflops": "GFLOP/s",
    "frac_matmul_ceiling": "of matmul peak", "kernel": "kernel", "status": "status"}
SPEEDUP, MEMORY = "prefill-speedup", "prefill-memory"


def figure_of(check) -> str:
    """Memory claims: the memory figure; every other prefill claim: the speed-up figure."""
    return MEMORY if check.measure.column.endswith("_bytes") else SPEEDUP


def figures(page: sections.Page) -> list[dict]:
    bands = plots.speedup_bands(page.claims)
    ranges = "".join(f" ({name}: {lo}–{hi}×)" for name, (lo, hi) in bands.items())
    speedup = Markup(
        "Ratio of median times with the causal mask, as each claim computed it on the\n"
        "rows it judged: naive ÷ the fastest fused SDPA kernel (above 1: the fused kernel is "
        "faster)\nand plain tiling ÷ naive (above 1: tiling is slower), per dtype (line style). "
        "Shaded bands:\nthe chapter's claimed ranges{}. Bars:\nthe claim's 95 % interval of each "
        "value, where the claim gives one. {}").format(ranges, sections.NOISY_NOTE)
    memory = Markup(
        "Memory each implementation allocates beyond its inputs and output, causal mask,\n"
        "log-log. The dotted lines have the slopes of S and S²: naive attention's score matrix "
        "grows\nlike S², a fused kernel's memory like S.")
    return [sections.figure([plots.speedup_figure(k.results, k.key, bands) for k in page.keys],
                         speedup, SPEEDUP, "Speed-up against tokens"),
            sections.figure([plots.memory_figure(f, key) for key, f in
            page.frames("prefill").items()],
                         memory, MEMORY, "Peak extra memory against tokens")]


def tables(page: sections.Page) -> list[dict]:
    present = page.present("prefill")
    return [sections.raw([raw_block(k.key, "prefill", k.frame("prefill"), COLUMNS)
                       for k in present])]
