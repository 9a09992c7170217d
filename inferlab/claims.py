"""The chapter's claims as declarative checks: load, evaluate per machine, audit.

``claims.yaml`` lists each claim with its sentence, the value the chapter printed, its
kind, and a check written in a small vocabulary (``schemas/claims.schema.json``; the
file's header explains it). A check names an artifact, filters its rows, takes a
statistic of one column (or of a ratio of two row sets joined on key columns) and
compares it with what the sentence requires. Nothing in a claim is executed.

A claim's verdict is per machine (DESIGN.md, "Claims"):

- ``reproduced``: the value here meets the sentence;
- ``not reproduced``: it does not; the value here is given;
- ``not measurable here``: the stage did not run, the artifact is missing, the machine
  lacks what the check requires (CUDA, fp16 rows), or no rows match the filter;
- ``not checkable``: a figure reported by others; nothing here can test it.

``audit`` traces one claim to its artifact version, re-hashes the results file and the
register's retained copy now, and prints the provenance that produced it.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd
import yaml

from inferlab import layout
from inferlab.provenance import sha256_file
from inferlab.register import Register

REPO_ROOT = Path(__file__).resolve().parents[1]
CLAIMS_FILE = REPO_ROOT / "claims.yaml"
CLAIMS_SCHEMA = REPO_ROOT / "schemas" / "claims.schema.json"
RESULT_SCHEMA = REPO_ROOT / "schemas" / "claims_result.schema.json"

VERDICTS = ("reproduced", "not reproduced", "not measurable here", "not checkable")
MAX_ROWS = 20  # rows kept per claim in claims.json: enough to see why, small enough to read
# unit -> (column suffix it converts from, factor)
UNITS = {"MiB": ("_bytes", 2.0**-20), "us": ("_ms", 1e3), "s": ("_ms", 1e-3)}
# columns that say which rows decided a value, in the chapter's order of importance
SUMMARY_COLUMNS = ("impl", "T", "cache_len", "batch", "dtype", "causal", "block_q", "splits",
                   "score_scale", "backend")


@dataclass(frozen=True)
class Claim:
    """One claim of the chapter: its words, its printed value, and how to check it."""

    id: str
    sentence: str
    chapter_value: str
    kind: str
    check: dict | None = None
    source: str | None = None


class NotMeasurable(Exception):
    """The check cannot be made on this machine; the message says why."""


# ---------------------------------------------------------------- loading


def load_claims(path: Path | str | None = None) -> list[Claim]:
    """Read and validate ``claims.yaml``; errors name the claim id and the field."""
    return _load(path)[0]


def _load(path: Path | str | None) -> tuple[list[Claim], str]:
    """(claims, the chapter's hardware in words) from a validated claims file."""
    path = Path(path) if path is not None else CLAIMS_FILE
    if not path.is_file():
        raise ValueError(f"claims file {str(path)!r} does not exist; expected a claims.yaml")
    claims, hardware = _parse(path.read_text(encoding="utf-8"), path.name)
    return list(claims), hardware


@functools.lru_cache(maxsize=8)
def _parse(text: str, name: str) -> tuple[tuple[Claim, ...], str]:
    # cached on the text: parsing and schema validation take about a second, and the
    # report and audit read the same file for every machine
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is 10x faster
    data = yaml.load(text, Loader=loader)
    _validate_claims(data, name)
    claims = tuple(Claim(id=c["id"], sentence=" ".join(c["sentence"].split()),
                         chapter_value=c["chapter_value"], kind=c["kind"],
                         check=c.get("check"), source=c.get("source")) for c in data["claims"])
    for claim in claims:
        _check_units(claim)
    return claims, data.get("chapter_hardware", "")


def _validate_claims(data: Any, name: str) -> None:
    schema = json.loads(CLAIMS_SCHEMA.read_text(encoding="utf-8"))
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data),
                    key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = errors[0]
        where = list(err.absolute_path)
        claim = "(file)"
        if len(where) >= 2 and where[0] == "claims" and isinstance(data, dict):
            claim = str(data["claims"][where[1]].get("id", f"#{where[1]}"))
            where = where[2:]
        field = ".".join(map(str, where)) or "(whole claim)"
        raise ValueError(f"{name}: claim {claim}, field {field}: {err.message} "
                         f"({len(errors)} schema error(s) in all)")
    ids = [c["id"] for c in data["claims"]]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"{name}: claim ids must be unique; repeated: {dupes}")


