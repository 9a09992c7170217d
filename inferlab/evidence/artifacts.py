"""The one reader and writer of artifacts, typed from their schemas (``schemas/``).

A table artifact (CSV) is written from row dicts and read back as a ``Table``: a DataFrame
typed by the schema (``Int64``, ``float64``, ``boolean``, ``string``) and ``nonfinite``,
marking each number cell *computed* as NaN or infinity. The two must not be confused: an
empty cell means "does not apply to this row", a ``nan`` cell that a computation
overflowed, and a claim judged on it must say so rather than drop it. A number is written
as ``repr(float)`` (round-trips exactly). A JSON artifact (probe, claims) has no NaN: a
stage writes None for a value it could not measure. Every artifact is validated against
its schema when written and when read, and errors name the row and the column.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from inferlab.core import validation
from inferlab.core.pipeline import stage as declared
from inferlab.measurement.status import from_legacy


@dataclass(frozen=True)
class Table:
    """A table artifact as read: typed columns, and where a number was not finite."""

    frame: pd.DataFrame
    nonfinite: pd.DataFrame  # bool, one column per number column, True where NaN/inf

    def __len__(self) -> int:
        return len(self.frame)


@functools.cache
def schema(stage: str) -> dict:
    """The JSON schema of ``stage``'s artifact (a table's describes one row)."""
    return validation.load(declared(stage).schema)


def columns(stage: str) -> list[str]:
    """A table's columns in contract order."""
    return list(schema(stage)["properties"])


def schema_version(stage: str) -> int:
    """The layout version of ``stage``'s artifact (``x-schema-version``, 1 if absent)."""
    return int(schema(stage).get("x-schema-version", 1))


def _accepted_header(stage: str, header: list[str] | None) -> bool:
    """The contract's columns, or those of an older layout: the same order without some
    columns added since (``x-since-version``), which then read as missing."""
    props = schema(stage)["properties"]
    if header is None or header != [c for c in columns(stage) if c in header]:
        return False
    return all("x-since-version" in props[c] for c in columns(stage) if c not in header)


def column_type(stage: str, column: str, row_schema: dict | None = None) -> str:
    """'integer', 'number', 'boolean' or 'string': the column's non-null schema type."""
    props = (row_schema or schema(stage))["properties"]
    if column not in props:
        raise ValueError(f"{declared(stage).artifact} has no column {column!r}; its columns "
                         f"are {sorted(props)}")
    types = props[column].get("type", "string")
    types = [t for t in (types if isinstance(types, list) else [types]) if t != "null"]
    return types[0] if types else "string"


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    return value.item() if isinstance(value, np.generic) else value


def _coerce(value: Any, kind: str, where: str) -> Any:
    """A row value as the schema type ``kind`` (None stays None); errors name ``where``."""
    value = _plain(value)
    if value is None:
        return None
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "string" and isinstance(value, str):
        return value
    raise ValueError(f"{where}: {value!r} is not {_a(kind)}")


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else \
            ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    return str(value)


def _parse(text: str, kind: str, where: str) -> Any:
    """A CSV cell as the schema type ``kind``; an empty cell is None (missing)."""
    if text == "":
        return None
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)  # "nan", "inf", "-inf" included: computed, not missing
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not {_a(kind)}") from None
    if kind == "boolean":
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{where}: {text!r} is not a boolean (True or False)")
        return text.lower() == "true"
    return text


def encode(stage: str, result: list[dict] | dict) -> bytes:
    """A stage's result (rows, or a dict) as the artifact's bytes, validated."""
    name = declared(stage).artifact
    if declared(stage).is_table:
        if not isinstance(result, list):
            raise ValueError(f"stage {stage!r} returned {type(result).__name__}; a table "
                             "stage returns a list of row dicts")
        cols = columns(stage)
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(cols)
        for i, row in enumerate(result):
            unknown = set(row) - set(cols)
            if unknown:
                raise ValueError(f"{name} row {i} sets columns {sorted(unknown)} that the "
                                 f"contract does not have; its columns are {cols}")
            writer.writerow([_cell(_coerce(row.get(c), column_type(stage, c),
                                           f"{name} row {i}, column {c}")) for c in cols])
        content = buffer.getvalue().encode("utf-8")
    elif isinstance(result, dict):
        content = (json.dumps(result, indent=2, allow_nan=False) + "\n").encode("utf-8")
    else:
        raise ValueError(f"stage {stage!r} returned {type(result).__name__}; a JSON stage "
                         "returns a dict")
    validate(stage, content)
    return content


