"""A claims.json entry in words: why its verdict, what it was judged on, what the sentence
needs. claims.json holds values, enums and references (``inferlab.judging.verdicts``);
this module is the one place that says them, for the report, the audit and the CLI.
"""

from __future__ import annotations

from inferlab.judging.claims import Check, Claim, Expect, Premise
from inferlab.judging.numtext import format_value
from inferlab.judging.rule import region
from inferlab.judging.selection import describe
from inferlab.judging.verdicts import SUMMARY_COLUMNS

# a row's status and cause column in words (inferlab.measurement.status)
STATUS_WORDS = {("dropped", "budget"): "dropped: the stage's time budget was spent",
                ("dropped", "slow_path"): "dropped: this dtype's matmul is on a slow path here",
                ("dropped", "killed"): "dropped: the timing worker was killed",
                ("stopped", "step_limit"): "stopped: the stage reached its limit first",
                ("unavailable", "backend_refused"): "unavailable: the backend refused",
                ("unavailable", "no_cuda_build"):
                    "unavailable: a CUDA-only kernel, and this PyTorch build has no CUDA",
                ("unavailable", "no_cuda_device"):
                    "unavailable: it needs a CUDA device, and this process has none",
                ("unavailable", "not_on_cuda"):
                    "unavailable: a CUDA-only kernel, and the tensors are not on CUDA",
                ("unavailable", "no_triton"): "unavailable: Triton is not installed",
                ("unavailable", "triton_driver"):
                    "unavailable: Triton cannot start its CUDA driver here",
                ("oom", "memory"): "out of memory", ("error", "exception"): "an error",
                ("error", "inexact"): "our kernel's output is inexact here (against float64)"}
KIND_WORDS = {"not_in_grid": "not in this grid",
              "dropped_by_budget": "dropped by the stage's time budget",
              "stopped_at_limit": "stopped at the stage's limit",
              "device_cannot": "this device cannot run it",
              "upstream_failed": "an upstream stage or row failed",
              "too_few_runs": "too few runs", "not_physical": "not physical",
              "not_applicable": "not applicable",
              "premise_fails": "a premise it rests on does not hold here",
              "premise_unmeasured": "nothing here measures a premise it rests on"}
DEVICE = {"cuda": "CUDA", "cpu": "CPU"}


def _values(values) -> str:
    return ", ".join(describe(v) for v in values) or "none"


STATUS_ALONE = {status: words for (status, _), words in STATUS_WORDS.items()}


def status_text(entry: dict) -> str:
    """'3 row(s) dropped: the stage's time budget was spent (0 s left) (naive, tiled)'."""
    words = STATUS_WORDS.get((entry["status"], entry.get("cause"))) or (
        STATUS_ALONE.get(entry["status"]) if entry.get("cause") is None else
        f"{entry['status']} ({entry['cause']})")
    if entry.get("budget_left_s") is not None:
        words += f" ({format_value(entry['budget_left_s'])} s left)"
    impls = f" ({_values(entry['impl'])})" if entry.get("impl") else ""
    return f"{entry['rows']} row(s) {words}{impls}"


def missing_text(entry: dict) -> str:
    """'8192: in prefill, 1 row(s) dropped: the stage's time budget was spent (0 s left)
    (tiled)', or '8192: not in this grid' where no row says why."""
    head = f"{describe(entry.get('value'))}: " if "value" in entry else ""
    if entry.get("reading"):  # an ok row whose reading the stage did not take
        return (f"{head}{entry['rows']} row(s) timed, its {entry['reading']} reading not "
                "taken (a stage reads after its timings and stops reading at its limit)")
    detail = "; ".join(map(status_text, entry.get("statuses", [])))
    stage = f"in {entry['stage']}, " if entry.get("stage") else ""
    return head + (stage + detail if detail else KIND_WORDS[entry["kind"]])


