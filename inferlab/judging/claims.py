"""claims.yaml, loaded into typed checks: the claims vocabulary, specified once, here.

Loading checks every field as it types it into frozen dataclasses, then every column a
check names against the schema of the artifact it reads, so a typo is an error naming the
claim, the field and the fix, never a verdict of "not measurable here". Nothing in a claim
is executed. Each sentence is stored once, in ``docs/chapter/sentences.yaml``; the loader
attaches it (``Claim.sentence``). The file's header explains the vocabulary in words,
premises included.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from inferlab.core import layout
from inferlab.core.pipeline import CLAIMS_STAGE, STAGES
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

# The vocabulary's words (claims.yaml's header says what each means)
VERSION = 3
KINDS = ("measured", "model", "arithmetic", "between-run", "device-specific", "author-code",
         "reported", "question")
DTYPES = ("float32", "float16", "bfloat16")
CHECK_DTYPES = ("fp16", "16-bit", "each", "any", *DTYPES)
DEVICES = ("cuda", "cpu")
GPUS = ("chapter", "any")
TABLES = ("availability", "backend_map")
STATS = ("max", "min", "median", "range", "spread", "loglog_slope", "at")
EXPECTS = ("between", "max", "min", "approx", "equals", "direction", "approx_at", "finite")
DIRECTIONS = (">1", "<1", ">0")
# the stages a check may read: every stage declared before the claims stage
JUDGED = STAGES[CLAIMS_STAGE].reads
# where each sentence is stored, relative to the folder of claims.yaml
SENTENCES_FILE = Path("docs") / "chapter" / "sentences.yaml"
# a claim id, checked whole (a regex's "$" also matches before a trailing newline)
CLAIM_ID = re.compile(r"[CQ]13-[0-9]{2}")
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
    equals | direction | approx_at | finite, with ``bounds`` (lo, hi), ``target`` or
    ``points``. ``printed`` says, per bound (lo, hi; or the one target), whether it is a
    figure the chapter printed: such a bound stands for every number that rounds to it
    (0.58 for 0.575-0.585, ``printed_rounding``); a logical bound (1 for "slower") is exact.
    approx and approx_at are the printed figure, always (their width is its rounding)."""

    kind: str
    target: Any = None
    bounds: tuple[float, float] | None = None
    printed: tuple[bool, bool] = (False, False)
    points: tuple[tuple[Any, float], ...] = ()


@dataclass(frozen=True)
class Premise:
    """A premise of a model that checks rest on (claims.yaml's ``premises``; its header says
    when one holds). One without a ``check`` was measured outside the artifacts
    (``measured``, ``to_judge``) on the machines it was refuted on (``refuted_on``)."""

    name: str
    says: str
    check: Check | None = None
    refuted_on: tuple[str, ...] = ()
    measured: str | None = None
    to_judge: str | None = None


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
    premises: tuple[Premise, ...] = ()              # judged only where these hold
    asks: str | None = None                         # a question's premise it asks about:
    #                                                 where it fails, the answer is no


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


