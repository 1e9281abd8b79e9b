"""Which JSON Schema keywords constrain values, which of those the converter enforces, and
which draft a schema is written in.

The keywords of the validation vocabularies (references, applicators, `unevaluated*`, validation,
and OpenAPI 3.0's `nullable`) constrain values. Every other keyword is an annotation and changes
nothing, as the specification says: `title`, `examples`, `discriminator`, `readOnly`, vendor keys
(`x-...`, `_format`, ...), draft-04's `id`, anchors, and so on. Only a constraining keyword in a
form a grammar cannot enforce makes the converter refuse a schema (or, not strict, defer it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# The constraining keywords, all read by the converter: each in the forms its method names, any
# other form refused (strict) or left to the check of the finished answer.
CONSTRAINING = frozenset({
    "type", "nullable", "enum", "const", "$ref", "allOf", "anyOf", "oneOf",
    "properties", "required", "additionalProperties", "patternProperties", "minProperties", "maxProperties",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "dependentRequired", "dependentSchemas", "dependencies", "propertyNames", "not",
    "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
    "$dynamicRef", "$recursiveRef",
})

# `then` and `else` constrain only beside `if` (and `if` only beside one of them).
CONDITIONAL = frozenset({"if", "then", "else"})
VALIDATION = CONSTRAINING | CONDITIONAL


def is_annotation(key: str) -> bool:
    """Whether a schema keyword changes nothing about which values are valid."""
    return key not in VALIDATION


# Keywords whose values are data, not schemas: a walk over the schema objects does not enter them.
_DATA = frozenset({"enum", "const", "examples", "default"})


def schema_objects(schema: Any) -> Iterator[dict]:
    """Every object in a schema document (each yielded before the walk enters it), not those
    inside data such as `enum` values."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(value for key, value in node.items() if key not in _DATA)
        elif isinstance(node, list):
            stack.extend(node)


def constraining(schema: dict[str, Any], *, without: tuple[str, ...] = ()) -> dict[str, Any]:
    """The schema's constraining keywords (and their values), less `without`."""
    return {k: v for k, v in schema.items() if k not in without and not is_annotation(k)}


@dataclass(frozen=True)
class Dialect:
    """What a schema's `$schema` changes in how it is read."""

    name: str
    id_keyword: str = "$id"  # draft-04 names the base URI `id`
    ref_overrides_siblings: bool = False  # up to draft-07 a `$ref` hides the keywords beside it


DRAFT_04 = Dialect("draft-04", id_keyword="id", ref_overrides_siblings=True)
DRAFT_06 = Dialect("draft-06", ref_overrides_siblings=True)
DRAFT_07 = Dialect("draft-07", ref_overrides_siblings=True)
DRAFT_2019_09 = Dialect("2019-09")
DRAFT_2020_12 = Dialect("2020-12")
_DIALECTS = (("draft-03", DRAFT_04), ("draft-04", DRAFT_04), ("draft-06", DRAFT_06), ("draft-07", DRAFT_07),
             ("2019-09", DRAFT_2019_09), ("2020-12", DRAFT_2020_12))


def dialect_of(schema: Any) -> Dialect:
    """The draft named by the root's `$schema` (2020-12 when it names none this knows)."""
    named = schema.get("$schema", "") if isinstance(schema, dict) else ""
    if isinstance(named, str):
        for marker, dialect in _DIALECTS:
            if marker in named:
                return dialect
    return DRAFT_2020_12
