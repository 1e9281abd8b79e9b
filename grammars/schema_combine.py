"""Combining schemas: `allOf` merged into one schema, and the check that `oneOf` branches are
disjoint (a grammar can offer alternatives, but cannot forbid matching two of them).

Merging is exact or refused: every keyword either combines into one that means the same as
both together, or raises `SchemaError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from grammars.schema_errors import SchemaError, Unsatisfiable
from grammars.schema_keywords import constraining, is_annotation
from grammars.schema_values import value_checker

Path = tuple[str | int, ...]
Resolve = Callable[[Any, Path], Any]  # a schema with its top-level `$ref` replaced by the target

MAX_BRANCHES = 64  # anyOf/oneOf alternatives after distributing allOf

ALL_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")

def canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=False)


def type_set(schema: dict) -> set[str]:
    """The JSON types a schema's `type` (and `nullable`) allow; every type when absent."""
    declared = schema.get("type")
    types = set(ALL_TYPES) if declared is None else {declared} if isinstance(declared, str) else set(declared)
    if "number" in types:
        types.add("integer")
    if schema.get("nullable") is True:
        types.add("null")
    return types


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _tighter(a: Any, b: Any, pick: Callable[[Any, Any], Any]) -> Any:
    return b if a is None else a if b is None else pick(a, b)


def _all_of(a: Any, b: Any) -> Any:
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    if canonical(a) == canonical(b):
        return a
    return {"allOf": [a, b]}


def _bound(schema: dict, side: str) -> tuple[Decimal, bool] | None:
    """(value, exclusive) of the lower ("min") or upper ("max") bound, either draft's spelling."""
    inclusive_key, exclusive_key = ("minimum", "exclusiveMinimum") if side == "min" else ("maximum", "exclusiveMaximum")
    bounds = []
    if isinstance(schema.get(inclusive_key), (int, float)) and not isinstance(schema.get(inclusive_key), bool):
        bounds.append((Decimal(str(schema[inclusive_key])), schema.get(exclusive_key) is True))
    exclusive = schema.get(exclusive_key)
    if isinstance(exclusive, (int, float)) and not isinstance(exclusive, bool):
        bounds.append((Decimal(str(exclusive)), True))
    if not bounds:
        return None
    # the tightest: for "min" the largest value (exclusive wins a tie), for "max" the smallest
    if side == "min":
        return max(bounds, key=lambda b: (b[0], b[1]))
    return min(bounds, key=lambda b: (b[0], not b[1]))


def numeric_bounds(schema: dict) -> tuple[tuple[Decimal, bool] | None, tuple[Decimal, bool] | None]:
    return _bound(schema, "min"), _bound(schema, "max")


def _set_bounds(merged: dict, low: tuple[Decimal, bool] | None, high: tuple[Decimal, bool] | None) -> None:
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        merged.pop(key, None)
    if low is not None:
        merged["exclusiveMinimum" if low[1] else "minimum"] = _number(low[0])
    if high is not None:
        merged["exclusiveMaximum" if high[1] else "maximum"] = _number(high[0])


def _number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


_MIN_KEYS = ("minLength", "minItems", "minProperties")
_MAX_KEYS = ("maxLength", "maxItems", "maxProperties")
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def merge(a: dict, b: dict, path: Path) -> dict:
    """One schema equivalent to `allOf: [a, b]` (both without `$ref` at the top)."""
    merged = constraining(a)
    for key, value in b.items():
        if is_annotation(key):
            continue
        if key not in merged:
            merged[key] = value
            continue
        mine = merged[key]
        if key == "type" or key == "nullable":
            continue  # combined below
        if key in _MIN_KEYS:
            merged[key] = max(mine, value)
        elif key in _MAX_KEYS:
            merged[key] = min(mine, value)
        elif key in _NUMERIC:
            continue  # combined below
        elif key == "required":
            merged[key] = list(dict.fromkeys([*mine, *value]))
        elif key in ("enum", "const"):
            continue  # combined below
        elif key == "properties":
            merged[key] = {**mine, **{k: _all_of(mine[k], v) if k in mine else v for k, v in value.items()}}
        elif key in ("items", "additionalItems"):
            if isinstance(mine, list) or isinstance(value, list):
                raise SchemaError(key, path, "allOf branches with tuple `items` cannot be merged")
            merged[key] = _all_of(mine, value)
        elif key == "additionalProperties":
            continue  # combined below
        elif key in ("anyOf", "oneOf"):
            if len(mine) * len(value) > MAX_BRANCHES:
                raise SchemaError(key, path, f"more than {MAX_BRANCHES} alternatives")
            merged[key] = [_all_of(x, y) for x in mine for y in value]
        elif key == "allOf":
            merged[key] = [*mine, *value]
        elif key == "uniqueItems":
            merged[key] = mine or value
        elif canonical(mine) != canonical(value):
            raise SchemaError(key, path, f"allOf branches with different `{key}` cannot be combined exactly")
    _merge_types(merged, a, b)
    _merge_values(merged, a, b, path)
    _set_bounds(merged, *_tightest(numeric_bounds(a), numeric_bounds(b)))
    _merge_additional(merged, a, b, path)
    _merge_prefix(merged, a, b)
    return merged


