"""The manuscript's files, rendered from the manuscript stage's values (manuscript.json holds
values, causes and references; every text is made here, so no number is copied by hand):

* the chapter's four tables in its layout, as Markdown and LaTeX (booktabs); a length the key
  did not measure reads "not measured here" and its cause;
* every number the chapter cites, one per claim with its provenance, as ``numbers.json`` and
  ``numbers.tex`` (one ``\\newcommand`` per number, a ``%`` line of provenance above it, as
  showyourwork's variables); a number whose verdict is not "reproduced" is wrapped in
  ``\\ILcheck{...}``, so a manuscript built from evidence that no longer holds shows where.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata

from inferlab.judging.numtext import format_value
from inferlab.presentation.claim_text import STATUS_WORDS
from inferlab.presentation.formats import NOT_MEASURED, md_cell, with_unit

REPRODUCED = "reproduced"
TITLES = {"traffic": "Traffic of the direct and block-wise implementations",
          "prefill": "Three implementations at the chapter's lengths",
          "backends": "Each backend, with PyTorch's reason",
          "decode": "Split-KV against the fused kernel"}

# ------------------------------------------------------------------ the four tables


def number(x: float) -> str:
    """3 significant figures, and thousands separated as the chapter prints them (3,148)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else format_value(float(x))


def why_missing(cause: dict, what: str) -> str:
    """'not measured here: dropped: the stage's time budget was spent', or 'not in this
    machine's grid' when no row says why."""
    statuses = cause.get("statuses") or []
    if not statuses:
        return f"{NOT_MEASURED}: {what} is not in this machine's grid"
    words = sorted({STATUS_WORDS.get((s["status"], s.get("cause")), s["status"])
                    for s in statuses})
    return f"{NOT_MEASURED}: {'; '.join(words)}"


def _table(name: str, columns: list[str], rows: list[list[str]], notes: list[str]) -> dict:
    return {"name": name, "title": TITLES[name], "columns": columns, "rows": rows,
            "notes": notes}


def traffic_table(values: list[dict], block_q: int, dtype: str) -> dict:
    rows = []
    for r in values:
        m = r.get("measured")
        if m:
            ci = (f"({format_value(m['ci_low'])}–{format_value(m['ci_high'])})"
                  if m.get("ci_low") is not None and m.get("ci_high") is not None
                  else "(no interval: timed in too few rounds)")
            measured = f"{format_value(m['value'])}× {ci}"
        else:
            measured = why_missing(r["missing"], f"{r['T']:,} tokens")
        rows.append([f"{r['T']:,}", f"{r['naive_elements']:,}", f"{r['tiled_elements']:,}",
                     f"{format_value(r['model_ratio'])}×", measured])
    d = values[0]["d"] if values else "?"
    return _table("traffic", ["Tokens", "Direct (elements)", f"Block-wise, B_q={block_q} "
                              "(elements)", "Model ratio",
                              "Measured time ratio naive / fused (95 % interval)"], rows,
                  [f"Per head and sequence, causal, d={d}; measured in {dtype} (the "
                   "chapter's fp16 on this device)."])


def _time_memory(cell: dict, T: int) -> list[str]:
    if "missing" in cell:
        return [why_missing(cell["missing"], f"{T:,} tokens"), "—"]
    memory = cell["peak_extra_bytes"]
    return [number(cell["median_ms"]), "—" if memory is None else number(memory / 2**20)]


def prefill_table(values: list[dict], block_q: int, dtype: str) -> dict:
    rows = [[f"{r['T']:,}", *(c for part in ("naive", "tiled", "fused")
                              for c in _time_memory(r[part], r["T"])),
             r["fused"].get("impl", "—")] for r in values]
    return _table("prefill", ["Tokens", "Naive (ms)", "Naive (MiB)", f"Block-wise B_q={block_q} "
                              "(ms)", "Block-wise (MiB)", "Fused (ms)", "Fused (MiB)",
                              "Fused kernel"], rows,
                  [f"Causal, {dtype}; time is the median over interleaved rounds, peak "
                   "memory the extra allocation over the inputs; the fused kernel is the "
                   "fastest SDPA backend that never writes the score matrix."])


