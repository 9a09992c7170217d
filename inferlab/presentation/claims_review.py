"""docs/claims-review.md: every claim's reading, for a reviewer to check against the seeds
(``inferlab claims --review``). Its scope and region are rendered from the check itself, so
the table says what the code judges, never a copy of it.
"""

from __future__ import annotations

from pathlib import Path

from inferlab.judging.claims import Check, ClaimsFile, Condition, load
from inferlab.judging.selection import describe
from inferlab.presentation.claim_text import describe_expect, premises_text
from inferlab.presentation.formats import md_cell, plain_text

REVIEW_FILE = Path("docs") / "claims-review.md"
# the columns of a check's rows that say the sentence's lengths and sizes
SIZES = ("T", "cache_len", "batch", "splits", "block_q", "block_k", "score_scale", "heads",
         "d", "block_q_model")
MASKED = {"prefill", "correctness", "traffic"}  # the stages whose rows have a mask
HEADER = """# Each claim's reading

Generated from `claims.yaml` (each claim's sentence from `docs/chapter/sentences.yaml`, where
it is stored) by `python -m inferlab claims --review`; do not edit (a test compares this
file with the generator's output). For each claim: the chapter's sentence,
the quantity the check judges, its scope (device class, dtype, mask, lengths and the other
rows it selects) and the region a value's 95 % interval must lie in, both rendered from
the check itself, and why that region is what the sentence says (the claim's
`reading.why`). A printed bound stands for every number that rounds to it; a logical
bound (1 for "slower") is exact (claims.yaml's header, "THE RULE").

Kinds: measured, model and arithmetic are judged on every machine; device-specific is
judged on a GPU like the chapter's (claims.yaml's `chapter_gpu`; `gpu: any`, a statement
about GPUs in general: on any GPU) and shown elsewhere ("not comparable on this device");
author-code is shown, never judged ("about the author's code"); reported is not checkable;
a question is answered, never "reproduced". A check that rests on a model's premises
(claims.yaml's `premises`) is judged only where something shows that they hold (a
premise's own check reproduced there), and is "not measurable here" elsewhere, whatever
its kind: where a premise does not hold, and where nothing measures it; a question that
asks whether a premise holds is answered "no" where it does not. A sentence that states
the chapter's model itself (its count, its asymptotics) rests on no premise: it is judged
on the model's rows, the same on every machine.

| id | kind | sentence | quantity | scope | region | why |
|---|---|---|---|---|---|---|
"""


def _values(cond: Condition) -> str:
    if cond.values is not None:
        return ", ".join(describe(v) for v in cond.values)
    return " to ".join(describe(v) for v in (cond.low, cond.high) if v is not None) \
        if cond.low is not None and cond.high is not None else \
        (f"≥ {describe(cond.low)}" if cond.low is not None else f"≤ {describe(cond.high)}")


def _conditions(check: Check) -> list[Condition]:
    scope = [Condition(c, values=v) for c, v in check.scope]
    return scope + list(check.rows.where)


def _device(kind: str, check: Check) -> str:
    if check.device is None:
        return "any device"
    device = check.device.upper()
    if kind == "device-specific" and check.gpu == "any":
        return f"any {device} GPU (elsewhere shown, not compared)"
    if kind == "device-specific":
        return f"{device} like the chapter's GPU (elsewhere shown, not compared)"
    return f"needs {device}"


DTYPES = {"fp16": "fp16's stand-in (float16 on CUDA, float32 on a CPU)",
          "16-bit": "16-bit (float16, else bfloat16)", "each": "each dtype, separately",
          "any": "any dtype"}


def _mask(check: Check) -> str:
    values = {v for c in _conditions(check) if c.column == "causal" for v in c.values or ()}
    if values == {True}:
        return "causal"
    if values == {False}:
        return "full"
    return "both masks" if check.stage in MASKED else "no mask"


def scope_text(kind: str, check: Check) -> str:
    """Device class; dtype; mask; lengths and sizes; the other rows it selects."""
    sizes = [f"{c.column} {_values(c)}" for c in _conditions(check) if c.column in SIZES]
    rows = [f"{c.column}={_values(c)}" for c in _conditions(check)
            if c.column not in SIZES and c.column != "causal"]
    m = check.measure
    if m.is_ratio:
        rows.append(f"{_side(m.numerator)} over {_side(m.denominator)} joined on "
                    f"{', '.join(m.join)}")
    if check.rows.best is not None:
        rows.append(f"fastest per {', '.join(check.rows.best.by)}")
    per = f"; per {', '.join(m.by)}" if m.by else ""
    parts = [_device(kind, check), DTYPES.get(check.dtype, f"{check.dtype} only"),
             _mask(check), "; ".join(sizes) or "every length", *rows,
             *filter(None, [premises_text(check)])]
    return f"{check.stage}: " + "; ".join(parts) + per


def _side(rows) -> str:
    where = ", ".join(f"{c.column}={_values(c)}" for c in rows.where) or "all rows"
    return f"({where}{', fastest' if rows.best else ''})"


def region_text(kind: str, check: Check | None) -> str:
    if check is None:
        return "— (not checkable)"
    stat = check.measure.stat
    prefix = {"range": "every value ", "spread": "the spread ", "loglog_slope": "the slope ",
              "at": "at each length "}.get(stat, "")
    if check.expect is None:
        return "— (answered with the value)"
    words = prefix + describe_expect(check.expect)
    return f"shown, not judged (would be: {words})" if kind == "author-code" else words


def review_markdown(claims_file: ClaimsFile) -> str:
    """The review table of every claim, as Markdown."""
    lines = []
    for c in claims_file.claims:
        reading = c.reading
        scope = scope_text(c.kind, c.check) if c.check else f"reported by {c.source}"
        lines.append("| " + " | ".join(md_cell(plain_text(str(x))) for x in (
            c.id, c.kind, c.sentence, reading.quantity if reading else "—", scope,
            region_text(c.kind, c.check), reading.why if reading else "—")) + " |")
    return HEADER + "\n".join(lines) + "\n"


def write_generated(root: Path | str, relative: Path, text: str, check: bool,
                    command: str) -> int:
    """Write a generated doc, or with ``check`` say whether the committed one is current."""
    path = Path(root) / relative
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if check:
        state = "current" if current == text else f"NOT current: run {command}"
        print(f"{relative}: {state}")
        return 0 if current == text else 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {relative}")
    return 0


def cli_review(root: Path | str, check: bool = False) -> int:
    """Write docs/claims-review.md (``check``: write nothing, exit 1 if it is not current)."""
    text = review_markdown(load(Path(root) / "claims.yaml"))
    return write_generated(root, REVIEW_FILE, text, check,
                           "python -m inferlab claims --review")