def _merge_prefix(merged: dict, a: dict, b: dict) -> None:
    """A branch's `items` without `prefixItems` governs every item, the other branch's prefix
    included (its `prefixItems` do not shift where this `items` starts)."""
    for branch, other in ((a, b), (b, a)):
        if "prefixItems" in branch and "prefixItems" not in other and "items" in other \
                and not isinstance(other["items"], list):
            every = other["items"]
            merged["prefixItems"] = [_all_of(item, every) for item in branch["prefixItems"]]
            merged["items"] = _all_of(branch.get("items", True), every)


def _tightest(one: tuple, other: tuple) -> tuple:
    low = _tighter(one[0], other[0], lambda x, y: max(x, y, key=lambda b: (b[0], b[1])))
    high = _tighter(one[1], other[1], lambda x, y: min(x, y, key=lambda b: (b[0], not b[1])))
    return low, high


def _merge_types(merged: dict, a: dict, b: dict) -> None:
    merged.pop("nullable", None)
    if "type" not in a and "type" not in b and "nullable" not in a and "nullable" not in b:
        return
    types = type_set(a) & type_set(b)
    if "number" in types:
        types.discard("integer")
    merged["type"] = sorted(types, key=ALL_TYPES.index)


def _merge_values(merged: dict, a: dict, b: dict, path: Path) -> None:
    merged.pop("const", None)
    merged.pop("enum", None)
    sets = [_values(s) for s in (a, b) if _values(s) is not None]
    if not sets:
        return
    kept = sets[0]
    for other in sets[1:]:
        keys = {canonical(v) for v in other}
        kept = [v for v in kept if canonical(v) in keys]
    if not kept:
        raise Unsatisfiable("enum", path, "the allOf branches allow no common value")
    merged["enum"] = kept


def _values(schema: dict) -> list | None:
    if "const" in schema:
        return [schema["const"]]
    return list(schema["enum"]) if "enum" in schema else None


def _merge_additional(merged: dict, a: dict, b: dict, path: Path) -> None:
    """`additionalProperties` of one branch also governs the properties only the other declares."""
    for branch, other in ((a, b), (b, a)):
        if "patternProperties" in branch and ("additionalProperties" in a or "additionalProperties" in b
                                              or "properties" in other or "patternProperties" in other):
            raise SchemaError("patternProperties", path, "allOf with patternProperties cannot be merged exactly")
    properties = dict(merged.get("properties", {}))
    for branch in (a, b):
        extra = branch.get("additionalProperties", True)
        if extra is True:
            continue
        own = branch.get("properties", {})
        for name in list(properties):
            if name not in own:
                properties[name] = _all_of(properties[name], extra)
        for name in merged.get("required", []):
            if name not in own and name not in properties:
                properties[name] = extra
    if properties:
        merged["properties"] = properties
    extras = [branch.get("additionalProperties", True) for branch in (a, b)]
    combined = _all_of(*extras)
    if combined is True:
        merged.pop("additionalProperties", None)
    else:
        merged["additionalProperties"] = combined


# ---- oneOf: are two branches disjoint? -------------------------------------------------------