def backends_table(values: dict, dtype: str) -> dict:
    """One row per backend when both masks agree, else one per mask."""
    rows = []
    for backend in dict.fromkeys(r["backend"] for r in values["rows"]):
        described: dict[tuple, list[str]] = {}
        for r in (x for x in values["rows"] if x["backend"] == backend):
            text = ("runs" if r["ran"] else "refused", r.get("reason") or "—",
                    r.get("reason_source") or "—", r.get("limit_kind") or "—")
            described.setdefault(text, []).append("causal" if r["causal"] else "full")
        for (runs, reason, source, limit), masks in described.items():
            mask = "both" if len(described) == 1 and len(masks) > 1 else ", ".join(masks)
            rows.append([backend, mask, runs, reason, source, limit])
    shape = {k: v if v is not None else "?" for k, v in values["shape"].items()} or {}
    return _table("backends", ["Backend", "Mask", "Here", "Reason", "Reason from", "Limit"],
                  rows, [f"{dtype}, T={shape.get('T', '?')}, {shape.get('heads', '?')} heads "
                         f"of dimension {shape.get('d', '?')}; 'Reason from' says whether "
                         "PyTorch gave the reason or inferlab did (PyTorch gave none)."])


def _us(ms: float) -> str:
    return number(float(ms) * 1e3)


def decode_table(values: list[dict], dtype: str) -> dict:
    rows = []
    for r in values:
        if "missing" in r:
            why = why_missing(r["missing"], f"{r['cache_len']:,} keys")
            rows.append([f"{r['cache_len']:,}", str(r["batch"]), why, why, "—", "—"])
            continue
        speed = r["fused_over_split"]
        rows.append([f"{r['cache_len']:,}", str(r["batch"]),
                     f"{_us(r['fused']['median_ms'])} ({r['fused']['impl']})",
                     f"{_us(r['split_ms'][0])}–{_us(r['split_ms'][1])}",
                     f"{r['splits'][0]}–{r['splits'][1]}",
                     f"{format_value(speed)}×" if speed else "—"])
    return _table("decode", ["Keys", "Batch", "Fused (µs, backend)", "Split-KV (µs, over "
                             "splits)", "Splits", "Fused / split-KV"], rows,
                  [f"One query per sequence, {dtype}; the ratio is paired round by round, "
                   "its range over the split counts; above 1, split-KV is faster."])


def tables_of(manuscript: dict) -> list[dict]:
    """The four tables for people, from the artifact's values."""
    t, dtype, block_q = manuscript["tables"], manuscript["dtype"], manuscript["block_q"]
    return [traffic_table(t["traffic"], block_q, dtype), prefill_table(t["prefill"], block_q,
                                                                        dtype),
            backends_table(t["backends"], dtype), decode_table(t["decode"], dtype)]


# ------------------------------------------------------------------ Markdown and LaTeX


def markdown(table: dict, key: str) -> str:
    lines = [f"**{table['title']}** ({key})", "",
             "| " + " | ".join(map(md_cell, table["columns"])) + " |",
             "|" + "|".join("---" for _ in table["columns"]) + "|"]
    lines += ["| " + " | ".join(map(md_cell, row)) + " |" for row in table["rows"]]
    return "\n".join([*lines, "", *(f"_{n}_" for n in table["notes"])]) + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
                  "|": r"\textbar{}", "–": "--", "—": "---", "’": "'", "‘": "`", "“": "``",
                  "”": "''", "…": r"\ldots{}", "·": r"\ensuremath{\cdot}",
                  "×": r"\ensuremath{\times}", "µ": r"\ensuremath{\mu}",
                  "≈": r"\ensuremath{\approx}", "≥": r"\ensuremath{\geq}",
                  "≤": r"\ensuremath{\leq}", "≠": r"\ensuremath{\neq}",
                  "±": r"\ensuremath{\pm}", "→": r"\ensuremath{\rightarrow}",
                  "←": r"\ensuremath{\leftarrow}", "∞": r"\ensuremath{\infty}",
                  "√": r"\ensuremath{\surd}", "°": r"\ensuremath{^\circ}",
                  "²": r"\ensuremath{^2}", "³": r"\ensuremath{^3}", "⁻": r"\ensuremath{^-}",
                  "\n": " ", "\t": " "}


