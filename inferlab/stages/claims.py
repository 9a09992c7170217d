"""claims -> claims.json: every claim of the chapter (claims.yaml) judged on this results
key's artifacts, which the runner has read and checked against the register."""

from __future__ import annotations

from dataclasses import dataclass, field

from inferlab.judging.claims import ClaimsFile, load
from inferlab.judging.series_view import judged
from inferlab.judging.verdicts import evaluate_all


@dataclass(frozen=True)
class Params:
    """The claims stage is configured by claims.yaml (one of its code files), not config:
    loaded (and its column names checked) with the params, before any input is judged."""

    claims_file: ClaimsFile = field(compare=False)  # read from claims.yaml, not config

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        return cls(load())


def run(params: Params, ctx) -> dict:
    claims_file = params.claims_file
    # prefill and decode as the series pools them (a point the latest run dropped is still
    # measured), referenced as the series artifact
    return evaluate_all(claims_file.claims, judged(ctx.evidence), ctx.key, ctx.root,
                        claims_file.fp16_stand_in, claims_file.chapter_gpu)
