"""What a claim's verdict rests on, on one results key: ``Trail(root, key).claim(c)``.

It reads what the claims stage recorded and never judges again: claims.json's verdict, value,
interval and deciding rows; for a series claim each row's pooled point in series.csv (and a
ratio's denominator) with the runs it pools; each register version behind them with its kept
copy hash-checked now. ``problems`` names what no longer holds.
"""

from __future__ import annotations

import csv
import hashlib
import math
from pathlib import Path

import pandas as pd

from inferlab.core import layout
from inferlab.core.files import relative
from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts
from inferlab.evidence.register import Register
from inferlab.judging.claims import Claim
from inferlab.judging.selection import apply_where
from inferlab.presentation.claim_text import reason_text

SERIES = "series"


def recorded_results(root: Path | str, keys: list[str] | None = None) -> dict[str, dict]:
    """key -> its results/{key}/claims.json, for ``keys`` (default: every key that has one)."""
    out = {}
    for key in layout.keys(root) if keys is None else keys:
        path = layout.artifact_path(root, key, "claims")
        if path.is_file():
            try:
                out[key] = artifacts.read(path, "claims")
            except ValueError as exc:
                raise ValueError(f"{relative(path, root)}: {exc}; rerun its claims stage") \
                    from exc
    return out


def no_claims(root: Path | str, key: str) -> ValueError:
    """The error for a key without claims.json, naming the keys that have one."""
    held = [k for k in layout.keys(root) if layout.artifact_path(root, k, "claims").is_file()]
    return ValueError(f"no results/{key}/claims.json: run the claims stage for {key} first "
                      f"(claims.json is there for: {', '.join(held) or 'no machine'})")


