"""Whether a value is valid under a schema, by `jsonschema`: for the converter's decisions about
finitely many values (which `enum` values other keywords allow, which property names a
`propertyNames` schema allows, whether `oneOf` branches share a value)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema


def value_checker(schema: Any) -> Callable[[Any], bool] | None:
    """Whether a value is valid under `schema`, by `jsonschema` (None for a schema that refers
    elsewhere, which it cannot see alone)."""
    if not isinstance(schema, dict) or "$ref" in json.dumps(schema):
        return None
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError:
        return None
    return jsonschema.Draft202012Validator(schema).is_valid