def _latex_char(ch: str) -> str:
    if ch in _LATEX_SPECIAL:
        return _LATEX_SPECIAL[ch]
    if ch.isascii() and (ch.isprintable() or ch == " "):
        return ch
    plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
    if plain and plain.isprintable():  # é -> e: pdflatex stops on what it cannot map
        return "".join(_LATEX_SPECIAL.get(c, c) for c in plain)
    return rf"\texttt{{[U+{ord(ch):04X}]}}"


def latex_text(text: str) -> str:
    """Text as LaTeX that pdflatex reads as text: ASCII only, the specials (and < > |,
    which the default font encoding prints as other glyphs) escaped, dashes, quotes and
    symbols as LaTeX writes them; any other character by its ASCII form, else its code
    point, never a character pdflatex stops on."""
    return "".join(_latex_char(ch) for ch in str(text))


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
    """A LaTeX command name (letters only) for a claim id (C13-NN or Q13-NN, unique: the
    claims loader checks both): C13-05 -> ILCThirteenFive."""
    parts = re.findall(r"[A-Za-z]+|\d+", claim_id)
    return "IL" + "".join(p if p.isalpha() else _words(int(p)) for p in parts)


def number_text(number: dict) -> str:
    """The number as the chapter prints it: 3 significant figures and its unit, or the
    verdict when there is no value here."""
    if number.get("value") is None:
        return number["verdict"]
    return with_unit(number["value"], number.get("unit"))


def numbers_file(manuscript: dict) -> list[dict]:
    """numbers.json's entries: the artifact's numbers with their text and macro, and the
    artifact they come from flattened (path, stage, version, sha256)."""
    out = []
    for n in manuscript["numbers"]:
        artifact = n.get("artifact") or {}
        out.append({"claim": n["claim"], "macro": macro_name(n["claim"]), "kind": n["kind"],
                    "verdict": n["verdict"], "marked": n["verdict"] != REPRODUCED,
                    "value": n["value"], "interval": n["interval"], "unit": n["unit"],
                    "text": number_text(n), "figures": n["figures"],
                    "artifact": artifact.get("path"), "stage": artifact.get("stage"),
                    "version": artifact.get("version"), "sha256": artifact.get("sha256"),
                    "commit": n["commit"]})
    return out


def numbers_tex(numbers: list[dict], key: str) -> str:
    r"""One \newcommand per number, a % line of provenance above it; numbers whose
    verdict is not "reproduced" wrapped in \ILcheck (defined here unless the document
    defines it first)."""
    lines = [f"% The chapter's numbers as measured on {key} (inferlab manuscript stage).",
             "% Regenerate: snakemake --cores 1 manuscript. Never edit by hand.",
             '% \\ILcheck marks a number whose verdict here is not "reproduced".',
             r"\providecommand{\ILcheck}[1]{\fbox{#1}}"]
    for n in numbers:
        version = "" if n.get("version") is None else f" version {n['version']}"
        source = (f"{n['artifact']}{version} sha256 {n['sha256'] or 'not recorded'} "
                  f"commit {n['commit'] or 'not recorded'}") if n["artifact"] else "no artifact"
        text = latex_text(n["text"])
        body = "\\ILcheck{" + text + "}" if n["marked"] else text
        comment = f"{n['claim']} ({n['kind']}): {n['verdict']}; {source}"
        lines += ["% " + " ".join(comment.split()),
                  "\\newcommand{\\" + n["macro"] + "}{" + body + "}"]
    return "\n".join(lines) + "\n"


def derived_files(manuscript: dict) -> dict[str, bytes]:
    """The files of results/{key}/manuscript/, a pure function of the artifact (whose
    ``files`` records each one's sha256)."""
    key, tables, named = manuscript["key"], tables_of(manuscript), numbers_file(manuscript)
    numbers = {"key": key, "claims": manuscript["claims"], "numbers": named}
    texts = {"tables.md": "\n".join(markdown(t, key) for t in tables),
             "tables.tex": "% needs \\usepackage{booktabs}\n" + "\n".join(latex(t, key)
                                                                         for t in tables),
             "numbers.json": json.dumps(numbers, indent=2, ensure_ascii=False) + "\n",
             "numbers.tex": numbers_tex(named, key)}
    return {name: text.encode("utf-8") for name, text in texts.items()}


def file_hashes(manuscript: dict) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest()
            for name, data in derived_files(manuscript).items()}
