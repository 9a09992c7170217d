"""``inferlab manuscript check FILE``: every number a chapter prints, checked by value.

The chapter (plain text or Markdown, like the seeds) is read sentence by sentence; each
sentence is found in docs/chapter/sentences.yaml by its shape (its text with the numbers
as ``#``), which names the claims that check it (or why none does) and the numbers of it
that are no measurement, by kind and value (a chapter number, an exercise number, the
experiment's setting: docs/chapter/not_claims.yaml lists the kinds). Each number of the
sentence, in order, must then be

* the next figure its claims print (``Claim.figures``, else the check's printed bounds:
  C13-19's 9.1, 10.3, 11.1, 11.5), with its unit and value as printed: in order, so a
  figure another claim of the sentence prints, or two figures swapped, do not pass;
* or a setting of one of its claims (a length of its scope, the blocks it selects);
* or a number the sentence declares as no measurement (each declared value once).

Anything else fails, naming the line, the number, the figure expected and the value
measured here (numbers.json of each results key). ``--strict`` also fails a figure whose
claim is "not reproduced" on the chosen key(s).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from inferlab.core import layout
from inferlab.presentation.chapter_text import Number, numbers_in, parse_figure, sentences, shape
from inferlab.presentation.coverage import NOT_CLAIMS_FILE, Entry, index, load_kinds, load_sentences

MAX_BYTES = 1_000_000  # the chapter is 25 kB; a file 40 times that is not a chapter
NOT_REPRODUCED = "not reproduced"


# ---------------------------------------------------------------- what a claim prints


def figures(claim) -> list[Number]:
    """The numbers the chapter prints for ``claim``, in order: its ``figures``, else the
    printed bounds of its check (a logical bound such as the 1 of "slower" is none)."""
    if claim.figures:
        return [parse_figure(f) for f in claim.figures]
    e = claim.check.expect if claim.check is not None else None
    if e is None:
        return []
    if e.kind == "between":
        values = [b for b, p in zip(e.bounds, e.printed, strict=True) if p]
    elif e.kind == "approx_at":
        values = [x for _, x in e.points] if e.printed[0] else []
    elif e.kind == "equals":
        values = [e.target] if isinstance(e.target, int | float) and \
            not isinstance(e.target, bool) else []
    elif e.kind in ("max", "min", "approx"):
        values = [e.target] if any(e.printed) else []
    else:
        values = []
    return [parse_figure(v) for v in values]


def settings(claim) -> list[float]:
    """The numbers of the claim's own setting: its scope and filters (8,192 tokens, blocks
    of 128), and the abscissae of approx_at."""
    check = claim.check
    if check is None:
        return []
    values = [v for _, vs in check.scope for v in vs]
    sides = [check.measure.numerator, check.measure.denominator] if check.measure.is_ratio \
        else []
    for cond in [c for rows in (check.rows, *sides) for c in rows.where]:
        values += list(cond.values or ()) + [b for b in (cond.low, cond.high) if b is not None]
    if check.expect is not None:
        values += [k for k, _ in check.expect.points]
    return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]


def _declared(left: list[tuple[str, object]], number: Number) -> str | None:
    """The kind of the first declared value ``number`` prints, taken from ``left`` (each
    declared value stands for one number of the sentence)."""
    for i, (kind, v) in enumerate(left):
        if (isinstance(v, str) and v == number.token) or (
                not isinstance(v, str) and number.equals(float(v))):
            del left[i]
            return kind
    return None


# ---------------------------------------------------------------- one sentence


def check_sentence(text: str, entry: Entry, by_id: dict, measured: dict) -> list[dict]:
    """Each number of ``text`` against ``entry``: its claim figure, setting or declared
    kind, or a failure naming what was expected and what is measured here."""
    lists = {}  # two claims that print the same figures (C13-30, C13-47) print them once
    for cid in entry.checked_by:
        lists.setdefault(tuple((f.value, f.unit) for f in figures(by_id[cid])), cid)
    required = [(cid, f) for cid in lists.values() for f in figures(by_id[cid])]
    setting = [v for cid in entry.checked_by for v in settings(by_id[cid])]
    declared = [(kind, v) for kind, values in entry.numbers.items() for v in values]
    found, at = [], 0
    for number in numbers_in(text):
        row = {"number": number.token, "value": number.value, "unit": number.unit}
        if at < len(required) and number.equals(required[at][1].value, required[at][1].unit):
            cid = required[at][0]
            row |= {"claim": cid, "figure": required[at][1].token,
                    "verdicts": {k: n.get(cid, {}).get("verdict") for k, n in measured.items()}}
            at += 1
        elif any(number.equals(v) for v in setting):
            row |= {"setting_of": list(entry.checked_by)}
        elif (kind := _declared(declared, number)) is not None:
            row |= {"declared": kind}
        else:
            expected = required[at] if at < len(required) else None
            row |= {"failure": True, "expected": None if expected is None else {
                "claim": expected[0], "figure": expected[1].token,
                "measured": {k: n.get(expected[0], {}).get("text") for k, n in
                             measured.items()}}}
            at += expected is not None  # read as that figure misprinted: go on after it
        found.append(row)
    return found


def check_text(text: str, claims, entries: dict[str, Entry], measured: dict,
               strict: bool = False) -> list[dict]:
    """Every number of ``text``, sentence by sentence (``entries``: the sentence list by
    shape; ``measured``: key -> claim id -> its numbers.json entry)."""
    by_id = {c.id: c for c in claims}
    out = []
    for sentence in sentences(text):
        entry = entries.get(shape(sentence.text))
        if entry is None:
            if numbers_in(sentence.text):
                out.append({"line": sentence.line, "sentence": sentence.text,
                            "number": numbers_in(sentence.text)[0].token, "failure": True,
                            "unlisted": True})
            continue
        for row in check_sentence(sentence.text, entry, by_id, measured):
            if strict and NOT_REPRODUCED in (row.get("verdicts") or {}).values():
                row["failure"] = row["not_reproduced"] = True
            out.append({"line": sentence.line, "sentence": sentence.text, **row})
    return out


def _why(row: dict) -> str:
    if row.get("unlisted"):
        return ("a sentence docs/chapter/sentences.yaml does not list: add it with its "
                "claims or a reason")
    if row.get("not_reproduced"):
        keys = [k for k, v in row["verdicts"].items() if v == NOT_REPRODUCED]
        return f"{row['claim']} is not reproduced on {', '.join(keys)}"
    expected = row.get("expected")
    if expected is None:
        return "no figure of its claims, no setting and no declared number of this sentence"
    here = "; ".join(f"{k}: {v}" for k, v in expected["measured"].items() if v) or \
        "no numbers.json here"
    return (f"{expected['claim']} prints {expected['figure']} here (measured: {here}); or it "
            "is no figure, setting or declared number of this sentence")


def format_check(found: list[dict], name: str) -> str:
    lines = [f"{name}:{r['line']}: {r['number']!r}: {_why(r)}\n    {r['sentence'][:120]}"
             for r in found if r.get("failure")]
    by = {"figure": sum("claim" in r and not r.get("failure") for r in found),
          "setting": sum("setting_of" in r for r in found),
          "declared": sum("declared" in r for r in found),
          "failing": sum(bool(r.get("failure")) for r in found)}
    lines.append(f"{name}: {len(found)} numbers: {by['figure']} a claim's figure, "
                 f"{by['setting']} a claim's setting, {by['declared']} declared as no "
                 f"measurement, {by['failing']} failing")
    return "\n".join(lines)


# ---------------------------------------------------------------- inputs


def measured_numbers(root: Path | str, keys: list[str] | None = None) -> dict[str, dict]:
    """key -> claim id -> its entry of results/{key}/manuscript/numbers.json."""
    out = {}
    for key in keys if keys is not None else layout.keys(root):
        path = layout.derived_path(root, key, "manuscript", "numbers.json")
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise ValueError(f"{path}: not JSON ({exc}); rerun the manuscript stage") \
                    from None
            out[key] = {n.get("claim"): n for n in data.get("numbers", [])}
    return out


def read_chapter(path: Path | str) -> str:
    """The chapter's text: a regular UTF-8 file of at most MAX_BYTES; anything else is an
    error that says what it is and what is expected."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except OSError:
        raise ValueError(f"chapter file {str(path)!r} does not exist") from None
    if not stat.S_ISREG(mode):
        what = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a pipe or device)"
        raise ValueError(f"chapter file {str(path)!r} is {what}; give the chapter's text file")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise ValueError(f"chapter file {str(path)!r} is {size:,} bytes; the limit is "
                         f"{MAX_BYTES:,} (a chapter is tens of kB)")
    data = path.read_bytes()
    if b"\0" in data:
        raise ValueError(f"chapter file {str(path)!r} holds NUL bytes: binary, or UTF-16; "
                         "save it as UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"chapter file {str(path)!r} is not UTF-8 text (byte "
                         f"{data[exc.start]:#04x} at offset {exc.start}); save it as UTF-8") \
            from None


def cli_check(path: Path | str, root: Path | str = ".", not_claims: Path | str | None = None,
              as_json: bool = False, strict: bool = False, key: str | None = None) -> int:
    """``inferlab manuscript check FILE``: 1 when a number fails (``strict``: also when
    its claim is not reproduced on ``key``, or on any key)."""
    from inferlab.judging.claims import load

    text = read_chapter(path)
    claims = load(Path(root) / "claims.yaml").claims
    kinds = load_kinds(Path(not_claims) if not_claims else Path(root) / NOT_CLAIMS_FILE)
    entries = index(load_sentences(root, {c.id for c in claims}, kinds))
    found = check_text(text, claims, entries,
                       measured_numbers(root, [key] if key else None), strict)
    print(json.dumps(found, indent=2, ensure_ascii=False) if as_json
          else format_check(found, Path(path).name))
    return 1 if any(r.get("failure") for r in found) else 0