class Bad(ValueError):
    """A field of claims.yaml that is wrong: ``field`` (dotted) and what is wrong with it."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _mapping(spec: Any, field: str, allowed: tuple, required: tuple = ()) -> dict:
    if not isinstance(spec, dict):
        raise Bad(field, f"expected a mapping, got {spec!r}")
    unknown = [k for k in spec if k not in allowed]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), allowed, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise Bad(field, f"unknown key {unknown[0]!r}; {hint}expected {', '.join(allowed)}")
    for key in required:
        if key not in spec:
            raise Bad(field, f"{key!r} is required")
    return spec


def _word(value: Any, field: str, words: tuple) -> str:
    if not isinstance(value, str) or value not in words:
        raise Bad(field, f"{value!r} is not one of {', '.join(words)}")
    return value


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Bad(field, f"expected some text, got {value!r}")
    return " ".join(value.split())


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Bad(field, f"expected a finite number, got {value!r}")
    return value


def _flag(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise Bad(field, f"expected true or false, got {value!r}")
    return value


def _scalar(value: Any, field: str) -> Any:
    if not isinstance(value, str | int | float) or (isinstance(value, float)
                                                      and not math.isfinite(value)):
        raise Bad(field, f"expected a number, a word or true/false, got {value!r}")
    return value


def _column(value: Any, field: str) -> str:
    if not isinstance(value, str) or not _COLUMN.fullmatch(value):
        raise Bad(field, f"{value!r} is not a column name")
    return value


def _columns(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise Bad(field, f"expected a list of column names, got {value!r}")
    columns = tuple(_column(c, field) for c in value)
    if len(set(columns)) != len(columns):
        raise Bad(field, f"a column is named twice in {list(columns)}")
    return columns


def _condition(column: str, cond: Any, field: str | None = None) -> Condition:
    field = field or f"check.where.{column}"
    if isinstance(cond, dict):
        _mapping(cond, field, ("min", "max"))
        if not cond:
            raise Bad(field, "a range needs min, max or both")
        return Condition(column, low=_number(cond["min"], f"{field}.min") if "min" in cond
                         else None, high=_number(cond["max"], f"{field}.max")
                         if "max" in cond else None)
    values = cond if isinstance(cond, list) else [cond]
    if not values:
        raise Bad(field, "an empty list matches no row")
    return Condition(column, values=tuple(_scalar(v, field) for v in values))


def _rows(spec: dict, field: str) -> Rows:
    where = spec.get("where") or {}
    if not isinstance(where, dict):
        raise Bad(f"{field}where", f"expected a mapping of column to values, got {where!r}")
    conditions = tuple(_condition(_column(c, f"{field}where"), v, f"{field}where.{c}")
                       for c, v in where.items())
    best = spec.get("best")
    if best is None:
        return Rows(conditions)
    _mapping(best, f"{field}best", ("by", "lowest"), ("by", "lowest"))
    return Rows(conditions, Best(_columns(best["by"], f"{field}best.by"),
                                 _column(best["lowest"], f"{field}best.lowest")))


def _statistic(spec: dict, field: str) -> dict:
    stat = _word(spec["stat"], f"{field}.stat", STATS)
    for needs, wanted in (("x", "loglog_slope"), ("at", "at")):
        if stat == wanted and needs not in spec:
            raise Bad(field, f"stat {stat} needs {needs}: the column it is taken against")
    return {"column": _column(spec["column"], f"{field}.column"), "stat": stat,
            "by": _columns(spec["by"], f"{field}.by") if "by" in spec else (),
            "x": _column(spec["x"], f"{field}.x") if "x" in spec else None,
            "at": _column(spec["at"], f"{field}.at") if "at" in spec else None}


def _measure(check: dict) -> Measure:
    if ("value" in check) == ("ratio" in check):
        raise Bad("check", "give exactly one of value (a column of the rows) and ratio "
                  "(numerator rows over denominator rows)")
    if "ratio" in check:
        spec = _mapping(check["ratio"], "check.ratio",
                        ("numerator", "denominator", "join", "column", "stat", "by", "x", "at"),
                        ("numerator", "denominator", "join", "column", "stat"))
        sides = {}
        for side in ("numerator", "denominator"):
            _mapping(spec[side], f"check.ratio.{side}", ("where", "best"))
            sides[side] = _rows(spec[side], f"check.ratio.{side}.")
        return Measure(**_statistic(spec, "check.ratio"), **sides,
                       join=_columns(spec["join"], "check.ratio.join"))
    spec = _mapping(check["value"], "check.value",
                    ("column", "stat", "over", "invert", "unit", "per", "valid_max", "by", "x",
                     "at"), ("column", "stat"))
    return Measure(**_statistic(spec, "check.value"),
                   over=_column(spec["over"], "check.value.over") if "over" in spec else None,
                   invert=_flag(spec.get("invert", False), "check.value.invert"),
                   unit=_word(spec["unit"], "check.value.unit", tuple(UNITS))
                   if "unit" in spec else None,
                   per=_word(spec["per"], "check.value.per", tuple(TENSORS))
                   if "per" in spec else None,
                   valid_max=_number(spec["valid_max"], "check.value.valid_max")
                   if "valid_max" in spec else None)


def _expect(spec: Any, field: str = "check.expect") -> Expect:
    """One expectation; ``printed`` only on a bound (between, max, min): approx and
    approx_at are the printed figure already, and nothing else is a figure."""
    _mapping(spec, field, (*EXPECTS, "printed"))
    kinds = [k for k in EXPECTS if k in spec]
    if len(kinds) != 1:
        raise Bad(field, f"give exactly one of {', '.join(EXPECTS)}; got "
                  f"{', '.join(kinds) or 'none'}")
    kind, x = kinds[0], spec[kinds[0]]
    at = f"{field}.{kind}"
    printed = spec.get("printed", False)
    if "printed" in spec and kind not in ("between", "max", "min"):
        raise Bad(f"{field}.printed", f"printed marks a bound the chapter printed (between, "
                  f"max, min); {kind} is " + ("the printed figure already" if kind.startswith(
                      "approx") else "no printed figure"))
    if kind == "between" and isinstance(printed, list):
        if len(printed) != 2:
            raise Bad(f"{field}.printed", f"one flag per bound, [low, high]; got {printed!r}")
        printed = tuple(_flag(p, f"{field}.printed") for p in printed)
    else:
        printed = (_flag(printed, f"{field}.printed"),) * 2
    if kind == "between":
        if not isinstance(x, list) or len(x) != 2:
            raise Bad(at, f"expected [low, high], got {x!r}")
        lo, hi = (_number(v, at) for v in x)
        if lo > hi:
            raise Bad(at, f"low {lo} is above high {hi}")
        return Expect(kind, bounds=(lo, hi), printed=printed)
    if kind in ("max", "min", "approx"):
        return Expect(kind, target=_number(x, at),
                      printed=(True, True) if kind == "approx" else printed)
    if kind == "equals":
        return Expect(kind, target=_scalar(x, at))
    if kind == "direction":
        return Expect(kind, target=_word(x, at, DIRECTIONS))
    if kind == "finite":
        if x is not True:
            raise Bad(at, f"finite: true is the only form (no inf or NaN); got {x!r}")
        return Expect(kind)
    if not isinstance(x, list) or not x or not all(isinstance(p, list) and len(p) == 2
                                                   for p in x):
        raise Bad(at, f"expected [[at, figure], ...], got {x!r}")
    return Expect(kind, points=tuple((_scalar(a, at), _number(v, at)) for a, v in x),
                  printed=(True, True))


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


CHECK_KEYS = ("stage", "device", "gpu", "dtype", "scope", "where", "best", "table",
              "between_runs", "value", "ratio", "expect", "premises", "asks")


def _premises_named(names: Any, premises: dict[str, Premise]) -> tuple[Premise, ...]:
    if not isinstance(names, list) or not names:
        raise Bad("check.premises", f"expected a list of premise names, got {names!r}")
    for name in names:
        if name not in premises:
            declared = ", ".join(premises) or "none"
            raise Bad("check.premises", f"{name!r} is not a premise of the file's premises: "
                      f"(declared: {declared})")
    return tuple(premises[n] for n in names)


def _check(spec: Any, premises: dict[str, Premise] | None = None) -> Check:
    _mapping(spec, "check", CHECK_KEYS, ("stage",))
    scope = spec.get("scope") or {}
    if not isinstance(scope, dict):
        raise Bad("check.scope", f"expected a mapping of column to its values, got {scope!r}")
    for column, values in scope.items():
        if not isinstance(values, list) or not values:
            raise Bad(f"check.scope.{column}", f"expected a list of the sentence's values, "
                      f"got {values!r}")
    return Check(stage=_word(spec["stage"], "check.stage", JUDGED), rows=_rows(spec, "check."),
                 measure=_measure(spec),
                 expect=_expect(spec["expect"]) if "expect" in spec else None,
                 dtype=_word(spec.get("dtype", "fp16"), "check.dtype", CHECK_DTYPES),
                 scope=tuple((_column(c, "check.scope"),
                              tuple(_scalar(v, f"check.scope.{c}") for v in values))
                             for c, values in scope.items()),
                 device=_word(spec["device"], "check.device", DEVICES)
                 if "device" in spec else None,
                 gpu=_word(spec.get("gpu", "chapter"), "check.gpu", GPUS),
                 between_runs=_flag(spec.get("between_runs", False), "check.between_runs"),
                 table=_word(spec.get("table", "availability"), "check.table", TABLES),
                 premises=_premises_named(spec["premises"], premises or {})
                 if "premises" in spec else (), asks=_asks(spec))


def _asks(spec: dict) -> str | None:
    """The premise a question asks about: one of the check's own premises."""
    if "asks" not in spec:
        return None
    named = ", ".join(spec.get("premises") or []) or "none named"
    if spec["asks"] not in (spec.get("premises") or []):
        raise Bad("check.asks", f"expected one of the check's premises ({named}), got "
                  f"{spec['asks']!r}: a question asks about a premise it rests on")
    return spec["asks"]