def disjoint(a: Any, b: Any, resolve: Resolve, path: Path, depth: int = 0) -> bool:
    """True only when no instance can match both (conservative: False when unsure)."""
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    a, b = resolve(a, path), resolve(b, path)
    if not isinstance(a, dict) or not isinstance(b, dict):
        return a is False or b is False
    types_a, types_b = _possible_types(a), _possible_types(b)
    if not types_a & types_b:
        return True
    values_a, values_b = _values(a), _values(b)
    if values_a is not None and values_b is not None:
        return not {canonical(v) for v in values_a} & {canonical(v) for v in values_b}
    if types_a | types_b <= {"number", "integer"} and _ranges_disjoint(a, b):
        return True
    if types_a | types_b <= {"string"} and _lengths_apart(a, b):
        return True
    for values, other in ((values_a, b), (values_b, a)):
        if values is not None:  # every value of one is invalid under the other
            valid = value_checker(other)
            if valid is not None and not any(valid(v) for v in values):
                return True
    if types_a & types_b <= {"object"} and _discriminated(a, b, resolve, path, depth):
        return True
    return False


def _lengths_apart(a: dict, b: dict) -> bool:
    def span(schema: dict) -> tuple[int, float]:
        low, high = schema.get("minLength", 0), schema.get("maxLength", math.inf)
        return (low if isinstance(low, int) else 0), (high if isinstance(high, int) else math.inf)
    (low_a, high_a), (low_b, high_b) = span(a), span(b)
    return high_a < low_b or high_b < low_a


def _possible_types(schema: dict) -> set[str]:
    types = type_set(schema)
    values = _values(schema)
    if values is not None:
        types &= {json_type(v) for v in values} | ({"number"} if any(json_type(v) == "integer" for v in values) else set())
    return types


def _ranges_disjoint(a: dict, b: dict) -> bool:
    (low_a, high_a), (low_b, high_b) = numeric_bounds(a), numeric_bounds(b)
    return _below(high_a, low_b) or _below(high_b, low_a)


def _below(high: tuple[Decimal, bool] | None, low: tuple[Decimal, bool] | None) -> bool:
    """Every number <= `high` is < every number >= `low`."""
    if high is None or low is None:
        return False
    return high[0] < low[0] or (high[0] == low[0] and (high[1] or low[1]))


def _discriminated(a: dict, b: dict, resolve: Resolve, path: Path, depth: int = 0) -> bool:
    """Both require a property whose values cannot be the same (a `const` or `enum`
    discriminator at any depth, different types, ranges apart)."""
    if depth > _MAX_DEPTH:
        return False
    required = set(a.get("required", [])) & set(b.get("required", []))
    for name in required:
        prop_a = a.get("properties", {}).get(name)
        prop_b = b.get("properties", {}).get(name)
        if isinstance(prop_a, dict) and isinstance(prop_b, dict):
            prop_a, prop_b = resolve(prop_a, path), resolve(prop_b, path)
            if not isinstance(prop_a, dict) or not isinstance(prop_b, dict):
                continue
            if _values(prop_a) is not None and _values(prop_b) is not None:
                if not {canonical(v) for v in _values(prop_a)} & {canonical(v) for v in _values(prop_b)}:
                    return True
            elif disjoint(prop_a, prop_b, resolve, path, depth + 1):
                return True
    return False


_MAX_DEPTH = 8


def generated_apart(a: Any, b: Any, resolve: Resolve, path: Path) -> bool:
    """No object the grammar writes for one branch is valid under the other: each branch is an
    object closed to the properties it names (the converter writes only those), and requires one
    the other never writes. This holds for the grammar's objects, not for every JSON object, so it
    serves `oneOf` only where the grammar writes each branch as it stands."""
    a, b = resolve(a, path), resolve(b, path)
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    if _possible_types(a) != {"object"} or _possible_types(b) != {"object"}:
        return False
    return _writes_only_named(a) and _writes_only_named(b) and bool(
        _required(b) - _named(a)) and bool(_required(a) - _named(b))


def _required(schema: dict) -> set[str]:
    required = schema.get("required", [])
    return {name for name in required if isinstance(name, str)} if isinstance(required, list) else set()


def _named(schema: dict) -> set[str]:
    """The properties an object closed to its named ones may have."""
    properties = schema.get("properties", {})
    named = {k for k, v in properties.items() if v is not False} if isinstance(properties, dict) else set()
    return named | _required(schema)


def _writes_only_named(schema: dict) -> bool:
    """The converter writes no property beyond those the schema names (closed when generating,
    or closed outright), and nothing else shapes the object."""
    if any(key in schema for key in ("patternProperties", "allOf", "anyOf", "oneOf", "$ref")):
        return False
    extra = schema.get("additionalProperties")
    return extra is False or (extra is None and ("properties" in schema or "required" in schema))
