"""Schemas, loaded with their references read in, and the one place that imports
``jsonschema``: lazily, since on the lent GPU machine it arrives as carried wheels
(``scripts/gpu-call.sh``). Where it is missing a check is never skipped: it raises an
error that says how to install it.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
from typing import Any

from inferlab.core import layout

MISSING = ("jsonschema is not importable, and every config, artifact and claims file is "
           "checked against its schema: pip install 'jsonschema>=4.18' (make setup); on the "
           "lent GPU machine, carry gpu-wheels/ and let scripts/gpu-call.sh install it "
           "(docs/gpu-run.md)")


@functools.cache
def _file(name: str) -> dict:
    return json.loads(layout.schema_path(name).read_text(encoding="utf-8"))


def _inlined(node: Any, name: str) -> Any:
    if isinstance(node, list):
        return [_inlined(item, name) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" not in node:
        return {key: _inlined(value, name) for key, value in node.items()}
    target_name, _, pointer = node["$ref"].partition("#")
    target_name = target_name or name
    target = _file(target_name)
    for part in filter(None, pointer.split("/")):
        target = target[part]
    beside = {key: value for key, value in node.items() if key != "$ref"}
    return {**_inlined(target, target_name), **_inlined(beside, name)}


def load(name: str) -> dict:
    """``schemas/<name>`` with every ``$ref`` replaced by its target, so a property's type
    and bounds are read where the property is. A keyword beside a ``$ref`` replaces the
    target's: the schemas set none that would widen it, where JSON Schema (which applies
    both) would disagree."""
    return _inlined(_file(name), name)


def _jsonschema():
    try:
        return importlib.import_module("jsonschema")
    except ImportError as exc:
        raise ModuleNotFoundError(f"{MISSING} ({exc})") from exc


def _is_integer(checker, instance) -> bool:
    """JSON Schema counts 1.0 as an integer; torch.manual_seed(1.0) and range(1.0) do not."""
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_finite_number(checker, instance) -> bool:
    """A NaN passes every bound of JSON Schema (each comparison is false): not a number here."""
    return not isinstance(instance, bool) and (
        isinstance(instance, int) or isinstance(instance, float) and math.isfinite(instance))


def validator(schema: dict, strict: bool = False) -> Any:
    """A Draft 2020-12 validator; ``strict`` (a config) takes an "integer" to be an int
    only (seed=1.0 is refused) and a "number" to be finite (``.nan`` would run a whole
    timing stage before its provenance refused it)."""
    js = _jsonschema()
    if not strict:
        return js.Draft202012Validator(schema)
    checker = js.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_finite_number})
    return js.validators.extend(js.Draft202012Validator, type_checker=checker)(schema)


def best_match(errors) -> Any:
    return _jsonschema().exceptions.best_match(errors)
