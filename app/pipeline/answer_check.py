"""The check of a finished answer against the schema it was asked to follow, for what the grammar
did not enforce (the keywords a schema without `strict` may use beyond it, and `uniqueItems` where
decoding could not keep items apart). A broken answer is never silent: each choice says how in
`schema_violations` (the keyword, where in the answer, and `jsonschema`'s message).

Requests whose grammar enforced everything carry no check and pay nothing.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import msgspec
from msgspec import UNSET, UnsetType

from grammars.schema_errors import pointer
from grammars.schema_keywords import schema_objects

MAX_VIOLATIONS = 10
_MESSAGE_LIMIT = 300


class SchemaViolation(msgspec.Struct, omit_defaults=True):
    """One way an answer breaks its schema: the schema `keyword`, the JSON Pointer of the value in
    the answer (`path`), what is wrong, and for a tool call the tool's name."""

    keyword: str
    path: str
    message: str
    tool: str | None = None


@dataclass
class SchemaCheck:
    """One schema's validator, built when first needed."""

    schema: Any
    _validator: Any = field(default=None, init=False)

    def violations(self, value: Any, tool: str | None = None) -> list[SchemaViolation]:
        if self._validator is None:
            prepared = _openapi_nullable(self.schema)
            cls = jsonschema.validators.validator_for(prepared, default=_default_validator(prepared))
            self._validator = cls(prepared)
        found = []
        for error in self._validator.iter_errors(value):
            message = error.message if len(error.message) <= _MESSAGE_LIMIT else error.message[:_MESSAGE_LIMIT] + "…"
            found.append(SchemaViolation(str(error.validator), pointer(tuple(error.absolute_path)), message, tool))
            if len(found) == MAX_VIOLATIONS:
                break
        return found

    def text_violations(self, text: str, tool: str | None = None) -> list[SchemaViolation]:
        try:
            value = json.loads(text)
        except ValueError:
            return [SchemaViolation("json", "", "the answer is not a complete JSON value", tool)]
        return self.violations(value, tool)


@dataclass
class AnswerCheck:
    """What to check in each choice's answer: its content (`response_format`), its tool calls'
    arguments (by tool name)."""

    content: SchemaCheck | None = None
    tools: dict[str, SchemaCheck] = field(default_factory=dict)

    def or_none(self) -> AnswerCheck | None:
        return self if self.content is not None or self.tools else None

    def answer(self, content: str, calls: list[tuple[str, str]], finish_reason: str) -> list[SchemaViolation]:
        """The violations of one finished choice (an answer cut short by `max_tokens` or a stop
        sequence is incomplete by request, and only its calls are checked)."""
        found: list[SchemaViolation] = []
        if self.content is not None and not calls and finish_reason == "stop":
            found.extend(self.content.text_violations(content))
        for name, arguments in calls:
            check = self.tools.get(name)
            if check is not None:
                found.extend(check.text_violations(arguments, name))
        return found[:MAX_VIOLATIONS]


def reported(check: AnswerCheck | None, content: str, calls: list[tuple[str, str]],
             finish_reason: str) -> list[SchemaViolation] | UnsetType:
    """A choice's `schema_violations`: UNSET (left out) when there is no check or nothing broke."""
    if check is None:
        return UNSET
    return check.answer(content, calls, finish_reason) or UNSET


def _default_validator(schema: Any) -> type:
    """2020-12, unless the schema uses draft-07's array form of `items` (which the converter reads
    in every draft)."""
    if any(isinstance(node.get("items"), list) or "additionalItems" in node for node in schema_objects(schema)):
        return jsonschema.Draft7Validator
    return jsonschema.Draft202012Validator


def _openapi_nullable(schema: Any) -> Any:
    """OpenAPI 3.0's `nullable: true` spelled as JSON Schema (a `null` type and enum value)."""
    if not json.dumps(schema).count('"nullable"'):
        return schema
    schema = copy.deepcopy(schema)
    for node in schema_objects(schema):
        if node.get("nullable") is True:
            kind = node.get("type")
            if isinstance(kind, str):
                node["type"] = [kind, "null"]
            elif isinstance(kind, list) and "null" not in kind:
                node["type"] = [*kind, "null"]
            if isinstance(node.get("enum"), list) and None not in node["enum"]:
                node["enum"] = [*node["enum"], None]
    return schema
