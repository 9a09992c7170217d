"""The chapter's own tables and numbers, made from the evidence, and a check of its text.

The manuscript stage (``inferlab.stages.manuscript``) turns one results key's artifacts
into what the author pastes into the chapter, so that no number is copied by hand:

* the chapter's four tables, in its layout, as Markdown and LaTeX (booktabs): the traffic
  of the direct and block-wise implementations per length (traffic.csv and the model of
  ``inferlab.algorithms.traffic``), the three implementations at 1,024-8,192 tokens (prefill.csv),
  each backend with PyTorch's reason (probe.json), split-KV against the fused kernel
  (decode.csv). A length the key did not measure reads "not measured here" and why;
* every number the chapter cites, one per claim of ``claims.yaml``, as a named value with
  its provenance (claim, verdict, artifact, version, sha256, commit): ``numbers.json``
  and ``numbers.tex`` (one ``\\newcommand`` per number, a ``%`` line of provenance above
  it, as showyourwork's variables). A number whose verdict is not "reproduced" is wrapped
  in ``\\ILcheck{...}`` (and flagged ``marked`` in the JSON), so a manuscript built from
  evidence that no longer holds shows where.

The check of the chapter's text against the claims is ``inferlab.presentation.manuscript_check``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import pandas as pd

from inferlab.algorithms.traffic import naive_hbm_elements, tiled_hbm_elements
from inferlab.judging.numtext import format_value
from inferlab.presentation.formats import with_unit

NOT_MEASURED = "not measured here"
REPRODUCED = "reproduced"

# ------------------------------------------------------------------ the four tables


@dataclass(frozen=True)
class Chapter:
    """How the chapter's tables select rows on one key: its fp16 stand-in dtype, the
    query tile of the traffic model and the lengths of its prefill table."""

    dtype: str
    block_q: int
    lengths: tuple[int, ...]


def _table(name: str, title: str, columns: list[str], rows: list[list[str]],
           notes: list[str]) -> dict:
    return {"name": name, "title": title, "columns": columns, "rows": rows, "notes": notes}


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] == "ok"]


def _why_missing(frame: pd.DataFrame, what: str) -> str:
    """'not measured here: oom' for rows that failed, else 'not in this grid'."""
    failed = sorted(set(frame["status"].dropna()) - {"ok"})
    why = "; ".join(failed) if failed else f"{what} is not in this machine's grid"
    return f"{NOT_MEASURED}: {why}"


def traffic_table(traffic: pd.DataFrame, chapter: Chapter) -> dict:
    """(a) Elements moved per head and sequence, direct and block-wise (causal, the tile
    B_q the model assumes), their ratio, and the measured naive / fused time ratio."""
    rows = traffic[(traffic["causal"] == True) & (traffic["tile"] == "assumed")  # noqa: E712
                   & (traffic["block_q_model"] == chapter.block_q)
                   & traffic["T"].isin(chapter.lengths)]
    out = []
    for T, group in rows.groupby("T", sort=True):
        row = group.iloc[0]
        d = int(row["d"])
        measured = group[group["dtype"] == chapter.dtype]
        if len(measured) and pd.notna(measured.iloc[0]["measured_ratio"]):
            m = measured.iloc[0]
            low, high = m["measured_ratio_ci_low"], m["measured_ratio_ci_high"]
            interval = (f"({format_value(float(low))}–{format_value(float(high))})"
                        if pd.notna(low) and pd.notna(high) else
                        "(no interval: timed in too few rounds)")
            ratio = f"{format_value(float(m['measured_ratio']))}× {interval}"
        else:
            note = next((n for n in group["note"].dropna()), None)
            ratio = f"{NOT_MEASURED}: {note}" if note else \
                f"{NOT_MEASURED}: no {chapter.dtype} row at this length"
        out.append([f"{int(T):,}", f"{naive_hbm_elements(int(T), d, causal=True):,}",
                    f"{tiled_hbm_elements(int(T), d, chapter.block_q, causal=True):,}",
                    f"{format_value(float(row['model_ratio']))}×", ratio])
    return _table("traffic", "Traffic of the direct and block-wise implementations",
                  ["Tokens", "Direct (elements)", f"Block-wise, B_q={chapter.block_q} "
                   "(elements)", "Model ratio",
                   "Measured time ratio naive / fused (95 % interval)"],
                  out, [f"Per head and sequence, causal, d={d if out else '?'}; measured in "
                        f"{chapter.dtype} (the chapter's fp16 on this device)."])


def number(x: float) -> str:
    """3 significant figures, and thousands separated as the chapter prints them (3,148)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else format_value(float(x))


