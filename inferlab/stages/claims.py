"""claims -> claims.json: every claim of the chapter (claims.yaml) checked against this
machine's artifacts; the verdicts come from ``inferlab.claims.evaluate_machine``."""

from __future__ import annotations

from inferlab.claims import evaluate_machine
from inferlab.config import ClaimsParams


def run(params: ClaimsParams, ctx) -> dict:
    return evaluate_machine(ctx.root, ctx.machine)
