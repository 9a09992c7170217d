"""``inferlab manuscript check FILE``: every number a chapter prints, checked by value.

Each sentence of the text is found in docs/chapter/sentences.yaml by its shape, which names
the claims that check it and the numbers of it that are no measurement. Each number of the
sentence, in order, must then be

* the next figure its claims print (``figures``; the entry's ``order`` where two claims'
  figures interleave), with its unit and value as printed: another claim's figure or a swap
  fails;
* or a setting of one of its claims (a length of its scope, the blocks it selects), without a
  unit of a measurement, each value once and in order, of the dimension a word beside it
  names ("2,048 tokens");
* or a number the sentence declares as no measurement (each declared value once, in order).

Anything else fails, naming the line, the number, the figure expected and the value measured
here (each key's numbers.json); so does a figure the listed sentence prints and the text does
not, and a listed sentence missing between two that are there. ``--strict`` also fails a
figure whose claim is "not reproduced" on the chosen key(s).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from inferlab.core import layout
from inferlab.presentation.chapter_text import (
    Number,
    dimension,
    numbers_in,
    parse_figure,
    read_chapter,
    sentences,
    shape,
)
from inferlab.presentation.coverage import NOT_CLAIMS_FILE, Entry, index, load_kinds, load_sentences

NOT_REPRODUCED = "not reproduced"
SETTING = object()  # a number read as a setting of the sentence's claims


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


def settings(claim) -> list[tuple[frozenset, list[float]]]:
    """The claim's setting as (columns, values) groups in its order: its scope and filters
    (8,192 tokens, blocks of 128) and the abscissae of approx_at; two filters of one value
    ("blocks of 128": block_q and block_k) are one group."""
    check = claim.check
    if check is None:
        return []
    groups = [(column, list(vs)) for column, vs in check.scope]
    sides = [check.measure.numerator, check.measure.denominator] if check.measure.is_ratio \
        else []
    for cond in [c for rows in (check.rows, *sides) for c in rows.where]:
        groups += [(cond.column, list(cond.values or ())),
                   (cond.column, [b for b in (cond.low, cond.high) if b is not None])]
    if check.expect is not None:
        groups.append((check.measure.at, [k for k, _ in check.expect.points]))
    merged: dict[tuple, set] = {}
    for column, values in groups:
        numeric = tuple(float(v) for v in values
                        if isinstance(v, int | float) and not isinstance(v, bool))
        if numeric:
            merged.setdefault(numeric, set()).add(column)
    return [(frozenset(columns), list(values)) for values, columns in merged.items()]


def _take(groups: list[list], matches) -> bool:
    """Whether a value of one of ``groups`` is the number; it is used up with every value
    before it in its list: each is printed once, in order ("from 1 to 64")."""
    for g in groups:
        i = next((i for i, v in enumerate(g) if matches(v)), None)
        if i is not None:
            del g[:i + 1]
            return True
    return False


def _declared(left: dict[str, list], number: Number) -> str | None:
    """The kind of the declared value ``number`` prints, taken from ``left`` (kind -> its
    values in print order)."""
    for kind, values in left.items():
        if _take([values], lambda v: (isinstance(v, str) and v == number.token) or (
                not isinstance(v, str) and number.equals(float(v)))):
            return kind
    return None


# ---------------------------------------------------------------- one sentence


def _prints(number: Number, figure: Number) -> bool:
    return number.equals(figure.value, figure.unit, fraction=figure.unit is None)


def _expected(claim_id: str, figure: Number, measured: dict) -> dict:
    return {"claim": claim_id, "figure": figure.token,
            "measured": {k: n.get(claim_id, {}).get("text") for k, n in measured.items()}}


def _read(text: str, entry: Entry, by_id: dict) -> tuple[list, list[tuple]]:
    """Each number of ``text`` as (number, what it was read as: the index of the required
    figure, SETTING, a declared kind or None; whether it passes), and the required figures
    (claim id, figure) in print order."""
    lists: dict[tuple, list[str]] = {}  # two claims that print the same figures (C13-30,
    for cid in entry.checked_by:  # C13-47) print them once
        lists.setdefault(tuple((f.value, f.unit) for f in figures(by_id[cid])), []).append(cid)
    required = [(cids[0], f) for cids in lists.values() for f in figures(by_id[cids[0]])]
    owners = [cids for cids in lists.values() for _ in figures(by_id[cids[0]])]
    if entry.order:  # the claims' figures interleave ("7.8, 13.5, 9.4 and 8.6 (first run)")
        required = [(cid, _ordered(cid, fig, by_id)) for cid, fig in entry.order]
        owners = [[cid] for cid, _ in entry.order]
    setting = {cid: settings(by_id[cid]) for cid in entry.checked_by}
    declared = {kind: list(values) for kind, values in entry.numbers.items()}
    read, at = [], 0
    for number in numbers_in(text):
        if at < len(required) and _prints(number, required[at][1]):
            read.append((number, at, True))
            at += 1
        elif number.unit is None and _take(
                [values for cid in _setting_owners(entry, owners, at)
                 for columns, values in setting[cid]
                 if (named := dimension(text, number)) is None or columns & named],
                number.equals):
            read.append((number, SETTING, True))
        elif (kind := _declared(declared, number)) is not None:
            read.append((number, kind, True))
        elif number.unit is None and (named := dimension(text, number)) is not None:
            near = _setting_owners(entry, owners, at)  # a setting its word names, misprinted
            read.append((number, {"columns": sorted(named), "claims": near, "values": sorted(
                {v for cid in near for columns, values in settings(by_id[cid])
                 if columns & named for v in values})}, False))
        else:  # read as the next figure misprinted: go on after it
            read.append((number, at if at < len(required) else None, False))
            at += at < len(required)
    return read, required


def _ordered(cid: str, figure: str, by_id: dict) -> Number:
    """The figure of ``cid`` a sentence's ``order`` names: one of the claim's own."""
    own = figures(by_id[cid])
    for f in own:
        if f.token == figure or _prints(parse_figure(figure), f):
            return f
    raise ValueError(f"sentences.yaml order: {figure!r} is not a figure of {cid} "
                     f"({', '.join(f.token for f in own) or 'it prints none'})")


def _setting_owners(entry: Entry, owners: list[list[str]], at: int) -> list[str]:
    """The claims whose setting a number read before the figure at ``at`` may be: that
    figure's claim or the one before's ("for blocks of 128, 53 per cent; with blocks of 64,
    52"), and a claim that prints no figure in the sentence."""
    near = [cid for i in (at - 1, at) if 0 <= i < len(owners) for cid in owners[i]]
    placed = {cid for cids in owners for cid in cids}
    return list(dict.fromkeys(near + [c for c in entry.checked_by if c not in placed]))


def check_sentence(text: str, entry: Entry, by_id: dict, measured: dict) -> list[dict]:
    """Each number of ``text`` against ``entry``: its claim figure, setting or declared
    kind, or a failure naming what was expected and what is measured here; then each
    figure the listed sentence prints and ``text`` does not, as a failure."""
    read, required = _read(text, entry, by_id)
    found, seen = [], set()
    for number, what, ok in read:
        row = {"number": number.token, "value": number.value, "unit": number.unit}
        if isinstance(what, int):
            seen.add(what)
        if ok and isinstance(what, int):
            cid = required[what][0]
            row |= {"claim": cid, "figure": required[what][1].token,
                    "verdicts": {k: n.get(cid, {}).get("verdict") for k, n in measured.items()}}
        elif ok and what is SETTING:
            row |= {"setting_of": list(entry.checked_by)}
        elif ok:
            row |= {"declared": what}
        elif isinstance(what, dict):
            row |= {"failure": True, "setting": what}
        else:
            row |= {"failure": True, "expected": None if what is None else
                    _expected(*required[what], measured)}
        found.append(row)
    printed = {what for _, what, ok in _read(entry.text, entry, by_id)[0]
               if ok and isinstance(what, int)}
    for i in sorted(printed - seen):  # the listed sentence prints it; this one does not
        found.append({"number": None, "failure": True, "missing": True,
                      "expected": _expected(*required[i], measured)})
    return found


def _listed(found: list, entries: dict[str, Entry]) -> list:
    """The sentences, one that a line break cut (Markdown wraps) joined again: an unlisted
    sentence takes the next line's first while the join starts a listed sentence, and keeps
    it if the join is one."""
    prefixes = list(entries)
    out, i = [], 0
    while i < len(found):
        text, j = found[i].text, i
        while (shape(text) not in entries and j + 1 < len(found)
               and found[j + 1].line == found[j].line + 1
               and any(p.startswith(shape(f"{text} {found[j + 1].text}")) for p in prefixes)):
            text, j = f"{text} {found[j + 1].text}", j + 1
        if j > i and shape(text) in entries:
            out.append(replace(found[i], text=text))
            i = j + 1
        else:
            out.append(found[i])
            i += 1
    return out


def _gaps(found: list, entries: dict[str, Entry], seeds, by_id: dict,
          measured: dict) -> list[dict]:
    """The figures of a listed sentence missing between two listed sentences that are there
    (rewritten past its shape: "a hundred times" for "sixteen to eighteen"), as failures at
    the line before; an excerpt's ends are no gap."""
    where = {}  # shape -> line of the text
    for sentence in found:
        where.setdefault(shape(sentence.text), sentence.line)
    out = []
    for seed in seeds:
        shapes = [shape(e.text) for e in seed.entries]
        present = [k for k, sh in enumerate(shapes) if sh in where]
        for a, b in zip(present, present[1:], strict=False):
            for entry in seed.entries[a + 1:b]:
                for row in check_sentence("", entry, by_id, measured):  # its figures
                    out.append({"line": where[shapes[a]], "sentence": entry.text,
                                **row, "gap": True})
    return out


def check_text(text: str, claims, entries: dict[str, Entry], measured: dict,
               strict: bool = False, seeds=()) -> list[dict]:
    """Every number of ``text``, sentence by sentence (``entries``: the sentence list by
    shape; ``measured``: key -> claim id -> its numbers.json entry; ``seeds``: the lists
    in order, for the sentences missing between two that are there)."""
    by_id = {c.id: c for c in claims}
    out = []
    found = _listed(sentences(text), entries)
    for sentence in found:
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
    gaps = _gaps(found, entries, seeds, by_id, measured)
    return sorted(out + gaps, key=lambda r: r["line"]) if gaps else out


def _why(row: dict) -> str:
    if row.get("gap"):
        e = row["expected"]
        return (f"{e['claim']} prints {e['figure']} in a sentence of "
                f"docs/chapter/sentences.yaml that is not in this text after this line's sentence "
                "(the sentences either side of it are): restore it, or list its new text")
    if row.get("missing"):
        e = row["expected"]
        return f"{e['claim']} prints {e['figure']} in this sentence, which does not print it"
    if row.get("unlisted"):
        return ("a sentence docs/chapter/sentences.yaml does not list: add it with its "
                "claims or a reason")
    if row.get("not_reproduced"):
        keys = [k for k, v in row["verdicts"].items() if v == NOT_REPRODUCED]
        return f"{row['claim']} is not reproduced on {', '.join(keys)}"
    if row.get("setting"):
        e = row["setting"]
        values = ", ".join(f"{v:g}" for v in e["values"]) or "no value of it"
        return (f"its word names {' or '.join(e['columns'])}, where {', '.join(e['claims'])} "
                f"{'sets' if len(e['claims']) == 1 else 'set'} {values} (a setting printed "
                "once each, in order)")
    expected = row.get("expected")
    if expected is None:
        return "no figure of its claims, no setting and no declared number of this sentence"
    here = "; ".join(f"{k}: {v}" for k, v in expected["measured"].items() if v) or \
        "no numbers.json here"
    return (f"{expected['claim']} prints {expected['figure']} here (measured: {here}); or it "
            "is no figure, setting or declared number of this sentence")


def not_reproduced(text: str, entries: dict[str, Entry], measured: dict, found: list[dict],
                   strict: bool = False) -> list[str]:
    """Each claim of the text's sentences "not reproduced" on a key, with its lines and
    whether ``--strict`` fails it (it fails the figures the text prints for it)."""
    figures: dict[str, dict] = {}  # claim -> its figures printed (an ordered set)
    for r in (r for r in found if "verdicts" in r):
        figures.setdefault(r["claim"], {})[f"'{r['number']}'"] = None
    at: dict[tuple, dict] = {}  # (key, claim) -> the lines of its sentences
    for sentence in _listed(sentences(text), entries):
        entry = entries.get(shape(sentence.text))
        for cid, key in ((c, k) for c in (entry.checked_by if entry else ()) for k in measured):
            if measured[key].get(cid, {}).get("verdict") == NOT_REPRODUCED:
                at.setdefault((key, cid), {})[str(sentence.line)] = None
    head = "their figures fail above" if strict else "--strict fails each figure of one, exit 1"
    return [f"not reproduced on a machine ({head}):"] * bool(at) + [
        f"  {key}: {cid} (line{'s' * (len(lines) > 1)} {', '.join(lines)}): " + (
            f"--strict fails its figure {', '.join(figures[cid])}" if cid in figures else
            "it prints no figure here, so --strict passes it")
        for (key, cid), lines in sorted(at.items())]


def format_check(found: list[dict], name: str, missed: list[str] = ()) -> str:
    """The failures, ``missed`` (``not_reproduced``), then the numbers counted by what they
    were read as."""
    lines = [f"{name}:{r['line']}: {r['number'] or '(not printed)'!r}: {_why(r)}\n"
             f"    {r['sentence'][:120]}" for r in found if r.get("failure")] + list(missed)
    by = {"figure": sum("claim" in r and not r.get("failure") for r in found),
          "setting": sum("setting_of" in r for r in found),
          "declared": sum("declared" in r for r in found),
          "failing": sum(bool(r.get("failure")) for r in found),
          "strict": sum(NOT_REPRODUCED in r.get("verdicts", {}).values()
                        and not r.get("failure") for r in found)}
    lines.append(f"{name}: {len(found)} numbers: {by['figure']} a claim's figure, "
                 f"{by['setting']} a claim's setting, {by['declared']} declared as no "
                 f"measurement, {by['failing']} failing"
                 + (f" ({by['strict']} more with --strict: see above)" if by["strict"] else ""))
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


def cli_check(path: Path | str, root: Path | str = ".", not_claims: Path | str | None = None,
              as_json: bool = False, strict: bool = False, key: str | None = None) -> int:
    """``inferlab manuscript check FILE``: 1 when a number fails (``strict``: also when
    its claim is not reproduced on ``key``, or on any key)."""
    from inferlab.judging.claims import load

    text = read_chapter(path)
    claims = load(Path(root) / "claims.yaml").claims
    kinds = load_kinds(Path(not_claims) if not_claims else Path(root) / NOT_CLAIMS_FILE)
    seeds = load_sentences(root, {c.id for c in claims}, kinds)
    measured = measured_numbers(root, [key] if key else None)
    if strict and key and key not in measured:
        raise ValueError(f"--strict --machine {key}: no "
                         f"{layout.derived_path(root, key, 'manuscript', 'numbers.json')}: "
                         "run the pipeline for that machine first (or check its name: "
                         f"results/ holds {', '.join(layout.keys(root)) or 'no machine'})")
    if strict and not measured:
        raise ValueError("--strict: no results/<machine>/manuscript/numbers.json under "
                         f"{str(root)!r}: nothing to judge the figures by; run the pipeline")
    entries = index(seeds)
    found = check_text(text, claims, entries, measured, strict, seeds)
    print(json.dumps(found, indent=2, ensure_ascii=False) if as_json else format_check(
        found, Path(path).name, not_reproduced(text, entries, measured, found, strict)))
    return 1 if any(r.get("failure") for r in found) else 0
