"""manuscript -> manuscript.json: the chapter's four tables (Markdown and LaTeX) and every
number it cites, named, with provenance, from this key's artifacts
(inferlab.presentation.manuscript).

The artifact holds the tables' cells, the numbers and the sha256 of each file derived from
it; the runner writes those files (``derived_files``) into results/{key}/manuscript/ after
the artifact is registered: tables.md, tables.tex, numbers.json and numbers.tex.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferlab.core import layout
from inferlab.evidence.loading import device_of
from inferlab.evidence.register import Register
from inferlab.judging.claims import load
from inferlab.presentation.manuscript import (
    Chapter,
    backends_table,
    decode_table,
    derived_files,
    file_hashes,
    named_numbers,
    prefill_table,
    traffic_table,
)

__all__ = ["Params", "run", "derived_files"]


@dataclass(frozen=True)
class Params:
    """The traffic section: the model's query tile and the chapter's lengths."""

    block_q: int
    lengths: tuple[int, ...]

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        return cls(int(cfg["traffic"]["block_q_model"]),
                   tuple(int(t) for t in cfg["traffic"]["model_lengths"]))


def run(params: Params, ctx) -> dict:
    stand_in = load().fp16_stand_in
    device = device_of(ctx.evidence["probe"], ctx.key)
    chapter = Chapter(stand_in.get(device, "float32"), params.block_q, params.lengths)
    data = ctx.inputs
    commits = {(e["stage"], e["version"]): e["provenance"].get("git_commit")
               for e in Register(ctx.root, ctx.key).history()}
    machine, grid = layout.split_key(ctx.key)
    manuscript = {
        "key": ctx.key, "machine": machine, "grid": grid, "dtype": chapter.dtype,
        "claims": ctx.evidence["claims"].describe(ctx.root),
        "tables": [traffic_table(data["traffic"].frame, chapter),
                   prefill_table(data["prefill"].frame, chapter),
                   backends_table(data["probe"], chapter),
                   decode_table(data["decode"].frame, chapter)],
        "numbers": named_numbers(data["claims"], commits)}
    return {**manuscript, "files": file_hashes(manuscript)}