def _cell(text: str):
    """A series.csv cell as a value: '' -> None, 'True' -> True, '8192' -> 8192."""
    if text in ("", "True", "False"):
        return {"": None, "True": True, "False": False}[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _point(row: dict, columns) -> tuple:
    """A row's point as a hashable key: numbers as floats (8192 and 8192.0 alike)."""
    return tuple(float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
                 for v in (row.get(c) for c in columns))


class Trail:
    """One results key's claims.json, series.csv and register, each read once."""

    def __init__(self, root: Path | str, key: str):
        self.root, self.key = Path(root), layout.check_key(key)
        if not layout.artifact_path(root, key, "claims").is_file():
            raise no_claims(root, key)
        self.recorded = {c["id"]: c for c in recorded_results(root, [key])[key]["claims"]}
        self.register = Register(root, key)
        self._series: dict | None = None
        self._versions: dict[tuple[str, int], dict] = {}

    def series(self) -> dict:
        """(stage, point) -> {"pooled": row, "runs": [rows]} from results/{key}/series.csv."""
        if self._series is None:
            self._series = {}
            path = layout.artifact_path(self.root, self.key, SERIES)
            # without a series.csv each point the claim judged says it is not there
            text = path.read_text(encoding="utf-8") if path.is_file() else ""
            for cells in csv.DictReader(text.splitlines()):
                row = {c: _cell(v) for c, v in cells.items()}
                found = self._series.setdefault(
                    (row["stage"], _point(row, STAGES[row["stage"]].key_columns)),
                    {"pooled": None, "runs": []})
                if row["kind"] == "pooled":
                    found["pooled"] = row
                else:
                    found["runs"].append(row)
        return self._series

    def version(self, stage: str, version: int) -> dict:
        """A register version as the audit shows it: artifact, sha256, commit, config, and
        whether its kept file is still that artifact (``problem`` where not)."""
        if (stage, version) not in self._versions:
            shown = self._versions[stage, version] = {"stage": stage, "version": version}
            try:
                entry = self.register.entry(stage, version)
            except ValueError as exc:  # not in the register
                shown["problem"] = str(exc)
                return shown
            prov = entry.get("provenance") or {}
            shown |= {"path": relative(self.register.version_path(entry), self.root),
                      "sha256": entry.get("sha256"),
                      **{f: prov.get(f) for f in ("created_at", "git_commit", "config_sha256",
                                                  "config")}, "copy": "sha256 OK"}
            try:
                self.register.read_copy(entry)
            except ValueError as exc:
                shown["copy"] = shown["problem"] = str(exc)
        return self._versions[stage, version]

    def claim(self, claim: Claim) -> dict:
        """The claim's entry of claims.json, the series points it judged with their runs,
        and the register versions behind them."""
        mine = self.recorded.get(claim.id) or {"verdict": "not evaluated", "value": None}
        out = {"machine": self.key, "claims_json": f"results/{self.key}/claims.json",
               **{f: mine.get(f) for f in ("verdict", "value", "interval", "unit", "answer",
                                           "cause", "artifact")},
               "rows": mine.get("rows") or [], "reason": reason_text(mine, claim, self.key),
               "rows_judged": sum(part.get("rows") or 0 for part in mine.get("judged") or []),
               "points": [], "versions": {}, "problems": []}
        if claim.id not in self.recorded:
            out["problems"].append(f"{out['claims_json']} has no entry for {claim.id}: rerun "
                                   "the claims stage")
        artifact, versions = out["artifact"], []
        stage = STAGES.get((artifact or {}).get("stage"))
        if artifact is None or stage is None:
            return out
        if stage.name == SERIES:
            out["points"] = self._points(claim, out["rows"])
            versions = sorted({(p["stage"], r["version"]) for p in out["points"]
                               for r in p["runs"]})
            out["problems"] += [f"a {p['stage']} row it judged ({p['row'].get('impl')}, "
                                f"{p['side'] or 'its value'}) is not a pooled row of "
                                f"{artifact['path']}: rerun the claims stage"
                                for p in out["points"] if p["pooled"] is None]
        elif stage.needs_device and artifact.get("version") is not None:
            versions = [(stage.name, artifact["version"])]  # measured: it is registered
        path = self.root / artifact["path"]
        if not stage.needs_device and artifact.get("sha256") != (
                hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None):
            # derived (series, traffic): the rows shown from it may not be those judged
            out["problems"].append(f"{artifact['path']} is not the file claims.json judged "
                                   f"(sha256 {artifact.get('sha256')}): rerun the claims stage")
        for name, v in versions:
            shown = out["versions"][f"{name} {v}"] = self.version(name, v)
            out["problems"] += [shown["problem"]] if "problem" in shown else []
        return out

    def _points(self, claim: Claim, rows: list[dict]) -> list[dict]:
        """Each judged row's series point (and, for a ratio, its denominator's), with its
        pooled row and runs, in the order of the rows."""
        stage, m = claim.check.stage, claim.check.measure
        series, out, seen = self.series(), [], set()
        for row in rows:
            sides = [("numerator" if m.is_ratio else None,
                      _point(row, STAGES[stage].key_columns), row.get(m.column))]
            if m.is_ratio:
                sides.append(("denominator", self._denominator(claim, row),
                              row.get(f"denominator_{m.column}")))
            for side, point, value in sides:
                if (stage, point) not in seen:
                    seen.add((stage, point))
                    found = series.get((stage, point)) or {"pooled": None, "runs": []}
                    out.append({"stage": stage, "side": side, "column": m.column,
                                "recorded": value, "row": row, "pooled": found["pooled"],
                                "runs": sorted(found["runs"], key=lambda r: r["version"])})
        return out

    def _denominator(self, claim: Claim, row: dict) -> tuple | None:
        """The pooled point a ratio's row was divided by: on the row's ``join`` columns,
        among the denominator's rows, the one whose value claims.json records beside it."""
        stage, m = claim.check.stage, claim.check.measure
        want, join = row.get(f"denominator_{m.column}"), _point(row, m.join)
        candidates = [found["pooled"] for (s, _), found in self.series().items()
                      if s == stage and found["pooled"] is not None
                      and _point(found["pooled"], m.join) == join]
        if not candidates or not isinstance(want, int | float):
            return None
        for i in apply_where(pd.DataFrame(candidates), m.denominator.where).index:
            value = candidates[i].get(m.column)
            if isinstance(value, int | float) and math.isclose(value, want, rel_tol=1e-12):
                return _point(candidates[i], STAGES[stage].key_columns)
        return None
