"""claims.yaml, loaded into typed checks.

``claims.yaml`` lists each claim of the chapter with its sentence, the value the chapter
printed, its kind and a declarative check (``schemas/claims.schema.json``; the file's
header explains the vocabulary). Loading validates the file against that schema, then
builds frozen dataclasses and checks every column a check names against the schema of
the artifact it reads, so a typo is an error naming the claim and the column, not a
verdict of "not measurable here". Nothing in a claim is executed.

``inferlab.judging.verdicts`` judges a ``Claim`` on a machine's artifacts;
``inferlab.presentation.audit``
traces a verdict to the evidence behind it.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from inferlab.core import layout, validation
from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts

# unit -> (the column suffix it converts from, factor)
UNITS = {"MiB": ("_bytes", 2.0**-20), "us": ("_ms", 1e3), "s": ("_ms", 1e-3)}
# per: the tensor whose bytes a memory column is counted in; its element count from the
# row's columns (scores B*H*T*T, outputs B*H*T*d); the element size from its dtype
TENSORS = {"score_matrix": ("batch", "heads", "T", "T"), "output": ("batch", "heads", "T", "d")}
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# between-run checks read the series' between-run columns (inferlab.stages.series): the
# largest difference between two of its runs, the latest run's time
BETWEEN_RUNS = ("median_ms_spread", "ratio_spread", "median_ms_new")


@dataclass(frozen=True)
class Condition:
    """A row filter on one column: equal to one of ``values``, or within [low, high]."""

    column: str
    values: tuple | None = None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Best:
    """Keep one row per ``by`` group: the one with the lowest ``lowest`` (the fastest)."""

    by: tuple[str, ...]
    lowest: str


@dataclass(frozen=True)
class Rows:
    """A selection of rows: filters, then the best row per group."""

    where: tuple[Condition, ...] = ()
    best: Best | None = None


@dataclass(frozen=True)
class Measure:
    """The statistic ``stat`` of ``column`` over the selected rows (per ``by`` group).

    A ratio has ``numerator`` and ``denominator`` row sets, joined on ``join``: its value
    per joined row is numerator ``column`` / denominator ``column``. Otherwise ``over``
    divides ``column`` by another column of the same row, ``invert`` takes 1 / value,
    ``unit`` converts it, ``per`` counts bytes in tensors of the row's shape (``TENSORS``),
    and a value above ``valid_max`` is not physical.
    """

    column: str
    stat: str
    over: str | None = None
    invert: bool = False
    unit: str | None = None
    per: str | None = None                          # score_matrix | output (TENSORS)
    valid_max: float | None = None
    by: tuple[str, ...] = ()
    x: str | None = None
    at: str | None = None
    numerator: Rows | None = None
    denominator: Rows | None = None
    join: tuple[str, ...] = ()

    @property
    def is_ratio(self) -> bool:
        return self.numerator is not None


@dataclass(frozen=True)
class Expect:
    """What the sentence needs of the value: ``kind`` is between | max | min | approx |
    equals | direction | approx_at | finite, with ``bounds`` (lo, hi), ``target``, ``rel``/``abs``.
    ``printed`` says, per bound (lo, hi; or the one target), whether it is a figure the
    chapter printed: such a bound stands for every number that rounds to it (0.58 for
    0.575-0.585, ``printed_rounding``); a logical bound (1 for "slower") is exact."""

    kind: str
    target: Any = None
    bounds: tuple[float, float] | None = None
    rel: float | None = None
    abs: float | None = None
    printed: tuple[bool, bool] = (False, False)
    points: tuple[tuple[Any, float], ...] = ()


@dataclass(frozen=True)
class Check:
    stage: str
    rows: Rows
    measure: Measure
    expect: Expect | None                           # None: an open question's plain answer
    dtype: str = "fp16"                             # fp16 | 16-bit | each | any | a dtype
    scope: tuple[tuple[str, tuple], ...] = ()       # the sentence's own values
    device: str | None = None                       # the device class it needs / is about
    gpu: str = "chapter"                            # device-specific: judged on a GPU like
    #                                                 the chapter's, or on "any" GPU
    between_runs: bool = False
    table: str = "availability"                     # probe.json's list: or backend_map


@dataclass(frozen=True)
class Reading:
    """How the check reads its sentence, in words a reviewer checks against the text: the
    quantity judged and why the accepted region is what the sentence says (the scope and
    the region themselves are the check's, rendered from it: docs/claims-review.md)."""

    quantity: str
    why: str


@dataclass(frozen=True)
class Claim:
    """One claim of the chapter: its words, its printed value, and how to check it."""

    id: str
    sentence: str
    chapter_value: str
    kind: str
    check: Check | None = None
    source: str | None = None
    note: str | None = None
    reading: Reading | None = None
    figures: tuple = ()           # the numbers the chapter prints for it, as printed


@dataclass(frozen=True)
class ClaimsFile:
    claims: tuple[Claim, ...]
    hardware: str
    fp16_stand_in: dict[str, str]   # device class -> the dtype that stands for fp16
    chapter_gpu: dict | None = None  # the chapter's GPU ({"multiprocessors": n}): a
    #                                  device-specific figure is judged on such a GPU only


# --------------------------------------------------------------------------- parsing


def _condition(column: str, cond: Any) -> Condition:
    if isinstance(cond, dict):
        return Condition(column, low=cond.get("min"), high=cond.get("max"))
    return Condition(column, values=tuple(cond) if isinstance(cond, list) else (cond,))


def _rows(spec: dict) -> Rows:
    best = spec.get("best")
    return Rows(tuple(_condition(c, v) for c, v in (spec.get("where") or {}).items()),
                Best(tuple(best["by"]), best["lowest"]) if best else None)


def _measure(check: dict) -> Measure:
    spec = check.get("ratio") or check["value"]
    common = {"column": spec["column"], "stat": spec["stat"], "by": tuple(spec.get("by", ())),
              "x": spec.get("x"), "at": spec.get("at")}
    if "ratio" in check:
        return Measure(**common, numerator=_rows(spec["numerator"]),
                       denominator=_rows(spec["denominator"]), join=tuple(spec["join"]))
    return Measure(**common, over=spec.get("over"), invert=spec.get("invert", False),
                   unit=spec.get("unit"), per=spec.get("per"), valid_max=spec.get("valid_max"))


def _expect(spec: dict) -> Expect:
    printed = spec.get("printed", False)
    printed = tuple(printed) if isinstance(printed, list) else (printed, printed)
    if "between" in spec or spec.get("finite"):  # finite: 'does not overflow', no NaN or inf
        return Expect("between", bounds=tuple(spec["between"]), printed=printed) \
            if "between" in spec else Expect("finite")
    if "approx_at" in spec:
        return Expect("approx_at", rel=spec.get("rel"), points=tuple(map(tuple, spec["approx_at"])),
                      printed=printed)
    kind = next(k for k in ("max", "min", "approx", "equals", "direction") if k in spec)
    return Expect(kind, target=spec[kind], rel=spec.get("rel"), abs=spec.get("abs"),
                  printed=printed)


def printed_rounding(x: float) -> float:
    """Half a unit in the last significant digit of ``x`` as printed: 0.58 -> 0.005,
    5.5 -> 0.05, 16 -> 0.5, 29000 -> 500 (an integer's trailing zeros are not
    significant), 2e-4 -> 5e-5. The widest number a printed figure stands for."""
    x = abs(float(x))
    if x == 0:
        return 0.0
    if x.is_integer():
        digits = str(int(x))
        return 0.5 * 10 ** (len(digits) - len(digits.rstrip("0")))
    mantissa, _, exponent = f"{x!r}".partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def _check(spec: dict) -> Check:
    return Check(stage=spec["stage"], rows=_rows(spec), measure=_measure(spec),
                 expect=_expect(spec["expect"]) if "expect" in spec else None,
                 dtype=spec.get("dtype", "fp16"),
                 scope=tuple((c, tuple(v)) for c, v in (spec.get("scope") or {}).items()),
                 device=spec.get("device"), gpu=spec.get("gpu", "chapter"),
                 between_runs=spec.get("between_runs", False),
                 table=spec.get("table", "availability"))


# --------------------------------------------------------------------------- checking


def columns_named(check: Check) -> set[str]:
    m = check.measure
    named = {c for c, _ in check.scope} | {m.column, *m.by, *m.join}
    named |= {c for c in (m.over, m.x, m.at) if c}
    if m.per:
        named |= {*TENSORS[m.per], "dtype"}
    for rows in (check.rows, m.numerator, m.denominator):
        if rows is not None:
            named |= {c.column for c in rows.where}
            if rows.best is not None:
                named |= {*rows.best.by, rows.best.lowest}
    return named


# ------------------------------------------------------------- the backend map's derived columns

# columns a check of probe.json's backend_map may name beside the stored ones, computed
# from the map as read (``map_derived``), never stored: column -> its schema type
MAP_DERIVED = {"base_can_run": "boolean", "fused_can_run": "boolean"}
# the fused SDPA backends (inferlab.measurement.backends.FUSED_SDPA, which imports torch)
FUSED_BACKENDS = ("flash", "efficient", "cudnn")


def map_base_case(rows: list[dict]) -> str | None:
    """The backend map's base case: the head-dimension case at the head dimension of its
    feature cases (causal, grouped key/value heads, mask, dropout), full attention, no
    mask, no dropout, one key/value head per query head; None without exactly one."""
    feature_d = {r["d"] for r in rows if not str(r["case"]).startswith("d=")}
    names = {r["case"] for r in rows if r["d"] in feature_d and not r["causal"]
             and not r["mask"] and not r["dropout_p"] and r["kv_heads"] == r["heads"]}
    return next(iter(names)) if len(names) == 1 else None


def map_derived(rows: list[dict]) -> list[dict]:
    """Each backend-map row with ``MAP_DERIVED``: ``base_can_run``, whether the same
    backend can run the base case (``map_base_case``) in the same dtype (a case such a
    backend cannot run disables a fast path that runs the base case here); and
    ``fused_can_run``, whether any fused backend can run this case in this dtype (False:
    only the materializing math path is left)."""
    base = map_base_case(rows)
    at_base = {(r["dtype"], r["backend"]): r["can_run"] is True
               for r in rows if r["case"] == base}
    fused: dict[tuple, bool] = {}
    for r in rows:
        key = (r["case"], r["dtype"])
        fused[key] = fused.get(key, False) or (r["backend"] in FUSED_BACKENDS
                                               and r["can_run"] is True)
    return [{**r, "base_can_run": at_base.get((r["dtype"], r["backend"])),
             "fused_can_run": fused[(r["case"], r["dtype"])]} for r in rows]


def artifact_columns(check: Check) -> set[str]:
    """The columns a check may name: its artifact's, or for a between-run check the
    point's key columns and the differences of the compared columns."""
    if check.stage == "probe":
        stored = set(artifacts.schema("probe")["properties"][check.table]["items"]["required"])
        return stored | (set(MAP_DERIVED) if check.table == "backend_map" else set())
    if check.between_runs:
        return {*STAGES[check.stage].key_columns, "status",
                *BETWEEN_RUNS}
    return set(artifacts.columns(check.stage))


def _check_claim(claim: Claim, name: str) -> None:
    """Every column a check names exists in its artifact; a unit fits its column."""
    check = claim.check
    if check is None:
        return
    if check.between_runs and not STAGES[check.stage].timed:
        raise ValueError(f"{name}: claim {claim.id} compares runs of {check.stage!r}, "
                         "which times nothing")
    if claim.kind == "device-specific" and check.device is None:
        raise ValueError(f"{name}: claim {claim.id} is device-specific but names no device")
    if check.gpu != "chapter" and (claim.kind != "device-specific" or check.device != "cuda"):
        raise ValueError(f"{name}: claim {claim.id}, field check.gpu: gpu={check.gpu!r} says "
                         "which GPUs judge a device-specific CUDA figure; this claim is "
                         f"{claim.kind} on {check.device or 'any device'}")
    if check.expect is None and claim.kind != "question":
        raise ValueError(f"{name}: claim {claim.id} has no check.expect; only a question "
                         "(kind: question) may be answered without one")
    if check.table != "availability" and check.stage != "probe":
        raise ValueError(f"{name}: claim {claim.id}, field check.table: table="
                         f"{check.table!r} names a list of probe.json; stage is {check.stage!r}")
    known = artifact_columns(check)
    for column in sorted(columns_named(check) - known):
        close = difflib.get_close_matches(column, sorted(known), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"{name}: claim {claim.id} names column {column!r}, which "
                         f"{STAGES[check.stage].artifact} does not have{hint}")
    unit, column = check.measure.unit, check.measure.column
    if check.measure.per and not (column.endswith("_bytes") and unit is None):
        raise ValueError(f"{name}: claim {claim.id}, field check.value.per: "
                         f"per={check.measure.per!r} counts a *_bytes column in tensors "
                         f"(no unit), not {column!r} with unit {unit!r}")
    if unit and not column.endswith(UNITS[unit][0]):
        raise ValueError(f"{name}: claim {claim.id}, field check.value.unit: unit={unit!r} "
                         f"converts from a *{UNITS[unit][0]} column, not {column!r}")


# a claim id, checked whole (a schema's "$" also matches before a trailing newline)
CLAIM_ID = re.compile(r"[CQ]13-[0-9]{2}")


def _validate(data: Any, name: str) -> None:
    schema = json.loads(layout.schema_path("claims.schema.json").read_text(encoding="utf-8"))
    errors = sorted(validation.validator(schema).iter_errors(data),
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
    bad = [i for i in ids if not CLAIM_ID.fullmatch(i)]
    if bad:
        raise ValueError(f"{name}: claim id {bad[0]!r} is not C13-NN or Q13-NN (two digits, "
                         "nothing before or after)")
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"{name}: claim ids must be unique; repeated: {dupes}")


@functools.lru_cache(maxsize=8)
def _parse(text: str, name: str) -> ClaimsFile:
    # cached on the text: the report and audit read the same file for every machine
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is 10x faster
    try:
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise ValueError(f"{name} is not valid YAML: {' '.join(str(exc).split())}") from None
    _validate(data, name)
    claims = tuple(Claim(id=c["id"], sentence=" ".join(c["sentence"].split()),
                         chapter_value=c["chapter_value"], kind=c["kind"],
                         check=_check(c["check"]) if "check" in c else None,
                         source=c.get("source"),
                         note=" ".join(c["note"].split()) if "note" in c else None,
                         reading=Reading(*(" ".join(c["reading"][k].split())
                                           for k in ("quantity", "why")))
                         if "reading" in c else None,
                         figures=tuple(c.get("figures", ())))
                   for c in data["claims"])
    for claim in claims:
        _check_claim(claim, name)
    stand_in = {k: v for k, v in data["fp16_stand_in"].items() if k in ("cuda", "cpu")}
    return ClaimsFile(claims, data.get("chapter_hardware", ""), stand_in,
                      data.get("chapter_gpu"))


def load(path: Path | str | None = None) -> ClaimsFile:
    """Read, validate and type ``claims.yaml``; errors name the claim id and the field."""
    path = Path(path) if path is not None else layout.CLAIMS_FILE
    if not path.is_file():
        raise ValueError(f"claims file {str(path)!r} does not exist; expected a claims.yaml")
    return _parse(path.read_text(encoding="utf-8"), path.name)


def find(claim_id: str, claims: tuple[Claim, ...] | list[Claim]) -> Claim:
    """The claim with ``claim_id``; unknown -> ValueError listing close matches."""
    by_id = {c.id: c for c in claims}
    if claim_id in by_id:
        return by_id[claim_id]
    close = difflib.get_close_matches(claim_id.upper(), list(by_id), n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"known ids: {', '.join(by_id)}"
    raise ValueError(f"claim_id={claim_id!r} is not in claims.yaml; {hint}")
