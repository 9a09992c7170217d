"""The traffic model on the page: the model's byte ratio beside the measured time ratios,
a roofline per machine (prefill's rates against the model's intensities under the probe's
ceilings), the raw rows."""

from __future__ import annotations

from markupsafe import Markup

from inferlab.presentation import figures as plots
from inferlab.presentation import roofline, sections
from inferlab.presentation.report_tables import raw_block

SECTION = {"id": "traffic", "title": "Traffic model", "caption": None}
COLUMNS = {
    "T": "tokens", "d": "d", "causal": "mask", "dtype": "dtype", "tile": "tile",
    "block_q_model": "model B_q",
    "model_ratio": "model ratio", "naive_ms": "naive (ms)", "fused_ms": "fused (ms)",
    "fused_impl": "fused kernel", "fastest_fused": "fastest fused",
    "measured_ratio": "measured ratio",
    "measured_ratio_ci_low": "95% low", "measured_ratio_ci_high": "95% high",
    "implied_block_q": "implied B_q (at T)",
    "implied_block_q_limit": "implied B_q (6B_q/d)", "note": "note"}
ROOFLINE = "traffic-roofline"
TRAFFIC_CAPTION = Markup(
    "The traffic model's naive ÷ tiled ratio of bytes moved, for the query tile it\n"
    "assumes (the model tile B_q of the rows below), one line per mask, from the lengths "
    "measured here to the chapter's 8,192;\ndashed: the model at the tile of a kernel that ran "
    "whose tile is known (PyTorch's CPU flash\nkernel's query and key/value splits, our Triton "
    "kernel's blocks; the rows' note says where\neach comes from); markers: the measured naive "
    "÷ fused time ratio per dtype, of the fastest fused kernel and of each kernel of known "
    "tile (the rows below have one per fused kernel that ran). The chapter's claim is that "
    "the second follows\nthe first in direction and order of magnitude.")
ROOFLINE_CAPTION = (
    "Each implementation's attained rate (its FLOPs over its median time, from\n"
    "prefill.csv; causal rows, whose FLOPs count the half of the score matrix the mask keeps)\n"
    "against its arithmetic intensity: those FLOPs over the bytes the traffic model says it\n"
    "moves, for the fused kernels at the tile of the kernel that ran where it is known (“tile\n"
    "known”: PyTorch's CPU flash kernel, our Triton kernel) and at the assumed B_q otherwise.\n"
    "The roof is the machine's own: its measured copy bandwidth (the slope) up to its matmul\n"
    "ceiling per dtype (the flat line; the tick is the ridge). Left of the ridge a kernel can at\n"
    "best move its bytes at the copy rate, so the byte ratio predicts the speed-up; right of it\n"
    "the matmul ceiling bounds it and the byte model does not predict the speed-up. Plain "
    "tiling\nand sdpa_math are not drawn: the model does not count the traffic of tiles or "
    "scores that\npass through main memory. {}")


def figures(page: sections.Page) -> list[dict]:
    frames = {stage: page.frames(stage) for stage in ("prefill", "traffic")}
    ceilings = {k.key: (k.evidence["probe"].data or {}).get("ceilings") or {}
                for k in page.keys}
    return [sections.figure([plots.traffic_figure(f, key)
                          for key, f in frames["traffic"].items()], TRAFFIC_CAPTION),
            sections.figure(roofline.roofline_figures(frames, ceilings),
                         Markup(ROOFLINE_CAPTION).format(sections.NOISY_NOTE), ROOFLINE,
                         "A roofline per machine")]


def tables(page: sections.Page) -> list[dict]:
    return [sections.raw([raw_block(k.key, "traffic", k.frame("traffic"), COLUMNS)
                       for k in page.present("traffic")])]