PREMISE_KEYS = ("says", "check", "refuted_on", "measured", "to_judge")


def _premise(name: str, raw: Any) -> Premise:
    """One premise of the file's ``premises``: what it says, and either the check that
    judges it on each machine or the machines a measurement kept outside the artifacts
    refuted it on, with that measurement and what would make it a check."""
    field = f"premises.{name}"
    _mapping(raw, field, PREMISE_KEYS, ("says",))
    if ("check" in raw) == ("refuted_on" in raw):
        raise Bad(field, "give exactly one of check (the premise judged on each machine's "
                  "artifacts) and refuted_on (the machines a measurement refuted it on)")
    if "refuted_on" in raw:
        machines = raw["refuted_on"]
        if not isinstance(machines, list) or not machines or not all(
                isinstance(m, str) and m for m in machines):
            raise Bad(f"{field}.refuted_on", f"expected a list of machine ids, got {machines!r}")
        for key in ("measured", "to_judge"):
            if key not in raw:
                raise Bad(field, f"{key!r} is required beside refuted_on: what was measured "
                          "(its figures, where it is kept) and what would make it a check")
        return Premise(name, _text(raw["says"], f"{field}.says"), refuted_on=tuple(machines),
                       measured=_text(raw["measured"], f"{field}.measured"),
                       to_judge=_text(raw["to_judge"], f"{field}.to_judge"))
    try:
        check = _check(raw["check"])
    except Bad as bad:
        raise Bad(f"{field}.{bad.field}", str(bad)) from None
    if check.expect is None:
        raise Bad(f"{field}.check", "a premise's check needs an expect: where it holds")
    return Premise(name, _text(raw["says"], f"{field}.says"), check=check)


