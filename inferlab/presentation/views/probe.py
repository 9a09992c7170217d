"""The probe on the page ("What ran where"): per key, in how many probed cases each SDPA
backend ran and why not, the ceilings measured, the backend map's grid, the raw rows."""

from __future__ import annotations

from markupsafe import Markup

from inferlab.judging.numtext import format_value
from inferlab.measurement.backend_map import cell as map_cell
from inferlab.presentation import sections

SECTION = {"id": "backends", "title": "What ran where", "caption": Markup(
    "Each attention backend of PyTorch's SDPA, in how many of the probed cases (dtype × mask)\n"
    "it ran, and why not where it did not (PyTorch's own reason, or ours where PyTorch gives "
    "none).")}
COLUMNS = {
    "backend": "backend", "dtype": "dtype", "causal": "mask", "T": "tokens",
    "can_run": "can run", "ran": "ran", "reason": "reason", "reason_source": "reason source",
    "limit_kind": "limit kind"}
MAP_CAPTION = Markup(
    "Each backend tried on small inputs per head dimension (full attention, no mask), then at\n"
    "the probe's head dimension with a causal mask, grouped key/value heads, a boolean mask and\n"
    "dropout. “refused (input)”: this input is outside the kernel's limits; “(build)”: this\n"
    "PyTorch build lacks the kernel; “(hardware)”: this device cannot run it.")


def tables(page: sections.Page) -> list[dict]:
    columns = []
    for k in page.present("probe"):
        probe, frame = k.evidence["probe"].data, k.frame("probe")
        summary, backend_map = backends_table(probe, frame), backend_map_table(probe)
        blocks = [sections.table(summary),
                  sections.text(f"Ceilings measured here: {summary['ceilings']}.")]
        if backend_map:
            blocks.append(sections.details("map", f"Backend map: {backend_map['summary']}", [
                sections.text(MAP_CAPTION), sections.table(backend_map, "raw"),
                sections.bullets(backend_map["reasons"])]))
        else:
            blocks.append(sections.text("No backend map: this probe.json predates it.", "nm"))
        blocks.append(sections.raw([sections.raw_block(k.key, "probe", frame, COLUMNS)]))
        columns.append((k.key, blocks))
    return [sections.div([sections.div(blocks, "key", title=key) for key, blocks in columns],
                         "keys")]


def backends_table(probe: dict, table) -> dict:
    """Per backend: in how many probed cases it ran, and why not where it did not."""
    frame = table.frame
    rows = []
    for backend, group in frame.groupby("backend", sort=False):
        ran = int(group["ran"].fillna(False).astype(bool).sum())
        reasons = sorted({str(r) for r in group["reason"].dropna()})
        sources = sorted({str(r) for r in group.loc[group["reason"].notna(), "reason_source"]
                          .dropna()})
        rows.append({"cells": [backend, f"{ran} of {len(group)}", "; ".join(reasons) or "—",
                               ", ".join(sources) or "—"], "noisy": False})
    ceilings = probe.get("ceilings") or {}
    matmul = ceilings.get("matmul_gflops") or {}
    return {"columns": ["backend", "cases it ran", "why not", "reason from"], "rows": rows,
            "ceilings": f"copy {format_value(ceilings.get('copy_gbs'))} GB/s; matmul "
                        + (", ".join(f"{k} {format_value(v)}" for k, v in matmul.items())
                           or "—") + " GFLOP/s"}


def backend_map_table(probe: dict) -> dict | None:
    """probe.json's backend map as a grid: a row per case and dtype, a column per backend,
    a cell "ran" or "refused (limit kind)"; PyTorch's reasons listed once per backend and
    reason, with the cases they refused. None when the probe predates the map."""
    rows = probe.get("backend_map") or []
    if not rows:
        return None
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    grid: dict[tuple, dict] = {}
    refusals: dict[tuple, list[str]] = {}
    for r in rows:
        grid.setdefault((r["case"], r["dtype"]), {})[r["backend"]] = map_cell(r)
        if not r["ran"]:
            why = r["reason"] or r["error"] or "no reason given"
            refusals.setdefault((r["backend"], why), []).append(f"{r['case']} {r['dtype']}")
    ran = sum(bool(r["ran"]) for r in rows)
    return {"columns": ["case", "dtype", *backends],
            "rows": [{"cells": [case, dtype, *(cells.get(b, "—") for b in backends)],
                      "noisy": False} for (case, dtype), cells in grid.items()],
            "summary": f"{len(grid)} inputs (case × dtype) × {len(backends)} backends: {ran} ran, "
                       f"{len(rows) - ran} refused",
            "reasons": [f"{backend} refused {', '.join(cases)}: {why}"
                        for (backend, why), cases in refusals.items()]}
