"""`schema_to_gbnf` against a corpus of schemas with valid and invalid instances, checked by
llama.cpp's own grammar engine (the one that constrains decoding)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grammars.json_schema import JSON_OBJECT_GRAMMAR, SchemaError, schema_to_gbnf
from tests.grammar_support import accepts, compiles

CORPUS = Path(__file__).parent / "schema_corpus"


def _cases() -> list:
    cases = []
    for path in sorted(CORPUS.glob("*.json")):
        if path.name != "unsupported.json":
            cases.extend(pytest.param(case, id=f"{path.stem}-{case['name']}") for case in json.loads(path.read_text()))
    return cases


def compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def spaced(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


@pytest.mark.parametrize("case", _cases())
def test_grammar_accepts_exactly_the_valid_instances(case: dict) -> None:
    grammar = schema_to_gbnf(case["schema"])
    compiles(grammar)
    for instance in case["valid"]:
        assert accepts(grammar, compact(instance)), f"valid instance rejected: {compact(instance)}"
        assert accepts(grammar, spaced(instance)), f"valid instance with single spaces rejected: {spaced(instance)}"
    for instance in case["invalid"]:
        assert not accepts(grammar, compact(instance)), f"invalid instance accepted: {compact(instance)}"
    for instance in case.get("narrowed", []):  # valid, but never generated (closed objects, bounded numbers)
        assert not accepts(grammar, compact(instance)), f"narrowed-away instance accepted: {compact(instance)}"


def _unsupported() -> list:
    cases = json.loads((CORPUS / "unsupported.json").read_text())
    return [pytest.param(case, id=case["name"]) for case in cases]


@pytest.mark.parametrize("case", _unsupported())
def test_what_cannot_be_enforced_is_refused_with_keyword_and_path(case: dict) -> None:
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf(case["schema"])
    assert caught.value.keyword == case["keyword"], str(caught.value)
    assert caught.value.path == case["path"], str(caught.value)
    assert case["keyword"] in str(caught.value)


def test_whitespace_is_allowed_but_bounded() -> None:
    grammar = schema_to_gbnf({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert accepts(grammar, '{"a":1}')
    assert accepts(grammar, '{ "a": 1 }')
    assert accepts(grammar, '{\n  "a": 1\n}')
    assert not accepts(grammar, '{"a":1' + " " * 30 + "}")
    assert not accepts(grammar, '{"a":  1}')  # one allowance per gap
    assert not accepts(grammar, '{"a":1}\n')  # nothing after the value: the model must end there
    assert not accepts(grammar, ' {"a":1}')


def test_json_object_mode_takes_any_object_only() -> None:
    assert accepts(JSON_OBJECT_GRAMMAR, '{"a":[1,{"b":null}],"c":"d"}')
    assert accepts(JSON_OBJECT_GRAMMAR, "{}")
    for text in ("[]", '"x"', "1", "null", '{"a":}', '{"a":1,}'):
        assert not accepts(JSON_OBJECT_GRAMMAR, text), text


def test_properties_keep_the_schema_order() -> None:
    grammar = schema_to_gbnf({
        "type": "object",
        "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    })
    assert accepts(grammar, '{"b":1,"a":2}')
    assert not accepts(grammar, '{"a":2,"b":1}')


def test_additional_properties_cannot_repeat_a_declared_name() -> None:
    grammar = schema_to_gbnf({"type": "object", "properties": {"id": {"type": "integer"}},
                              "additionalProperties": {"type": "string"}})
    assert accepts(grammar, '{"id":1,"idx":"a","i":"b"}')
    assert accepts(grammar, '{"other":"x"}')
    assert not accepts(grammar, '{"id":1,"id":"a"}')
    assert not accepts(grammar, '{"other":1}')


def test_recursive_schema_nests() -> None:
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
    grammar = schema_to_gbnf(tree)
    assert accepts(grammar, '{"value":1,"children":[{"value":2,"children":[{"value":3}]},{"value":4}]}')
    assert not accepts(grammar, '{"value":1,"children":[{"children":[]}]}')


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(30_000)}}, "schema"),
    (json.loads('{"items":' * 80 + "{}" + "}" * 80), "schema"),
    ({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(300)},
      "minProperties": 5, "maxProperties": 300}, "schema"),
    ({"type": "string", "maxLength": "ten"}, "maxLength"),
    ({"type": "integer", "minimum": 5, "maximum": 4}, "minimum"),
    ({"type": "object", "required": ["a"], "additionalProperties": False}, "required"),
    ({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}, "oneOf"),
    ({"type": "string", "pattern": "^[a-z]{10}$", "maxLength": 5}, "pattern"),
    ({"type": "string", "format": "uuid", "maxLength": 10}, "format"),
    ({"anyOf": [False, False]}, "anyOf"),
    ({"type": "integer", "multipleOf": 0.5}, "multipleOf"),
])
def test_limits_and_impossible_schemas_fail_fast(schema: dict, keyword: str) -> None:
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf(schema)
    assert caught.value.keyword == keyword, str(caught.value)


def test_annotations_are_ignored() -> None:
    plain = schema_to_gbnf({"type": "object", "properties": {"a": {"type": "string"}}})
    annotated = schema_to_gbnf({
        "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://example.com/x",
        "title": "X", "description": "d", "$comment": "c", "examples": [{}], "default": {},
        "type": "object", "properties": {"a": {"type": "string", "title": "A", "default": "z"}},
    })
    assert plain == annotated