def _premises(data: dict) -> dict[str, Premise]:
    raw = data.get("premises") or {}
    if not isinstance(raw, dict):
        raise Bad("premises", f"expected a mapping of name to premise, got {raw!r}")
    return {name: _premise(name, spec) for name, spec in raw.items()}


CLAIM_KEYS = ("id", "chapter_value", "figures", "kind", "reading", "note", "source", "check")


def _claim(raw: dict, sentence: str, premises: dict[str, Premise] | None = None) -> Claim:
    """One claim, its fields checked as they are typed (the id is checked by the caller)."""
    _mapping(raw, "(claim)", CLAIM_KEYS, ("id", "chapter_value", "kind", "reading"))
    kind = _word(raw["kind"], "kind", KINDS)
    if kind == "reported" and ("check" in raw or "source" not in raw):
        raise Bad("source", "a reported claim names its source and has no check: nothing "
                  "here can test someone else's figure")
    if kind != "reported" and ("check" not in raw or "source" in raw):
        raise Bad("check", f"a {kind} claim has a check and no source (only a reported "
                  "claim names a source instead)")
    reading = _mapping(raw["reading"], "reading", ("quantity", "why"), ("quantity", "why"))
    figures = raw.get("figures", [])
    if not isinstance(figures, list) or ("figures" in raw and not figures):
        raise Bad("figures", f"expected a list of the figures as printed, got {figures!r}")
    check = _check(raw["check"], premises) if "check" in raw else None
    if check is not None and check.asks and kind != "question":
        raise Bad("check.asks", f"only a question asks about a premise; this claim is {kind}: "
                  "name the premise in check.premises alone")
    return Claim(id=raw["id"], sentence=sentence,
                 chapter_value=_text(raw["chapter_value"], "chapter_value"), kind=kind,
                 check=check, source=_text(raw["source"], "source") if "source" in raw else None,
                 note=_text(raw["note"], "note") if "note" in raw else None,
                 reading=Reading(_text(reading["quantity"], "reading.quantity"),
                                 _text(reading["why"], "reading.why")),
                 figures=tuple(_scalar(f, "figures") for f in figures))


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
        return {*STAGES[check.stage].key_columns, "status", *BETWEEN_RUNS}
    return set(artifacts.columns(check.stage))