def _time_memory(frame: pd.DataFrame) -> list[str]:
    if frame.empty:
        return []
    row = frame.loc[frame["median_ms"].idxmin()]
    memory = row["peak_extra_bytes"]
    return [number(row["median_ms"]), "—" if pd.isna(memory) else number(memory / 2**20)]


def prefill_table(prefill: pd.DataFrame, chapter: Chapter) -> dict:
    """(b) Naive, block-wise (plain PyTorch) and the fused kernel at the chapter's lengths:
    median time and peak extra memory, causal, in the stand-in dtype."""
    here = prefill[(prefill["dtype"] == chapter.dtype) & (prefill["causal"] == True)]  # noqa: E712
    rows = []
    for T in chapter.lengths:
        at = here[here["T"] == T]
        naive = _ok(at[at["impl"] == "naive"])
        tiled = _ok(at[(at["impl"] == "tiled") & (at["block_q"] == chapter.block_q)])
        fused = _ok(at[at["fused_sdpa"] == True])  # noqa: E712
        cells = []
        for part in (naive, tiled, fused):
            cells += _time_memory(part) or [_why_missing(at, f"{T:,} tokens"), "—"]
        kernel = fused.loc[fused["median_ms"].idxmin(), "impl"] if len(fused) else "—"
        rows.append([f"{T:,}", *cells, str(kernel)])
    return _table("prefill", "Three implementations at the chapter's lengths",
                  ["Tokens", "Naive (ms)", "Naive (MiB)", f"Block-wise B_q={chapter.block_q} "
                   "(ms)", "Block-wise (MiB)", "Fused (ms)", "Fused (MiB)", "Fused kernel"],
                  rows, [f"Causal, {chapter.dtype}; time is the median over interleaved rounds, "
                         "peak memory the extra allocation over the inputs; the fused kernel "
                         "is the fastest SDPA backend that never writes the score matrix."])


def backends_table(probe: dict, chapter: Chapter) -> dict:
    """(c) Each SDPA backend at the probe's shape: runs here or not, and PyTorch's reason
    (or ours, said so, where PyTorch gives none); one row when both masks agree."""
    found = [a for a in probe.get("availability", []) if a["dtype"] == chapter.dtype]
    rows = []
    for backend in dict.fromkeys(a["backend"] for a in found):
        cases = [a for a in found if a["backend"] == backend]
        described = {}
        for a in cases:
            text = (("runs" if a["ran"] else "refused"),
                    a.get("reason") or "—", a.get("reason_source") or "—",
                    a.get("limit_kind") or "—")
            described.setdefault(text, []).append("causal" if a["causal"] else "full")
        for (runs, reason, source, limit), masks in described.items():
            mask = "both" if len(described) == 1 and len(masks) > 1 else ", ".join(masks)
            rows.append([backend, mask, runs, reason, source, limit])
    shape = found[0] if found else {}
    return _table("backends", "Each backend, with PyTorch's reason",
                  ["Backend", "Mask", "Here", "Reason", "Reason from", "Limit"], rows,
                  [f"{chapter.dtype}, T={shape.get('T', '?')}, {shape.get('heads', '?')} heads "
                   f"of dimension {shape.get('d', '?')}; 'Reason from' says whether PyTorch "
                   "gave the reason or inferlab did (PyTorch gave none)."])


def _us(ms: float) -> str:
    return number(float(ms) * 1e3)


