"""`response_format` to at most one GBNF grammar: `text` (none), `json_object` (any JSON object,
or a schema given in `schema`), `json_schema` (OpenAI's `{"name", "schema", "strict"}` wrapper,
a bare schema, or either sent as a JSON string; in `json_schema` or the spec's `schema` field)
and `grammar` (the user's own GBNF, checked when it is compiled)."""

from __future__ import annotations

import functools
import json
from typing import Any

from grammars.json_schema import JSON_OBJECT_GRAMMAR, schema_to_gbnf

_WRAPPER_KEYS = frozenset({"name", "description", "strict", "schema"})


class ResponseFormatError(ValueError):
    """A `response_format` that contradicts itself or is not JSON; the message names the field."""


def response_format_grammar(kind: str, *, schema: Any = None, json_schema: Any = None,
                            grammar: str | None = None) -> str | None:
    """The GBNF text for a response format, or None for free text.

    Raises `ResponseFormatError`, or `SchemaError` for a schema that cannot be enforced.
    """
    given = {name for name, value in (("schema", schema), ("json_schema", json_schema), ("grammar", grammar))
             if value is not None}
    if kind == "text":
        if given:
            raise ResponseFormatError(f"response_format.{min(given)} does not go with type `text`")
        return None
    if kind == "grammar":
        if given != {"grammar"} or not grammar or not grammar.strip():
            raise ResponseFormatError("response_format of type `grammar` needs `grammar` (GBNF text) and nothing else")
        return grammar
    if "grammar" in given:
        raise ResponseFormatError(f"response_format.grammar goes with type `grammar`, not `{kind}`")
    if kind == "json_object":
        if json_schema is not None:
            raise ResponseFormatError("response_format.json_schema goes with type `json_schema`")
        return JSON_OBJECT_GRAMMAR if schema is None else _grammar_of(_unwrap(schema, "schema"))
    if schema is not None and json_schema is not None:
        raise ResponseFormatError("give the schema in response_format.json_schema or response_format.schema, not both")
    if schema is None and json_schema is None:
        raise ResponseFormatError("response_format of type `json_schema` needs a schema in `json_schema`")
    field = "json_schema" if json_schema is not None else "schema"
    return _grammar_of(_unwrap(json_schema if json_schema is not None else schema, field))


def _unwrap(value: Any, field: str) -> Any:
    value = _parsed(value, field)
    if isinstance(value, dict) and value and set(value) <= _WRAPPER_KEYS and ("schema" in value or "name" in value):
        if "schema" not in value:
            raise ResponseFormatError(f"response_format.{field} has a `name` but no `schema`")
        if "strict" in value and not isinstance(value["strict"], bool):
            raise ResponseFormatError(f"response_format.{field}.strict must be true or false")
        value = _parsed(value["schema"], f"{field}.schema")
    return value


def _parsed(value: Any, field: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as error:
            raise ResponseFormatError(f"response_format.{field} is not valid JSON: {error}") from None
    return value


def _grammar_of(schema: Any) -> str:
    # keyed by the schema's JSON with key order kept: property order shapes the grammar
    return _cached_conversion(json.dumps(schema, ensure_ascii=False))


@functools.lru_cache(maxsize=256)
def _cached_conversion(schema_json: str) -> str:
    return schema_to_gbnf(json.loads(schema_json))
