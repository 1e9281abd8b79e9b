"""`response_format` to at most one GBNF grammar: `text` (none), `json_object` (any JSON object,
or a schema given in `schema`), `json_schema` (OpenAI's `{"name", "schema", "strict"}` wrapper,
a bare schema, or either sent as a JSON string; in `json_schema` or the spec's `schema` field)
and `grammar` (the user's own GBNF, checked when it is compiled).

Strictness follows OpenAI: `json_schema.strict: true` (what the OpenAI SDK's `parse` sends) makes
every keyword the grammar cannot enforce a `SchemaError`; otherwise (no `strict`, `strict: false`,
or Fireworks' `schema` field) the grammar enforces what it can and the finished answer is checked
against the whole schema (`FormatGrammar.deferred`)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from grammars.json_schema import JSON_OBJECT_GRAMMAR, SchemaGrammar, convert_schema
from grammars.schema_errors import SchemaError

_WRAPPER_KEYS = frozenset({"name", "description", "strict", "schema"})


class ResponseFormatError(ValueError):
    """A `response_format` that contradicts itself or is not JSON; the message names the field."""


@dataclass(frozen=True)
class FormatGrammar:
    """A response format's grammar, and for a schema: the schema, whether decoding must keep
    arrays' items unique, and the keywords left to the check of the finished answer."""

    text: str
    schema: Any = None
    unique_items: bool = False
    deferred: tuple[SchemaError, ...] = ()


def response_format_grammar(kind: str, *, schema: Any = None, json_schema: Any = None,
                            grammar: str | None = None, unique_items: bool = True) -> FormatGrammar | None:
    """The grammar for a response format, or None for free text. `unique_items`: decoding can
    keep arrays' items unique (else `uniqueItems` is a keyword the grammar cannot enforce).

    Raises `ResponseFormatError`, or `SchemaError` for a strict schema that cannot be enforced.
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
        return FormatGrammar(grammar)
    if "grammar" in given:
        raise ResponseFormatError(f"response_format.grammar goes with type `grammar`, not `{kind}`")
    if kind == "json_object":
        if json_schema is not None:
            raise ResponseFormatError("response_format.json_schema goes with type `json_schema`")
        if schema is None:
            return FormatGrammar(JSON_OBJECT_GRAMMAR)
        return _grammar_of(_unwrap(schema, "schema")[0], False, unique_items)
    if schema is not None and json_schema is not None:
        raise ResponseFormatError("give the schema in response_format.json_schema or response_format.schema, not both")
    if schema is None and json_schema is None:
        raise ResponseFormatError("response_format of type `json_schema` needs a schema in `json_schema`")
    field = "json_schema" if json_schema is not None else "schema"
    unwrapped, strict = _unwrap(json_schema if json_schema is not None else schema, field)
    return _grammar_of(unwrapped, strict and field == "json_schema", unique_items)


def _unwrap(value: Any, field: str) -> tuple[Any, bool]:
    """The schema, and whether OpenAI's wrapper asked for `strict`."""
    value = _parsed(value, field)
    strict = False
    if isinstance(value, dict) and value and set(value) <= _WRAPPER_KEYS and ("schema" in value or "name" in value):
        if "schema" not in value:
            raise ResponseFormatError(f"response_format.{field} has a `name` but no `schema`")
        if "strict" in value and not isinstance(value["strict"], bool):
            raise ResponseFormatError(f"response_format.{field}.strict must be true or false")
        strict = value.get("strict") is True
        value = _parsed(value["schema"], f"{field}.schema")
    return value, strict


def _parsed(value: Any, field: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as error:
            raise ResponseFormatError(f"response_format.{field} is not valid JSON: {error}") from None
    return value


def _grammar_of(schema: Any, strict: bool, unique_items: bool) -> FormatGrammar:
    # keyed by the schema's JSON with key order kept: property order shapes the grammar
    text = json.dumps(schema, ensure_ascii=False)
    converted = _cached_conversion(text, strict, unique_items)
    return FormatGrammar(converted.grammar, schema, converted.unique_items, converted.deferred)


@functools.lru_cache(maxsize=256)
def _cached_conversion(schema_json: str, strict: bool, unique_items: bool) -> SchemaGrammar:
    return convert_schema(json.loads(schema_json), strict=strict, unique_items=unique_items)
