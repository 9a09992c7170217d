"""The correctness checks on the page ("Exactness"): per check, implementation and dtype
the largest error, against float64 and against naive attention in the same dtype."""

from __future__ import annotations

import pandas as pd
from markupsafe import Markup

from inferlab.judging.numtext import format_value
from inferlab.presentation import sections
from inferlab.presentation.formats import table_cell

SECTION = {"id": "exactness", "title": "Exactness", "caption": Markup(
    "The largest error against a float64 reference, and that error divided by the error of\n"
    "ordinary attention in the same dtype (at most 2 is “within rounding”, the FlashAttention\n"
    "test criterion). Pair fraction: the share of block pairs a causal mask leaves to compute.")}
COLUMNS = {
    "check": "check", "impl": "implementation", "dtype": "dtype", "causal": "mask",
    "T": "tokens", "block_q": "B_q", "block_k": "B_k", "score_scale": "score scale",
    "splits": "splits", "max_abs_err": "error vs float64",
    "naive_same_dtype_err": "naive, same dtype", "pair_fraction": "pair fraction",
    "status": "status"}


def tables(page: sections.Page) -> list[dict]:
    """Per key, collapsed: the largest errors (the claims matrix gives the verdicts they
    decide), then the raw rows."""
    blocks = []
    for k in page.present("correctness"):
        table = exactness_table(k.frame("correctness"))
        blocks.append(sections.details("raw", f"{k.key}: the largest error of each check, "
                                       f"implementation and dtype ({len(table['rows'])} rows)",
                                       [sections.table(table)]))
    return [*blocks, page.raw("correctness", COLUMNS)]


def exactness_table(table) -> dict:
    """Per check, implementation and dtype: the largest error, against float64 and
    against naive attention in the same dtype (the 2× criterion)."""
    frame = table.frame
    rows = []
    for (check, impl, dtype), g in frame.groupby(["check", "impl", "dtype"], dropna=False):
        ratio = (g["max_abs_err"] / g["naive_same_dtype_err"]).max()
        pairs = g["pair_fraction"].dropna()
        cells = [check, impl, "—" if pd.isna(dtype) else dtype, f"{len(g):,}",
                 table_cell(g["max_abs_err"].max(), "num"), table_cell(ratio, "num"),
                 format_value([float(pairs.min()), float(pairs.max())]) if len(pairs) else "—"]
        rows.append({"cells": cells, "noisy": False})
    return {"columns": ["check", "implementation", "dtype", "rows", "largest error vs "
                        "float64", "÷ naive's error, same dtype", "pair fraction"], "rows": rows}