def premise_text(cause: dict, claim: Claim | None = None) -> str:
    """A premise_fails or premise_unmeasured cause in words: what the premise says, and why
    it does not hold here (its check's value against what it needs, or the measurement that
    refuted it and what would make that a check), or that nothing here measures it, from
    the claim's premises (claims.yaml)."""
    premise = next((p for p in (claim.check.premises if claim is not None and claim.check
                                else ()) if p.name == cause["premise"]), None)
    says = f": {premise.says}" if premise else ""
    if cause["kind"] == "premise_unmeasured":
        text = f"nothing here measures its premise {cause['premise']}{says}"
        if premise is not None:
            text += (f"; it was measured only on {', '.join(premise.refuted_on)}, where it "
                     f"did not hold ({premise.measured}); what would judge it: "
                     f"{premise.to_judge}")
        return text
    if cause.get("machine"):
        text = f"its premise {cause['premise']} was refuted by a measurement on " \
               f"{cause['machine']}{says}"
        if premise is not None:
            text += f"; measured: {premise.measured}; what would judge it: {premise.to_judge}"
        return text
    state = {"not reproduced": "does not hold here",
             "within noise here": "is not established here (within noise)"}.get(
        cause.get("verdict"), "does not hold here")
    ci, value = cause.get("interval"), cause.get("value")
    ci_text = f" (95 % interval {format_value(ci)})" if ci and ci[0] != ci[1] \
        and ci != value else ""
    needs = f", needs {describe_expect(premise.check.expect)}" if premise else ""
    return (f"its premise {cause['premise']} {state}{says}; its value here is "
            f"{format_value(value)}{ci_text}{needs}")


def premises_text(check: Check) -> str:
    """'judged only where its premises are shown to hold: NAME (its check: ...), NAME (no
    check: refuted on M, measured nowhere else)', and the premise a question asks about."""
    def one(p: Premise) -> str:
        if p.check is None:
            return f"{p.name} (no check: refuted on {', '.join(p.refuted_on)}, measured " \
                   "nowhere else)"
        m = p.check.measure
        quantity = m.column + (f" over {m.over}" if m.over else "")
        return f"{p.name} ({quantity} {describe_expect(p.check.expect)})"
    if not check.premises:
        return ""
    asks = f"; where {check.asks} does not hold the answer is no" if check.asks else ""
    return ("judged only where its premises are shown to hold: "
            + ", ".join(map(one, check.premises)) + asks)


def cause_text(cause: dict, key: str = "this key", artifact: dict | None = None,
               claim: Claim | None = None) -> str:
    """Why a claim is not measurable here, from its cause (inferlab.judging.causes)."""
    kind, path = cause["kind"], (artifact or {}).get("path", "its artifact")
    if kind in ("premise_fails", "premise_unmeasured"):
        return premise_text(cause, claim)
    if cause.get("missing") and cause.get("column"):
        return (f"needs {cause['column']} = {_values(m['value'] for m in cause['missing'])} "
                f"({'; '.join(map(missing_text, cause['missing']))}; this grid has "
                f"{_values(cause.get('grid', []))})")
    if cause.get("missing"):
        return "; ".join(map(missing_text, cause["missing"]))
    if cause.get("left_out"):
        return "no row is ok: " + "; ".join(map(status_text, cause["left_out"]))
    if kind == "upstream_failed" and cause.get("state") == "missing":
        return f"stage {cause['stage']} has not run on {key}: {path} is missing"
    if kind == "upstream_failed":
        return f"{path} cannot be read: {cause.get('error')}"
    if kind == "device_cannot":
        return f"needs a {DEVICE[cause['needs']]} device; {key} ran on {cause['device']}"
    if kind == "not_physical":
        return (f"value {format_value(cause['value'])} is above {cause['valid_max']:g}, which "
                "is not physical: the ceiling it is a fraction of is too low (a probe error)")
    if kind == "too_few_runs":
        return ("needs two runs made with the same code, config and hardware; the series of "
                f"{key} has one")
    if kind == "not_in_grid" and cause.get("stage") == "probe":
        return f"probe.json has no {cause['column']}: not probed"
    if kind == "not_in_grid" and cause.get("column") == "dtype":
        substitute = " (the fp16 stand-in here)" if cause.get("stand_in") else ""
        return (f"no {_values(cause['values'])} rows{substitute}: this machine did not run "
                f"{_values(cause['values'])}; no other dtype is used in its place")
    if kind == "not_in_grid" and cause.get("where"):
        wanted = ", ".join(f"{c}={_wanted(v)}" for c, v in cause["where"].items())
        return f"no {cause.get('dtype') + ' ' if cause.get('dtype') else ''}rows with {wanted}"
    if kind == "not_in_grid" and cause.get("side"):
        return f"no {cause['side']} rows among the selected rows"
    if kind == "not_in_grid" and cause.get("join"):
        return f"numerator and denominator rows share no values of {cause['join']}"
    if kind == "not_in_grid" and cause.get("needs_values"):
        return (f"a log-log slope needs at least two values of {cause['column']}; this grid "
                f"has {_values(cause.get('grid', []))}")
    if kind == "not_in_grid":
        return f"no rows at {_values(cause.get('values', []))}"
    if kind == "not_applicable" and cause.get("column"):
        return (f"every selected row has an empty {cause['column']} ({cause.get('rows', 0)} "
                "row(s)): it does not apply to them")
    return KIND_WORDS[kind]