def _check_claim(claim: Claim, name: str) -> None:
    """A check fits its claim's kind, and every column it names exists (``_check_columns``)."""
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
    _check_columns(check, f"{name}: claim {claim.id}")


def _check_columns(check: Check, where: str) -> None:
    """Every column a check names exists in its artifact; a unit fits its column (``where``
    names the claim or premise in the error)."""
    known = artifact_columns(check)
    for column in sorted(columns_named(check) - known):
        close = difflib.get_close_matches(column, sorted(known), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"{where} names column {column!r}, which "
                         f"{STAGES[check.stage].artifact} does not have{hint}")
    unit, column = check.measure.unit, check.measure.column
    if check.measure.per and not (column.endswith("_bytes") and unit is None):
        raise ValueError(f"{where}, field check.value.per: "
                         f"per={check.measure.per!r} counts a *_bytes column in tensors "
                         f"(no unit), not {column!r} with unit {unit!r}")
    if unit and not column.endswith(UNITS[unit][0]):
        raise ValueError(f"{where}, field check.value.unit: unit={unit!r} "
                         f"converts from a *{UNITS[unit][0]} column, not {column!r}")


# --------------------------------------------------------------------------- the file


FILE_KEYS = ("version", "chapter_hardware", "chapter_gpu", "fp16_stand_in", "rules",
             "anchors", "premises", "claims")


def _file(data: Any) -> None:
    """The file's own fields (``Bad`` naming the field)."""
    _mapping(data, "(file)", FILE_KEYS, ("version", "fp16_stand_in", "claims"))
    if data["version"] != VERSION:
        raise Bad("version", f"{data['version']!r}: this loader reads version {VERSION}")
    stand_in = _mapping(data["fp16_stand_in"], "fp16_stand_in", (*DEVICES, "why"), DEVICES)
    for device in DEVICES:
        _word(stand_in[device], f"fp16_stand_in.{device}", DTYPES)
    if "chapter_gpu" in data:
        gpu = _mapping(data["chapter_gpu"], "chapter_gpu", ("multiprocessors",),
                       ("multiprocessors",))
        count = gpu["multiprocessors"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise Bad("chapter_gpu.multiprocessors", f"expected a count of at least 1, got "
                      f"{count!r}")
    if "chapter_hardware" in data:
        _text(data["chapter_hardware"], "chapter_hardware")
    for name, rule in (data.get("rules") or {}).items():
        _text(rule, f"rules.{name}")
    if not isinstance(data["claims"], list) or not data["claims"]:
        raise Bad("claims", "expected a list of claims")


def _ids(data: dict, name: str) -> list[str]:
    ids = []
    for i, raw in enumerate(data["claims"]):
        cid = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(cid, str) or not CLAIM_ID.fullmatch(cid):
            raise ValueError(f"{name}: claim #{i + 1} has id {cid!r}, which is not C13-NN or "
                             "Q13-NN (two digits, nothing before or after)")
        ids.append(cid)
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"{name}: claim ids must be unique; repeated: {dupes}")
    return ids


