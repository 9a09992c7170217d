"""inferlab.evidence.artifacts: the one reader and writer, typed from the schemas."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from inferlab.evidence import artifacts

SEED = 20241130


def _traffic_row(rng: random.Random, **extra) -> dict:
    T = rng.choice([256, 512, 1024])
    return {"T": T, "d": 64, "causal": rng.random() < 0.5, "dtype": "float32",
            "tile": "assumed",
            "block_q_model": 128, "model_ratio": rng.uniform(3, 12), **extra}


def test_round_trip_is_exact_and_typed():
    rng = random.Random(SEED)
    rows = [_traffic_row(rng, measured_ratio=rng.uniform(1, 20), note="a, \"quoted\" note")
            for _ in range(5)]
    table = artifacts.decode("traffic", artifacts.encode("traffic", rows))
    frame = table.frame
    assert str(frame["T"].dtype) == "Int64" and str(frame["causal"].dtype) == "boolean"
    assert frame["model_ratio"].dtype == float and str(frame["note"].dtype) == "string"
    assert [float(x) for x in frame["measured_ratio"]] == [r["measured_ratio"] for r in rows]
    assert list(frame["note"]) == [r["note"] for r in rows]
    # and the bytes are stable: reading and writing again gives the same file
    again = [{c: artifacts._plain(v) if not (isinstance(v, float) and math.isnan(v)) else None
              for c, v in r.items()} for r in frame.to_dict(orient="records")]
    assert artifacts.encode("traffic", again) == artifacts.encode("traffic", rows)


def test_empty_and_nan_are_different_things():
    """An empty cell does not apply; a nan cell is a computation that overflowed."""
    rng = random.Random(SEED + 1)
    rows = [_traffic_row(rng), _traffic_row(rng, measured_ratio=math.nan),
            _traffic_row(rng, measured_ratio=math.inf)]
    content = artifacts.encode("traffic", rows)
    at = artifacts.columns("traffic").index("measured_ratio")
    cells = [line.split(",")[at] for line in content.decode().splitlines()[1:]]
    assert cells == ["", "nan", "inf"]
    table = artifacts.decode("traffic", content)
    assert list(table.nonfinite["measured_ratio"]) == [False, True, True]
    assert table.frame["measured_ratio"].isna().tolist() == [True, True, False]


def test_integers_are_written_as_integers_and_numbers_as_floats():
    row = _traffic_row(random.Random(SEED + 2))
    row["model_ratio"] = 3  # an int in a number column
    line = artifacts.encode("traffic", [row]).decode().splitlines()[1].split(",")
    at = artifacts.columns("traffic").index("model_ratio")
    assert line[0] == str(row["T"]) and line[at] == "3.0"


@pytest.mark.parametrize(("column", "value"), [("T", "many"), ("causal", "maybe"),
                                               ("T", 1.5), ("model_ratio", "x")])
def test_a_value_of_the_wrong_type_is_named(column, value):
    row = _traffic_row(random.Random(SEED + 3), **{column: value})
    with pytest.raises(ValueError, match=f"row 0, column {column}"):
        artifacts.encode("traffic", [row])


def test_unknown_column_is_refused():
    with pytest.raises(ValueError, match="bogus"):
        artifacts.encode("traffic", [_traffic_row(random.Random(SEED), bogus=1)])


# out of range and off the enum: in the table's own schema (tile) and in the definitions
# it refers to (T, dtype_or_empty in defs.schema.json)
@pytest.mark.parametrize(("column", "value"), [("T", -5), ("dtype", "float8"),
                                               ("tile", "guessed")])
def test_schema_violation_names_row_and_column(column, value):
    rng = random.Random(SEED + 4)
    rows = [_traffic_row(rng) for _ in range(4)]
    rows[3][column] = value
    with pytest.raises(ValueError, match=rf"row 3 \(schemas/traffic.schema.json\), {column}:"):
        artifacts.encode("traffic", rows)


def test_a_corrupted_file_is_named_not_a_traceback(tmp_path):
    rng = random.Random(SEED + 5)
    path = tmp_path / "traffic.csv"
    path.write_bytes(artifacts.encode("traffic", [_traffic_row(rng)]) + b"1,2\n")
    with pytest.raises(ValueError, match="traffic.csv row 1: 2 cells"):
        artifacts.read(path, "traffic")
    path.write_text("not,the,header\n")
    with pytest.raises(ValueError, match="header"):
        artifacts.read(path, "traffic")


def test_json_artifact_needs_a_dict_and_valid_json(tmp_path):
    with pytest.raises(ValueError, match="returns a dict"):
        artifacts.encode("probe", [])
    path = tmp_path / "probe.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="probe.json is not JSON"):
        artifacts.read(path, "probe")


def test_probe_availability_is_a_typed_table():
    row = {"dtype": "float32", "causal": True, "T": 64, "heads": 2, "d": 16,
           "backend": "flash", "can_run": True, "ran": True, "reason": None,
           "reason_source": "pytorch", "limit_kind": None, "op": "aten::x", "error": None}
    frame = artifacts.probe_availability({"availability": [row]}).frame
    assert str(frame["ran"].dtype) == "boolean" and str(frame["T"].dtype) == "Int64"
    assert frame.loc[0, "ran"].item() is True
    assert pd.isna(frame.loc[0, "reason"])