def _check_units(claim: Claim) -> None:
    value = (claim.check or {}).get("value", {})
    unit = value.get("unit")
    if unit and not value["column"].endswith(UNITS[unit][0]):
        raise ValueError(f"claim {claim.id}, field check.value.unit: unit={unit!r} converts "
                         f"from a *{UNITS[unit][0]} column, not {value['column']!r}")


def find_claim(claim_id: str, claims: list[Claim]) -> Claim:
    """The claim with ``claim_id``; unknown -> ValueError listing close matches."""
    by_id = {c.id: c for c in claims}
    if claim_id in by_id:
        return by_id[claim_id]
    close = difflib.get_close_matches(claim_id.upper(), list(by_id), n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"known ids: {', '.join(by_id)}"
    raise ValueError(f"claim_id={claim_id!r} is not in claims.yaml; {hint}")


# ---------------------------------------------------------------- evidence


@dataclass
class Artifact:
    """One stage's artifact on one machine, as the check sees it."""

    stage: str
    path: Path
    rows: pd.DataFrame | None  # None when missing
    provenance: dict
    entry: dict | None  # the register's latest entry for this stage
    sha256_now: str | None

    def describe(self, root: Path) -> dict:
        entry = self.entry or {}
        return {"stage": self.stage, "path": _relative(self.path, root),
                "version": entry.get("version"), "sha256": entry.get("sha256")}

    def hash_warning(self) -> str:
        if self.rows is None:
            return ""
        if self.entry is None:
            return "WARNING: this artifact is not in the evidence register. "
        if self.sha256_now != self.entry.get("sha256"):
            return (f"WARNING: the results file's sha256 {self.sha256_now} no longer matches "
                    f"register version {self.entry.get('version')} "
                    f"({self.entry.get('sha256')}). ")
        return ""


def _relative(path: Path, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


def load_artifact(root: Path | str, machine: str, stage: str) -> Artifact:
    """Read one stage's artifact (rows) with its register entry and provenance."""
    path = layout.artifact_path(root, machine, stage)
    entry = Register(root, machine).latest(stage)
    if not path.is_file():
        return Artifact(stage, path, None, {}, entry, None)
    if path.suffix == ".json":
        rows = pd.DataFrame(json.loads(path.read_text(encoding="utf-8")).get("availability", []))
    else:
        rows = pd.read_csv(path)
    return Artifact(stage, path, rows, _provenance(path, entry), entry, sha256_file(path))


def _provenance(path: Path, entry: dict | None) -> dict:
    if entry and entry.get("provenance"):
        return entry["provenance"]
    sidecar = layout.sidecar_path(path)
    if sidecar.is_file():
        return json.loads(sidecar.read_text(encoding="utf-8")).get("provenance", {})
    return {}


def device_of(artifact: Artifact, machine: str) -> str:
    """'cuda' or 'cpu': from the recorded environment, else from the machine id's prefix."""
    device = str((artifact.provenance.get("environment") or {}).get("device") or machine)
    return "cuda" if device.startswith("cuda") else "cpu"


# ---------------------------------------------------------------- row selection


def _matches(series: pd.Series, want: Any) -> pd.Series:
    """Rows of ``series`` equal to ``want`` (a value or list); compares text case-blind
    when the column was read as text, so a CSV 'True' equals YAML true."""
    wants = want if isinstance(want, list) else [want]
    if series.dtype == object:
        text = series.astype(str).str.lower()
        return text.isin([str(w).lower() for w in wants])
    return series.isin(wants)


def _condition_mask(frame: pd.DataFrame, column: str, cond: Any) -> pd.Series:
    series = frame[column]
    if isinstance(cond, dict) and "rank" in cond:
        top, bottom = series.max(), series.min()
        return {"largest": series == top, "smallest": series == bottom,
                "not_largest": series != top}[cond["rank"]]
    if isinstance(cond, dict) and "not" in cond:
        return ~_matches(series, cond["not"])
    if isinstance(cond, dict):
        numeric = pd.to_numeric(series, errors="coerce")
        return numeric.ge(cond.get("min", -math.inf)) & numeric.le(cond.get("max", math.inf))
    return _matches(series, cond)


def select_rows(frame: pd.DataFrame, where: dict | None, stage: str) -> pd.DataFrame:
    """Rows of ``frame`` meeting every condition; rank conditions apply last, and rows
    whose status is not ok are dropped unless ``where`` names status."""
    where = dict(where or {})
    missing = [c for c in where if c not in frame.columns]
    if missing:
        raise NotMeasurable(f"{layout.ARTIFACTS[stage]} has no column {missing[0]!r}")
    if "status" in frame.columns and "status" not in where:
        where = {"status": "ok", **where}
    ranked = {c: v for c, v in where.items() if isinstance(v, dict) and "rank" in v}
    for column, cond in where.items():
        if column not in ranked:
            frame = frame[_condition_mask(frame, column, cond)]
    for column, cond in ranked.items():
        frame = frame[_condition_mask(frame, column, cond)]
    return frame


def keep_best(frame: pd.DataFrame, best: dict | None) -> pd.DataFrame:
    """One row per ``best.by`` group: the one with the lowest ``best.lowest``."""
    if not best or frame.empty:
        return frame
    by = [c for c in best["by"] if c in frame.columns]
    column = best["lowest"]
    frame = frame.dropna(subset=[column])
    if frame.empty:
        return frame
    if not by:
        return frame.loc[[frame[column].idxmin()]]
    return frame.loc[frame.groupby(by, dropna=False)[column].idxmin()]


# ---------------------------------------------------------------- statistics


def _loglog_slope(frame: pd.DataFrame, column: str, x: str) -> float:
    data = frame[[x, column]].dropna()
    data = data[(data[x] > 0) & (data[column] > 0)]
    if data[x].nunique() < 2:
        raise NotMeasurable(f"a log-log slope needs at least two values of {x}")
    lx, ly = data[x].astype(float).map(math.log), data[column].astype(float).map(math.log)
    mx, my = lx.mean(), ly.mean()
    return float(((lx - mx) * (ly - my)).sum() / ((lx - mx) ** 2).sum())


def _one_stat(frame: pd.DataFrame, column: str, spec: dict) -> Any:
    """The statistic of ``frame[column]``: a number, or a list of judged values."""
    stat, values = spec["stat"], frame[column].dropna()
    if stat == "loglog_slope":
        return _loglog_slope(frame, column, spec["x"])
    if stat == "count":
        return int(values.size)
    if values.empty:
        raise NotMeasurable(f"every selected row has an empty {column}")
    if stat == "at":
        return [[_plain(k), float(v)] for k, v in
                frame.dropna(subset=[column]).groupby(spec["at"])[column].median().items()]
    if stat in ("range", "any"):
        return [_plain(v) for v in values]
    if stat == "spread":
        return float(values.max() / values.min() - 1.0)
    return _plain(getattr(values, stat)())


def statistic(frame: pd.DataFrame, column: str, spec: dict) -> Any:
    """``spec['stat']`` of ``frame[column]``, per ``spec['by']`` group if given (a list)."""
    if frame.empty:
        raise NotMeasurable("no rows match the filter")
    by = [c for c in spec.get("by", []) if c in frame.columns]
    if not by:
        return _one_stat(frame, column, spec)
    results = [_one_stat(group, column, spec) for _, group in frame.groupby(by, dropna=False)]
    flat = [v for r in results for v in (r if isinstance(r, list) else [r])]
    return flat


def _plain(value: Any) -> Any:
    """A JSON-ready Python scalar (numpy types unwrapped, NaN -> None)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else value
    return value


# ---------------------------------------------------------------- judging


def _holds(expect: dict, v: Any) -> bool:
    tol = expect.get("tolerance", 0.0)
    if "equals" in expect:
        return v == expect["equals"]
    if v is None or isinstance(v, bool | str):
        return False
    if "between" in expect:
        lo, hi = expect["between"]
        return lo * (1 - tol) <= v <= hi * (1 + tol)
    if "max" in expect:
        return v <= expect["max"] * (1 + tol)
    if "min" in expect:
        return v >= expect["min"] * (1 - tol)
    if "approx" in expect:
        x = expect["approx"]
        return abs(v - x) <= (expect["rel"] * abs(x) if "rel" in expect else expect["abs"])
    return v > 1 if expect["direction"] == ">1" else v < 1


def judge(expect: dict, value: Any, stat: str) -> tuple[bool, str]:
    """Whether ``value`` meets ``expect``, and what was checked (for the reason)."""
    if "approx_at" in expect:
        return _judge_at(expect, value)
    items = value if isinstance(value, list) else [value]
    held = [_holds(expect, v) for v in items]
    ok = any(held) if stat == "any" else all(held)
    quantifier = "at least one value" if stat == "any" else (
        "every value" if len(items) > 1 else "the value")
    return ok, f"{quantifier} {describe_expect(expect)}"


def _judge_at(expect: dict, value: list) -> tuple[bool, str]:
    here = {str(k): v for k, v in value}
    present = [(k, x) for k, x in expect["approx_at"] if str(k) in here]
    absent = [str(k) for k, _ in expect["approx_at"] if str(k) not in here]
    if not present:
        raise NotMeasurable(f"no rows at {[k for k, _ in expect['approx_at']]}")
    ok = all(abs(here[str(k)] - x) <= expect["rel"] * abs(x) for k, x in present)
    text = f"within {expect['rel']:.0%} of {[x for _, x in present]} at {[k for k, _ in present]}"
    if absent:
        text += f"; {', '.join(absent)} not measured here"
    return ok, text


def describe_expect(expect: dict) -> str:
    """The expectation in words, e.g. 'between 7.8 and 13.5 (±10%)'."""
    tol = f" (±{expect['tolerance']:.0%})" if expect.get("tolerance") else ""
    if "between" in expect:
        return f"between {expect['between'][0]:g} and {expect['between'][1]:g}{tol}"
    if "max" in expect:
        return f"at most {expect['max']:g}{tol}"
    if "min" in expect:
        return f"at least {expect['min']:g}{tol}"
    if "approx" in expect:
        spread = f"{expect['rel']:.0%}" if "rel" in expect else f"{expect['abs']:g}"
        return f"within {spread} of {expect['approx']:g}"
    if "equals" in expect:
        return f"equal to {expect['equals']!r}"
    return f"{expect['direction']}"


def format_value(value: Any) -> str:
    """A value for people: 3 significant figures; a judged list as its range."""
    if isinstance(value, list) and value and isinstance(value[0], list):
        return ", ".join(f"{k}: {format_value(v)}" for k, v in value)
    if isinstance(value, list):
        nums = [v for v in value if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(nums) == len(value) and nums:
            lo, hi = min(nums), max(nums)
            return format_value(lo) if lo == hi else f"{format_value(lo)}–{format_value(hi)}"
        return ", ".join(map(format_value, value))
    if isinstance(value, float):
        return _three_figures(value)
    return "—" if value is None else str(value)


def _three_figures(x: float) -> str:
    """3 significant figures without an exponent between 0.001 and 10^6 (2080, not 2.08e+03)."""
    if x == 0 or not math.isfinite(x) or not 1e-3 <= abs(x) < 1e6:
        return f"{x:.3g}"
    if x.is_integer():
        return str(int(x))
    return f"{x:.{max(0, 2 - math.floor(math.log10(abs(x))))}f}"


def reported_value(value: Any, stat: str) -> Any:
    """What claims.json records: a judged list becomes [min, max]; others as they are."""
    if stat in ("range", "any") or (isinstance(value, list) and stat not in ("at",)):
        nums = [v for v in value if isinstance(v, int | float) and not isinstance(v, bool)]
        if nums and len(nums) == len(value):
            return [min(nums), max(nums)]
    return value


# ---------------------------------------------------------------- evaluation


def _measure(check: dict, frame: pd.DataFrame, stage: str) -> tuple[Any, pd.DataFrame]:
    """(value, deciding rows) of a check over already-filtered rows."""
    name = layout.ARTIFACTS[stage]
    if frame.empty:
        raise NotMeasurable(f"no rows of {name} match {_compact(check.get('where', {}))}")
    if "ratio" in check:
        return _measure_ratio(check["ratio"], frame, stage)
    spec = check["value"]
    rows = keep_best(frame, check.get("best")).copy()
    column = spec["column"]
    if spec.get("over"):
        rows["value_over"] = rows[column] / rows[spec["over"]]
        column = "value_over"
    if spec.get("unit"):
        rows[column] = rows[column] * UNITS[spec["unit"]][1]
    return statistic(rows, column, spec), rows


def _measure_ratio(spec: dict, frame: pd.DataFrame, stage: str) -> tuple[Any, pd.DataFrame]:
    sides = []
    for side in ("numerator", "denominator"):
        rows = keep_best(select_rows(frame, spec[side].get("where"), stage),
                         spec[side].get("best"))
        if rows.empty:
            raise NotMeasurable(f"no {side} rows {_compact(spec[side].get('where', {}))} "
                                f"among the selected rows of {layout.ARTIFACTS[stage]}")
        sides.append(rows)
    join = [c for c in spec["join"] if c in frame.columns]
    merged = sides[0].merge(sides[1], on=join, suffixes=("_num", "_den"))
    col = spec["column"]
    merged["ratio"] = merged[f"{col}_num"] / merged[f"{col}_den"]
    merged = merged.dropna(subset=["ratio"])
    if merged.empty:
        raise NotMeasurable(f"numerator and denominator rows share no values of {join}")
    return statistic(merged, "ratio", spec), pd.concat(sides)


def _compact(obj: Any) -> str:
    return json.dumps(obj, default=str, ensure_ascii=False)


def _required_rows(check: dict, artifact: Artifact, machine: str) -> pd.DataFrame:
    requires = dict(check.get("requires") or {})
    device = requires.pop("device", None)
    if device and device_of(artifact, machine) != device:
        raise NotMeasurable(f"needs a {device.upper()} device; {machine} ran on "
                            f"{device_of(artifact, machine)}")
    frame = artifact.rows
    for column, want in requires.items():
        if column not in frame.columns:
            raise NotMeasurable(f"{artifact.path.name} has no column {column!r}")
        frame = frame[_matches(frame[column], want)]
        if frame.empty:
            raise NotMeasurable(f"no {column}={want} rows in {artifact.path.name} on {machine}: "
                                f"this machine did not run {want} (no substitute is used)")
    return select_rows(frame, check.get("where"), artifact.stage)


def _rows_summary(rows: pd.DataFrame) -> str:
    parts = []
    for column in SUMMARY_COLUMNS:
        if column in rows.columns:
            values = sorted({format_value(_plain(v)) for v in rows[column].dropna()})
            if values:
                parts.append(f"{column}={','.join(values)}")
    noun = "row" if len(rows) == 1 else "rows"
    return f" over {len(rows)} {noun} ({'; '.join(parts)})" if parts else ""


def _records(rows: pd.DataFrame) -> list[dict]:
    records = rows.head(MAX_ROWS).to_dict(orient="records")
    return [{str(k): _plain(v) for k, v in r.items()} for r in records]


def evaluate(claim: Claim, root: Path | str, machine: str,
             artifacts: dict[str, Artifact] | None = None, hardware: str = "") -> dict:
    """One claim's verdict on ``machine``: the claims.json entry for it. ``artifacts``
    caches each stage's artifact across the claims of one machine."""
    result = {"id": claim.id, "verdict": "not checkable", "value": None,
              "chapter_value": claim.chapter_value, "reason": "", "rows": [], "artifact": None}
    if claim.check is None:
        result["reason"] = f"reported by {claim.source}; this pipeline's data cannot test it"
        return result
    stage = claim.check["stage"]
    artifacts = artifacts if artifacts is not None else {}
    if stage not in artifacts:
        artifacts[stage] = load_artifact(root, machine, stage)
    artifact = artifacts[stage]
    result["artifact"] = artifact.describe(Path(root))
    try:
        if artifact.rows is None:
            raise NotMeasurable(f"stage {stage} has not run on {machine}: "
                                f"{result['artifact']['path']} is missing")
        value, rows = _measure(claim.check, _required_rows(claim.check, artifact, machine),
                               stage)
        result.update(_verdict(claim, value, rows, machine, hardware))
    except NotMeasurable as why:
        result.update(verdict="not measurable here", value=None, reason=str(why))
    result["reason"] = artifact.hash_warning() + result["reason"]
    return result


def _verdict(claim: Claim, value: Any, rows: pd.DataFrame, machine: str,
             hardware: str) -> dict:
    """verdict, value, rows and reason of a measured value (NotMeasurable if it cannot
    be judged, e.g. none of the lengths the sentence names was run)."""
    stat = (claim.check.get("ratio") or claim.check.get("value"))["stat"]
    ok, checked = judge(claim.check["expect"], value, stat)
    where = f"on {machine}" + (f"; the chapter measured on {hardware}"
                               if claim.kind == "measured" and hardware else "")
    return {"verdict": "reproduced" if ok else "not reproduced",
            "value": reported_value(value, stat), "rows": _records(rows),
            "reason": (f"value here {format_value(value)}{_rows_summary(rows)}; "
                       f"the sentence needs {checked}; judged {where}")}


def evaluate_machine(root: Path | str, machine: str,
                     claims_path: Path | str | None = None) -> dict:
    """Every claim's verdict on ``machine``: the content of results/{machine}/claims.json."""
    layout.check_machine(machine)
    claims, hardware = _load(claims_path)
    artifacts: dict[str, Artifact] = {}
    return {"machine": machine,
            "claims": [evaluate(c, root, machine, artifacts, hardware) for c in claims]}


def validate_result(data: dict) -> None:
    """Raise ValueError unless ``data`` is a valid claims.json."""
    schema = json.loads(RESULT_SCHEMA.read_text(encoding="utf-8"))
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        field = ".".join(map(str, error.absolute_path)) or "(top level)"
        raise ValueError(f"claims.json field {field}: {error.message}")


# ---------------------------------------------------------------- claims table


def recorded_results(root: Path | str) -> dict[str, dict]:
    """machine -> its results/{machine}/claims.json (machines without one are skipped)."""
    out = {}
    for machine in layout.machines(root):
        path = layout.artifact_path(root, machine, "claims")
        if path.is_file():
            out[machine] = json.loads(path.read_text(encoding="utf-8"))
    return out


def claims_matrix(root: Path | str, claims_path: Path | str | None = None) -> dict:
    """{claim id: {machine: {verdict, value}}} from every machine's claims.json."""
    recorded = recorded_results(root)
    matrix: dict[str, dict] = {}
    for claim in load_claims(claims_path):
        row = matrix.setdefault(claim.id, {})
        for machine, data in recorded.items():
            entry = next((c for c in data.get("claims", []) if c.get("id") == claim.id), None)
            row[machine] = ({"verdict": entry["verdict"], "value": entry.get("value")}
                            if entry else {"verdict": "not evaluated", "value": None})
    return matrix


def cli_claims(root: Path | str, as_json: bool = False) -> int:
    """Print every claim with its verdict per machine (from each machine's claims.json)."""
    matrix = claims_matrix(root)
    if as_json:
        print(json.dumps(matrix, indent=2))
        return 0
    machines = sorted({m for row in matrix.values() for m in row})
    if not machines:
        print("no results/{machine}/claims.json under "
              f"{Path(root).resolve()}: run the claims stage first")
        return 0
    width = max(22, *(len(m) for m in machines))
    print("claim   " + "".join(m.ljust(width + 2) for m in machines))
    for claim_id, row in matrix.items():
        cells = [f"{row[m]['verdict']} ({format_value(row[m]['value'])})"
                 if row[m]["value"] is not None else row[m]["verdict"] for m in machines]
        print(f"{claim_id:<8}" + "".join(c.ljust(width + 2) for c in cells))
    return 0


# ---------------------------------------------------------------- audit


def integrity(root: Path | str, machine: str, artifact: Artifact) -> dict:
    """Re-hash NOW the results file, its sidecar and the register's retained copy."""
    entry = artifact.entry
    if artifact.rows is None and entry is None:
        return {"status": "not run", "detail": "no artifact and no register entry"}
    if entry is None:
        return {"status": "MISMATCH", "detail": "the results file is not in the register"}
    if artifact.rows is None:
        return {"status": "MISMATCH", "detail": f"the results file is missing; the register "
                f"has version {entry.get('version')} of {artifact.stage}"}
    expected = entry.get("sha256")
    try:
        copy = Register(root, machine).copy_path(expected)
    except ValueError as exc:  # an edited entry whose sha256 is not even a hash
        return {"status": "MISMATCH", "detail": str(exc)}
    copy_now = sha256_file(copy) if copy.is_file() else None
    sidecar = layout.sidecar_path(artifact.path)
    sidecar_now = sha256_file(sidecar) if sidecar.is_file() else None
    problems = []
    if artifact.sha256_now != expected:
        problems.append(f"results file now {artifact.sha256_now}, register says {expected}")
    if copy_now != expected:
        problems.append(f"retained copy {_relative(copy, Path(root))} "
                        f"{'is missing' if copy_now is None else 'now ' + copy_now}")
    if entry.get("sidecar_sha256") and sidecar_now != entry["sidecar_sha256"]:
        problems.append(f"sidecar now {sidecar_now}, register says {entry['sidecar_sha256']}")
    return {"status": "MISMATCH" if problems else "sha256 OK",
            "detail": "; ".join(problems) or "results file, sidecar and retained copy match",
            "results_sha256_now": artifact.sha256_now, "retained_copy_sha256_now": copy_now,
            "retained_copy": _relative(copy, Path(root))}


def _environment_summary(env: dict) -> dict:
    build, host, cuda = env.get("build") or {}, env.get("host") or {}, env.get("cuda") or {}
    return {"device": env.get("device"), "device_name": cuda.get("device_name"),
            "torch": build.get("torch", env.get("torch")),
            "threads": host.get("torch_threads", env.get("threads")),
            "cpu": host.get("cpu_model")}


def _machine_audit(claim: Claim, root: Path, machine: str, hardware: str) -> dict:
    artifacts: dict[str, Artifact] = {}
    now = evaluate(claim, root, machine, artifacts, hardware)
    recorded_path = layout.artifact_path(root, machine, "claims")
    recorded = None
    if recorded_path.is_file():
        data = json.loads(recorded_path.read_text(encoding="utf-8"))
        recorded = next((c for c in data.get("claims", []) if c.get("id") == claim.id), None)
    out = {"machine": machine, "verdict": now["verdict"], "value": now["value"],
           "reason": now["reason"], "recorded": recorded and {
               k: recorded.get(k) for k in ("verdict", "value", "artifact")},
           "artifact": now["artifact"], "integrity": None, "provenance": None}
    if claim.check is None:
        return out
    artifact = artifacts[claim.check["stage"]]
    prov = artifact.provenance
    config = prov.get("config") or {}
    out["integrity"] = integrity(root, machine, artifact)
    out["provenance"] = {
        "created_at": prov.get("created_at"), "git_commit": prov.get("git_commit"),
        "git_dirty": prov.get("git_dirty"), "code_sha256": prov.get("code_sha256"),
        "config": config.get(artifact.stage, config), "seed": prov.get("seed"),
        "environment": _environment_summary(prov.get("environment") or {}),
        "command": prov.get("command")}
    return out


def audit(claim_id: str, root: Path | str, machine: str | None = None,
          claims_path: Path | str | None = None) -> dict:
    """The chain from a claim to the artifacts, hashes and commands behind its verdicts."""
    claims, hardware = _load(claims_path)
    claim = find_claim(claim_id, claims)
    machines = [layout.check_machine(machine)] if machine else layout.machines(root)
    rows = [_machine_audit(claim, Path(root), m, hardware) for m in machines]
    ok = all((r["integrity"] or {}).get("status") != "MISMATCH" for r in rows)
    return {"claim": {"id": claim.id, "sentence": claim.sentence, "kind": claim.kind,
                      "chapter_value": claim.chapter_value, "source": claim.source,
                      "check": claim.check},
            "machines": rows, "ok": ok}


def format_audit(data: dict) -> str:
    """The audit chain as text, claim first, then one block per machine."""
    c = data["claim"]
    lines = [f"{c['id']} [{c['kind']}]", f"  sentence: {c['sentence']}",
             f"  chapter value: {c['chapter_value']}"]
    if c["source"]:
        lines.append(f"  source: {c['source']}")
    if not data["machines"]:
        lines.append("  no machine has results under this root")
    for m in data["machines"]:
        lines += [f"machine {m['machine']}",
                  f"  verdict: {m['verdict']}   value: {format_value(m['value'])}",
                  f"  reason: {m['reason']}"]
        if m["recorded"]:
            version = (m["recorded"].get("artifact") or {}).get("version")
            lines.append(f"  recorded in claims.json: {m['recorded']['verdict']} "
                         f"({format_value(m['recorded']['value'])})"
                         + (f" from version {version}" if version else ""))
        lines += _format_chain(m)
    return "\n".join(lines)


def _format_chain(m: dict) -> list[str]:
    if m["artifact"] is None:
        return []
    a, i, p = m["artifact"], m["integrity"], m["provenance"]
    env = p["environment"]
    return [
        f"  artifact: {a['path']}  version {a['version']}  sha256 {a['sha256']}",
        f"  integrity: {i['status']} ({i['detail']})",
        f"  created_at: {p['created_at']}  git commit: {p['git_commit']}  "
        f"dirty: {p['git_dirty']}",
        f"  code sha256: {p['code_sha256']}",
        f"  config: {json.dumps(p['config'], sort_keys=True)}",
        f"  environment: device={env['device']} ({env['device_name'] or env['cpu']}) "
        f"torch={env['torch']} threads={env['threads']}",
        f"  reproduce: {p['command'] or 'not recorded in the provenance'}"]


def cli_audit(claim_id: str, root: Path | str, machine: str | None = None,
              as_json: bool = False) -> int:
    """Print the audit chain; exit 1 if any artifact's hash no longer matches."""
    data = audit(claim_id, root, machine)
    print(json.dumps(data, indent=2, default=str) if as_json else format_audit(data))
    return 0 if data["ok"] else 1