def _yaml(text: str, name: str) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is 10x faster
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise ValueError(f"{name} is not valid YAML: {' '.join(str(exc).split())}") from None


def sentences_of(text: str, name: str) -> dict[str, str]:
    """{claim id: its sentence}: the sentences of docs/chapter/sentences.yaml whose
    ``claims:`` name it, in the order of the seeds (joined by a space). The list's other
    rules are ``inferlab.presentation.coverage``'s."""
    data = _yaml(text, name)
    found: dict[str, list[str]] = {}
    seeds = data.get("seeds") if isinstance(data, dict) else None
    for seed in seeds if isinstance(seeds, list) else []:
        for entry in (seed.get("sentences") if isinstance(seed, dict) else None) or []:
            if isinstance(entry, dict) and isinstance(entry.get("text"), str):
                for cid in entry.get("claims") or []:
                    found.setdefault(cid, []).append(" ".join(entry["text"].split()))
    return {cid: " ".join(texts) for cid, texts in found.items()}


@functools.lru_cache(maxsize=8)
def _parse(text: str, sentences_text: str | None, name: str, sentences_name: str
           ) -> ClaimsFile:
    # cached on the texts: the report and audit read the same file for every machine
    data = _yaml(text, name)
    try:
        _file(data)
        premises = _premises(data)
    except Bad as bad:
        raise ValueError(f"{name}, field {bad.field}: {bad}") from None
    for premise in premises.values():
        if premise.check is not None:
            _check_columns(premise.check, f"{name}: premise {premise.name}")
    claims = []
    for cid, raw in zip(_ids(data, name), data["claims"], strict=True):
        try:
            claims.append(_claim(raw, "", premises))
        except Bad as bad:
            raise ValueError(f"{name}: claim {cid}, field {bad.field}: {bad}") from None
    for claim in claims:
        _check_claim(claim, name)
    # the sentences last: every error of the claims themselves is named first
    if sentences_text is None:
        raise ValueError(f"{name}: its sentences file {sentences_name} does not exist; each "
                         f"claim's sentence is stored there ({SENTENCES_FILE} beside "
                         f"{name})")
    said = sentences_of(sentences_text, sentences_name)
    for claim in claims:
        if claim.id not in said:
            raise ValueError(f"{name}: claim {claim.id} checks no sentence of "
                             f"{sentences_name}; add {claim.id} to the claims: of the "
                             "sentence it reads there")
    stand_in = {k: v for k, v in data["fp16_stand_in"].items() if k in DEVICES}
    return ClaimsFile(tuple(replace(c, sentence=said[c.id]) for c in claims),
                      data.get("chapter_hardware", ""), stand_in, data.get("chapter_gpu"))


def load(path: Path | str | None = None) -> ClaimsFile:
    """Read, check and type ``claims.yaml`` and attach each claim's sentence
    (docs/chapter/sentences.yaml beside it); errors name the claim id, the field and what
    would be right."""
    path = Path(path) if path is not None else layout.CLAIMS_FILE
    if not path.is_file():
        raise ValueError(f"claims file {str(path)!r} does not exist; expected a claims.yaml")
    sentences = path.parent / SENTENCES_FILE
    return _parse(path.read_text(encoding="utf-8"),
                  sentences.read_text(encoding="utf-8") if sentences.is_file() else None,
                  path.name, str(sentences))


def find(claim_id: str, claims: tuple[Claim, ...] | list[Claim]) -> Claim:
    """The claim with ``claim_id``; unknown -> ValueError listing close matches."""
    by_id = {c.id: c for c in claims}
    if claim_id in by_id:
        return by_id[claim_id]
    close = difflib.get_close_matches(claim_id.upper(), list(by_id), n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"known ids: {', '.join(by_id)}"
    raise ValueError(f"claim_id={claim_id!r} is not in claims.yaml; {hint}")