def _wanted(value) -> str:
    if isinstance(value, dict):
        return f"[{describe(value.get('min', ''))}, {describe(value.get('max', ''))}]"
    return "|".join(describe(v) for v in value)


def describe_expect(e: Expect) -> str:
    """The expectation in words, e.g. 'between 7.8 and 13.5 (as printed: 7.75 to 13.55)'."""
    if e.kind == "approx_at":
        return (f"as printed {[x for _, x in e.points]} at "
                f"[{', '.join(describe(k) for k, _ in e.points)}]")
    if e.kind == "finite":
        return "a finite number (no inf or NaN)"
    lo, hi, _, _ = region(e)
    if e.kind == "between":
        widened = f" (as printed: {lo:g} to {hi:g})" if any(e.printed) else ""
        return f"between {e.bounds[0]:g} and {e.bounds[1]:g}{widened}"
    if e.kind == "max":
        return f"at most {e.target:g}" + (f" (as printed: {hi:g})" if e.printed[1] else "")
    if e.kind == "min":
        return f"at least {e.target:g}" + (f" (as printed: {lo:g})" if e.printed[0] else "")
    if e.kind == "approx":
        return f"{e.target:g} as printed ({lo:g} to {hi:g})"
    if e.kind == "equals":
        return f"equal to {e.target!r}"
    return {">0": "above 0", ">1": "above 1", "<1": "below 1"}.get(e.target, f"{e.target}")


def judged_on_text(judged_on) -> str:
    """'impl=sdpa_flash; T=1024,2048; dtype=float32'."""
    return "; ".join(f"{c}={','.join(describe(v) for v in values)}"
                     for c, values in (judged_on or {}).items())


# How the claims matrix's cell names a column of what it judged: a short word before the
# values, or none where the values say it (an implementation, a dtype, the mask).
_BRIEF = {"T": "T", "cache_len": "cache", "batch": "batch", "block_q": "B_q",
          "splits": "splits", "score_scale": "scale", "quantity": "", "impl": "",
          "dtype": "", "backend": "", "check": ""}


def judged_on_brief(judged_on) -> str:
    """What a claim was judged on, as the claims matrix's cell shows it, in words that can
    wrap: 'sdpa_flash · T 1024, 2048 · batch 1 · float32 · causal'. The full 'column=value'
    text stays in the claim's provenance (``judged_on_text``)."""
    parts = []
    for column, values in (judged_on or {}).items():
        if column == "causal" and set(values) <= {True, False}:
            parts.append(", ".join("causal" if v else "full" for v in values))
            continue
        word = _BRIEF.get(column, f"{column} =")
        text = ", ".join(describe(v) for v in values)
        parts.append(f"{word} {text}" if word else text)
    return " · ".join(parts)