def decode_table(decode: pd.DataFrame, chapter: Chapter) -> dict:
    """(d) Split-KV decoding (every split count) against the fastest fused SDPA backend:
    time per step and the fused / split-KV ratio (above 1: split-KV is faster)."""
    here = decode[decode["dtype"] == chapter.dtype]
    rows = []
    for (cache, batch), at in here.groupby(["cache_len", "batch"], sort=True):
        fused, split = _ok(at[at["fused_sdpa"] == True]), _ok(at[at["impl"] == "splitkv"])  # noqa: E712
        point = f"{int(cache):,} keys"
        if fused.empty or split.empty:
            why = _why_missing(at, point)
            rows.append([f"{int(cache):,}", str(batch), why, why, "—", "—"])
            continue
        best = fused.loc[fused["median_ms"].idxmin()]
        speed = [1 / r for r in split["ratio"].dropna() if r > 0]
        splits = f"{int(split['splits'].min())}–{int(split['splits'].max())}"
        rows.append([f"{int(cache):,}", str(batch), f"{_us(best['median_ms'])} ({best['impl']})",
                     f"{_us(split['median_ms'].min())}–{_us(split['median_ms'].max())}",
                     splits, f"{format_value(speed)}×" if speed else "—"])
    return _table("decode", "Split-KV against the fused kernel",
                  ["Keys", "Batch", "Fused (µs, backend)", "Split-KV (µs, over splits)",
                   "Splits", "Fused / split-KV"], rows,
                  [f"One query per sequence, {chapter.dtype}; the ratio is paired round by "
                   "round, its range over the split counts; above 1, split-KV is faster."])


# ------------------------------------------------------------------ Markdown and LaTeX


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(table: dict, key: str) -> str:
    lines = [f"**{table['title']}** ({key})", "",
             "| " + " | ".join(map(_md_cell, table["columns"])) + " |",
             "|" + "|".join("---" for _ in table["columns"]) + "|"]
    lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in table["rows"]]
    return "\n".join([*lines, "", *(f"_{n}_" for n in table["notes"])]) + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "–": "--", "—": "---", "×": r"\ensuremath{\times}",
                  "µ": r"\ensuremath{\mu}", "≈": r"\ensuremath{\approx}", "’": "'"}