def _records(stage: str, content: bytes) -> list[dict]:
    """CSV rows as typed dicts (missing cells None); errors name the row and column."""
    name = declared(stage).artifact
    reader = csv.reader(io.StringIO(content.decode("utf-8")))
    header = next(reader, None)
    if not _accepted_header(stage, header):
        raise ValueError(f"{name}: header {header} is not the contract's {columns(stage)} "
                         "(nor an older version's: the same without columns added since)")
    kinds = [column_type(stage, c) for c in header]
    absent = dict.fromkeys(c for c in columns(stage) if c not in header)
    records = []
    legacy = "cause" in absent and "status" in header  # a status written as one string
    for i, cells in enumerate(reader):
        if len(cells) != len(header):
            raise ValueError(f"{name} row {i}: {len(cells)} cells, expected {len(header)}")
        record = {**absent, **{c: _parse(t, k, f"{name} row {i}, column {c}")
                               for c, t, k in zip(header, cells, kinds, strict=True)}}
        if legacy and isinstance(record["status"], str):
            try:
                record.update(from_legacy(record["status"]))
            except ValueError as exc:
                raise ValueError(f"{name} row {i}, column status: {exc}") from None
        records.append(record)
    return records


def _check(validator, record: dict, where: str) -> None:
    error = validation.best_match(validator.iter_errors(record))
    if error is not None:
        at = "/".join(map(str, error.absolute_path)) or "(top level)"
        raise ValueError(f"{where}, {at}: {error.message}")


def validate(stage: str, content: bytes) -> None:
    """ValueError naming the row and column when the artifact breaks its schema."""
    name, file = declared(stage).artifact, declared(stage).schema
    validator = validation.validator(schema(stage))
    if declared(stage).is_table:
        for i, record in enumerate(_records(stage, content)):
            # jsonschema has no NaN: a computed non-finite number is checked as a number
            finite = {k: (0.0 if isinstance(v, float) and not math.isfinite(v) else v)
                      for k, v in record.items()}
            _check(validator, finite, f"{name} row {i} (schemas/{file})")
        return
    try:
        data = json.loads(content)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name} is not JSON: {exc}") from None
    _check(validator, data, f"{name} (schemas/{file})")


def frame_of(records: list[dict], kinds: dict[str, str]) -> Table:
    """A typed Table from records, given each column's schema type."""
    data, nonfinite = {}, {}
    for column, kind in kinds.items():
        values = [r.get(column) for r in records]
        if kind == "number":
            floats = [math.nan if v is None else float(v) for v in values]
            data[column] = pd.Series(floats, dtype="float64")
            nonfinite[column] = pd.Series([v is not None and not math.isfinite(v)
                                           for v in values], dtype=bool)
        else:
            dtype = {"integer": "Int64", "boolean": "boolean"}.get(kind, "string")
            data[column] = pd.Series([pd.NA if v is None else v for v in values], dtype=dtype)
    return Table(pd.DataFrame(data, columns=list(kinds)),
                 pd.DataFrame(nonfinite, index=range(len(records))))


def decode(stage: str, content: bytes) -> Table | dict:
    """The artifact's bytes, validated, as a typed Table (CSV) or a dict (JSON)."""
    validate(stage, content)
    if not declared(stage).is_table:
        return json.loads(content)
    return frame_of(_records(stage, content), {c: column_type(stage, c) for c in columns(stage)})


def read(path: Path | str, stage: str) -> Table | dict:
    """Read and validate ``stage``'s artifact at ``path``."""
    return decode(stage, Path(path).read_bytes())


def probe_availability(probe: dict) -> Table:
    """probe.json's availability list as a typed Table (one row per backend and case)."""
    row_schema = schema("probe")["properties"]["availability"]["items"]
    kinds = {c: column_type("probe", c, row_schema) for c in row_schema["required"]}
    return frame_of(probe.get("availability", []), kinds)