def row_names(rows: list[dict], limit: int = 6) -> str:
    """'impl=naive T=4096, ...': rows of claims.json by the columns that tell them apart."""
    cols = [c for c in SUMMARY_COLUMNS if len({str(r.get(c)) for r in rows}) > 1] or \
        [c for c in SUMMARY_COLUMNS if rows and c in rows[0]][:2]
    names = [" ".join(f"{c}={describe(r.get(c))}" for c in cols) for r in rows[:limit]]
    return ", ".join(names) + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def part_text(part: dict, claim: Claim | None, several: bool,
              rows: list[dict] | None = None) -> str:
    """One dtype's judgement: value, interval, rows, what was left out, what it needs."""
    label = f"{part['dtype']}: " if several else ""
    if part.get("nonfinite"):
        bad = part["nonfinite"]
        named = f": {row_names(rows)}" if rows else ""
        return (f"{label}{bad['column']} is NaN or infinite in {bad['rows']} row(s){named}; a "
                "computation that overflowed does not pass")
    ci = part.get("interval")
    ci_text = f" (95 % interval {format_value(ci)})" if ci and ci[0] != ci[1] else ""
    notes = []
    by_column: dict[str, list] = {}
    for m in part["missing"]:
        by_column.setdefault(m.get("column", "?"), []).append(m)
    for column, entries in by_column.items():
        notes.append(f"{len(entries)} value(s) of {column} not measured here: "
                     + "; ".join(map(missing_text, entries)))
    if part["left_out"]:
        notes.append(f"{sum(s['rows'] for s in part['left_out'])} row(s) left out by status ("
                     + "; ".join(map(status_text, part["left_out"])) + ")")
    check = claim.check if claim is not None else None
    if part["not_applicable"]:
        column = check.measure.column if check is not None else "value"
        notes.append(f"{part['not_applicable']} row(s) have no {column} (not applicable)")
    if part.get("absent"):
        notes.append(f"{_values(part['absent'])} not measured here")
    needs = ("no test: the value is the answer" if check is not None and check.expect is None
             else f"every value {describe_expect(check.expect)}" if check is not None
             else None)
    if needs and not isinstance(part["value"], list):
        needs = needs.replace("every value", "the value", 1)
    on = judged_on_text(part.get("judged_on"))
    return "; ".join([f"{label}value {format_value(part['value'])}{ci_text} over "
                      f"{part['rows']} row(s)" + (f" ({on})" if on else ""), *notes,
                      *([f"needs {needs}"] if needs else [])])


ELSEWHERE = {"not comparable on this device": "the sentence is about a {about} device and "
             "{key} ran on {device}: the value here is shown beside it, not judged",
             "about the author's code": "the sentence is about the chapter author's own code: "
             "this project's implementation's value is shown beside it, not judged"}
ANSWER_WORDS = {"yes": "yes", "no": "no", "undecided": "undecided (within noise)",
                "value": "the value here"}


def integrity_text(integrity: dict | None) -> str:
    if not integrity:
        return ""
    if integrity["state"] == "not_registered":
        return "WARNING: this artifact is not in the evidence register. "
    return (f"WARNING: the results file's sha256 {integrity['sha256_now']} no longer matches "
            f"register version {integrity['version']} ({integrity['sha256']}). ")


def reason_text(result: dict, claim: Claim | None = None, key: str = "this key",
                source: str | None = None) -> str:
    """Why this verdict, in words, from a claims.json entry (``claim``: its claims.yaml
    entry, for what the sentence needs and who reported it)."""
    verdict = result["verdict"]
    if verdict == "not checkable":
        who = source or (claim.source if claim is not None else None) or "others"
        return f"reported by {who}; this pipeline's data cannot test it"
    text = integrity_text(result.get("integrity"))
    if result.get("cause"):
        text += cause_text(result["cause"], key, result.get("artifact"), claim)
    else:
        parts = result.get("judged") or []
        several = len(parts) > 1 or (claim is not None and claim.check is not None
                                     and claim.check.dtype == "each")
        text += " | ".join(part_text(p, claim, several, result.get("rows")) for p in parts)
    about = claim.check.device if claim is not None and claim.check is not None else None
    gpu = result.get("gpu")
    if verdict == "not comparable on this device" and gpu:
        return (text + f"; the sentence is about the chapter's GPU "
                f"({gpu['chapter_multiprocessors']} multiprocessors) and {key} ran on "
                f"{gpu['name']} ({gpu['multiprocessors'] or 'multiprocessors not recorded'}): "
                "the value here is shown beside it, not judged")
    if verdict in ELSEWHERE:
        return text + "; " + ELSEWHERE[verdict].format(about=DEVICE.get(about or "", "another"),
                                                       key=key, device=result.get("device"))
    if result.get("answer"):
        return f"{text}; answered here: {ANSWER_WORDS[result['answer']]}; judged on {key}"
    if result.get("cause"):
        return text
    return f"{text}; judged on {key}"