def latex_text(text: str) -> str:
    """Text as LaTeX: the specials escaped, dashes and symbols as LaTeX writes them."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def latex(table: dict, key: str) -> str:
    """A booktabs table (needs \\usepackage{booktabs})."""
    columns = table["columns"]
    body = [" & ".join(latex_text(c) for c in row) + r" \\" for row in table["rows"]]
    notes = [rf"\par\smallskip{{\footnotesize {latex_text(n)}}}" for n in table["notes"]]
    return "\n".join([
        r"\begin{table}[htbp]", r"\centering",
        rf"\caption{{{latex_text(table['title'])} ({latex_text(key)})}}",
        rf"\label{{tab:il-{table['name']}}}",
        rf"\begin{{tabular}}{{{'l' * len(columns)}}}", r"\toprule",
        " & ".join(latex_text(c) for c in columns) + r" \\", r"\midrule", *body,
        r"\bottomrule", r"\end{tabular}", *notes, r"\end{table}"]) + "\n"


# ------------------------------------------------------------------ named numbers

ONES = ("Zero One Two Three Four Five Six Seven Eight Nine Ten Eleven Twelve Thirteen "
         "Fourteen Fifteen Sixteen Seventeen Eighteen Nineteen").split()
TENS = "_ _ Twenty Thirty Forty Fifty Sixty Seventy Eighty Ninety".split()


def _words(n: int) -> str:
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + (ONES[n % 10] if n % 10 else "")
    return "".join(ONES[int(d)] for d in str(n))


def macro_name(claim_id: str) -> str:
    """A LaTeX command name (letters only) for a claim id: C13-05 -> ILCThirteenFive."""
    parts = re.findall(r"[A-Za-z]+|\d+", claim_id)
    if not parts:
        raise ValueError(f"claim id {claim_id!r} has no letters or digits to name a macro")
    return "IL" + "".join(p if p.isalpha() else _words(int(p)) for p in parts)


def number_text(result: dict) -> str:
    """The number as the chapter prints it: 3 significant figures and its unit, or the
    verdict when there is no value here."""
    if result.get("value") is None:
        return result["verdict"]
    return with_unit(result["value"], result.get("unit"))


def named_numbers(claims: dict, commits: dict[tuple[str, int], str | None]) -> list[dict]:
    """One named value per claim of claims.json, with its provenance; ``commits`` maps
    (stage, version) to the git commit that made that artifact version."""
    numbers = []
    for result in claims["claims"]:
        artifact = result.get("artifact") or {}
        version = artifact.get("version")
        numbers.append({
            "name": result["id"], "macro": macro_name(result["id"]),
            "value": result.get("value"), "text": number_text(result),
            "ci_low": result.get("ci_low"), "ci_high": result.get("ci_high"),
            "unit": result.get("unit") or "", "claim": result["id"], "kind": result["kind"],
            "verdict": result["verdict"], "marked": result["verdict"] != REPRODUCED,
            "artifact": artifact.get("path"), "stage": artifact.get("stage"),
            "version": version, "sha256": artifact.get("sha256"),
            "commit": commits.get((artifact.get("stage"), version))})
    return numbers


def numbers_tex(numbers: list[dict], key: str) -> str:
    r"""One \newcommand per number, a % line of provenance above it; numbers whose
    verdict is not "reproduced" wrapped in \ILcheck (defined here unless the document
    defines it first)."""
    lines = [f"% The chapter's numbers as measured on {key} (inferlab manuscript stage).",
             "% Regenerate: snakemake --cores 1 manuscript. Never edit by hand.",
             '% \\ILcheck marks a number whose verdict here is not "reproduced".',
             r"\providecommand{\ILcheck}[1]{\fbox{#1}}"]
    for n in numbers:
        source = (f"{n['artifact']} version {n['version']} "
                  f"sha256 {n['sha256'] or 'not in the register'} "
                  f"commit {n['commit'] or 'not recorded'}") if n["artifact"] else "no artifact"
        text = latex_text(n["text"])
        body = "\\ILcheck{" + text + "}" if n["marked"] else text
        lines += [f"% {n['claim']} ({n['kind']}): {n['verdict']}; {source}",
                  "\\newcommand{\\" + n["macro"] + "}{" + body + "}"]
    return "\n".join(lines) + "\n"


def derived_files(manuscript: dict) -> dict[str, bytes]:
    """The files of results/{key}/manuscript/, a pure function of the artifact (whose
    ``files`` records each one's sha256)."""
    key, tables = manuscript["key"], manuscript["tables"]
    numbers = {"key": key, "claims": manuscript["claims"], "numbers": manuscript["numbers"]}
    texts = {"tables.md": "\n".join(markdown(t, key) for t in tables),
             "tables.tex": "% needs \\usepackage{booktabs}\n" + "\n".join(latex(t, key)
                                                                         for t in tables),
             "numbers.json": json.dumps(numbers, indent=2, ensure_ascii=False) + "\n",
             "numbers.tex": numbers_tex(manuscript["numbers"], key)}
    return {name: text.encode("utf-8") for name, text in texts.items()}


def file_hashes(manuscript: dict) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest()
            for name, data in derived_files(manuscript).items()}


# ------------------------------------------------------------------ the report's view


def report_view(root, key: str, evidence) -> dict:
    """One key's "For the manuscript" block: its four tables, and a link to each derived
    file with its sha256 checked against the artifact's record now."""
    import os

    from inferlab.core import layout

    data = evidence.data
    if data is None:
        why = evidence.error or "the manuscript stage did not run for this key"
        return {"key": key, "missing": f"{NOT_MEASURED}: {why}", "tables": [], "files": []}
    page_dir = layout.report_path(root).parent
    files = []
    for name, recorded in sorted(data["files"].items()):
        path = layout.derived_path(root, key, "manuscript", name)
        now = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        status = "missing" if now is None else ("sha256 OK" if now == recorded else
                                                "changed since the stage wrote it")
        files.append({"name": name, "href": os.path.relpath(path, page_dir), "status": status,
                      "ok": now == recorded})
    tables = [{"title": t["title"], "notes": t["notes"],
               "table": {"columns": t["columns"],
                         "rows": [{"cells": r, "noisy": False} for r in t["rows"]]}}
              for t in data["tables"]]
    marked = sum(n["marked"] for n in data["numbers"])
    return {"key": key, "missing": None, "tables": tables, "files": files,
            "numbers": len(data["numbers"]), "marked": marked, "dtype": data["dtype"]}
