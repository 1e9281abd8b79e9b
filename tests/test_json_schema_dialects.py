"""The schemas people send, read as the specification says: annotations and vendor keys change
nothing, each draft is read by its `$schema`, objects that declare their properties are closed
when generating, and numbers nothing bounds keep to what a JSON parser holds. Every grammar is
checked by llama.cpp's own grammar engine; every expectation about validity by `jsonschema`."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from grammars.json_schema import SchemaError, convert_schema, schema_to_gbnf
from templates.tool_calls import HERMES
from tests.grammar_support import accepts


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def generates(schema: Any, instance: Any) -> bool:
    return accepts(schema_to_gbnf(schema), compact(instance))


PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
          "required": ["name"]}


# ---- annotations ---------------------------------------------------------------------------------

@pytest.mark.parametrize("annotations", [
    {"id": "http://example.com/person", "self": {"href": "/people/{id}"}, "_format": "x"},  # draft-04 era
    {"x-order": 1, "x-nullable": True, "example": {"name": "Ann"}, "discriminator": {"propertyName": "kind"}},
    {"readOnly": True, "writeOnly": False, "deprecated": True, "$comment": "c", "examples": [{"name": "Bo"}]},
    {"typo": True, "additionalItems_": False, "xml": {"name": "person"}, "externalDocs": {"url": "u"}},
])
def test_annotations_and_vendor_keys_change_nothing(annotations: dict):
    assert schema_to_gbnf({**PERSON, **annotations}) == schema_to_gbnf(PERSON)


def test_a_format_the_converter_does_not_know_is_an_annotation():
    schema = {"type": "string", "format": "credit-card"}
    assert schema_to_gbnf(schema) == schema_to_gbnf({"type": "string"})
    for form in ("binary", "password", "path", "json-string"):  # what pydantic writes for bytes, SecretStr, Path
        assert schema_to_gbnf({"type": "string", "format": form}) == schema_to_gbnf({"type": "string"})
    with pytest.raises(SchemaError, match="`format` must be a string"):
        schema_to_gbnf({"type": "string", "format": 5})


def test_if_then_else_constrain_only_together():
    assert schema_to_gbnf({**PERSON, "if": {"required": ["age"]}}) == schema_to_gbnf(PERSON)  # `if` alone: nothing
    assert schema_to_gbnf({**PERSON, "then": {"required": ["age"]}}) == schema_to_gbnf(PERSON)  # no `if`: ignored
    conditional = {**PERSON, "if": {"required": ["age"]}, "then": {"required": ["name"]}}
    assert schema_to_gbnf(conditional) != schema_to_gbnf(PERSON)
    with pytest.raises(SchemaError) as caught:  # a test of a string's pattern has no written complement
        schema_to_gbnf({**PERSON, "if": {"properties": {"name": {"pattern": "^A"}}}, "then": {"required": ["age"]}})
    assert caught.value.keyword == "if"


@pytest.mark.parametrize("keyword", ["not", "$recursiveRef"])
def test_validation_keywords_it_cannot_enforce_are_still_refused(keyword: str):
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf({**PERSON, keyword: {} if keyword != "$dynamicRef" else "#x"})
    assert caught.value.keyword == keyword


# ---- drafts ----------------------------------------------------------------------------------------

def test_draft_04_id_is_the_base_of_references_and_exclusive_bounds_are_booleans():
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "id": "http://example.com/root.json",
              "definitions": {"age": {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 150}},
              "type": "object", "properties": {"age": {"$ref": "http://example.com/root.json#/definitions/age"}},
              "required": ["age"], "additionalProperties": False}
    validator = jsonschema.Draft4Validator(schema)
    for instance, valid in (({"age": 1}, True), ({"age": 0}, False), ({"age": 150}, True), ({"age": 151}, False)):
        assert validator.is_valid(instance) is valid
        assert generates(schema, instance) is valid


@pytest.mark.parametrize(("dialect", "siblings_apply"), [
    ("http://json-schema.org/draft-04/schema#", False),
    ("http://json-schema.org/draft-06/schema#", False),
    ("http://json-schema.org/draft-07/schema#", False),
    ("https://json-schema.org/draft/2019-09/schema", True),
    ("https://json-schema.org/draft/2020-12/schema", True),
])
def test_keywords_beside_a_ref_apply_from_2019_09_on(dialect: str, siblings_apply: bool):
    schema = {"$schema": dialect, "definitions": {"n": {"type": "integer"}},
              "allOf": [{"$ref": "#/definitions/n", "maximum": 5}]}
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert validator.is_valid(9) is not siblings_apply
    assert generates(schema, 9) is not siblings_apply
    assert generates(schema, 3)


def test_openapi_nullable():
    schema = {"type": "string", "nullable": True, "maxLength": 3}
    assert generates(schema, None) and generates(schema, "abc") and not generates(schema, "abcd")


# ---- closed objects ---------------------------------------------------------------------------------

def test_an_object_that_declares_its_properties_gets_only_those():
    assert generates(PERSON, {"name": "Ann", "age": 3})
    assert jsonschema.Draft202012Validator(PERSON).is_valid({"name": "Ann", "nickname": "A"})  # valid ...
    assert not generates(PERSON, {"name": "Ann", "nickname": "A"})  # ... but never generated
    opened = {**PERSON, "additionalProperties": True}
    assert generates(opened, {"name": "Ann", "nickname": "A"})
    typed = {**PERSON, "additionalProperties": {"type": "integer"}}
    assert generates(typed, {"name": "Ann", "n": 1}) and not generates(typed, {"name": "Ann", "n": "1"})


def test_free_form_and_empty_objects():
    assert generates({"type": "object"}, {"anything": [1, {"goes": None}]})  # declares nothing: any object
    assert generates({"type": "object", "properties": {}}, {})
    assert not generates({"type": "object", "properties": {}}, {"a": 1})  # declares none: no property
    required_only = {"type": "object", "required": ["id"]}
    assert generates(required_only, {"id": [1]}) and not generates(required_only, {"id": 1, "x": 2})


def test_forced_tool_calls_cannot_invent_arguments():
    tool = {"type": "function", "function": {"name": "render", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    grammar = HERMES.call_grammar([tool], parallel=False)
    call = '<tool_call>\n{"name":"render","arguments":%s}\n</tool_call>'
    assert accepts(grammar, call % '{"path":"a.md"}')
    assert not accepts(grammar, call % '{"path":"a.md","build_mode":"fast"}')


# ---- bounded numbers ----------------------------------------------------------------------------------

INT64_MAX = 2**63 - 1


@pytest.mark.parametrize(("schema", "instance", "generated"), [
    ({"type": "integer"}, INT64_MAX, True),
    ({"type": "integer"}, -INT64_MAX - 1, True),
    ({"type": "integer"}, INT64_MAX + 1, False),
    ({"type": "integer", "minimum": 0}, INT64_MAX, True),
    ({"type": "integer", "minimum": 0}, 108824032000000000000, False),
    ({"type": "integer", "maximum": 10**30}, 10**25, True),  # a bound the schema gives is kept
    ({"type": "number"}, 12345678901234567, True),
    ({"type": "number"}, 123456789012345678, False),
    ({"type": "number"}, 0.12345678901234567, True),
    ({"type": "number"}, 1.5e308, True),
    ({"type": "number"}, 1e-300, True),
    ({"type": "number", "minimum": 0}, 10**17, True),
    ({"type": "number", "minimum": 0}, 10**17 + 1, False),
    ({"type": "number", "maximum": 10**20}, 10**19, True),
    ({"type": "number", "maximum": 0}, -(10**17), True),
    ({"type": "number", "maximum": 0}, -(10**18), False),
])
def test_numbers_nothing_bounds_stay_within_what_parsers_hold(schema: dict, instance: Any, generated: bool):
    assert jsonschema.Draft202012Validator(schema).is_valid(instance)
    assert generates(schema, instance) is generated


def test_free_digits_end():
    grammar = schema_to_gbnf({"type": "number"})
    assert not accepts(grammar, "1." + "3" * 18)
    assert not accepts(grammar, "1e309")


def test_property_names_on_an_object_open_to_any_name_is_left_to_the_check() -> None:
    schema = {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}, "additionalProperties": {"type": "integer"}}
    with pytest.raises(SchemaError, match="propertyNames"):
        convert_schema(schema, strict=True)
    assert [e.keyword for e in convert_schema(schema, strict=False).deferred] == ["propertyNames"]


def test_dependencies_on_many_properties_are_left_to_the_check() -> None:
    schema = {"type": "object", "dependentRequired": {name: ["z"] for name in "abcde"}}
    with pytest.raises(SchemaError, match="more than 4"):
        convert_schema(schema, strict=True)
    assert [e.keyword for e in convert_schema(schema, strict=False).deferred] == ["dependentRequired"]


# unevaluated*: checked directly (the corpus's own model of the grammar does not read them)
UNEVALUATED = [{"name": "uneval-allof-base", "schema": {"allOf": [{"$ref": "#/$defs/base"}], "properties": {"b": {"type": "boolean"}}, "unevaluatedProperties": False, "$defs": {"base": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 3}}}}}, "valid": [{}, {"a": 1}, {"b": True}], "invalid": [{"c": 1}, {"a": 1, "c": "x"}, {"a": 2, "c": "xy"}, {"c": "xyz"}, [], [1], [1, True], [1, 2], [True], [2, False, True], None, "s"], "narrowed": [{"a": 1, "b": False}]}, {"name": "uneval-in-branch", "schema": {"allOf": [{"properties": {"a": {"type": "integer", "minimum": 0, "maximum": 3}}, "unevaluatedProperties": False}, {"properties": {"b": {"type": "boolean"}}}]}, "valid": [{}, {"a": 1}, [], [1], [1, True], [1, 2], [True], [2, False, True], None, "s"], "invalid": [{"b": True}, {"a": 1, "b": False}, {"c": 1}, {"a": 1, "c": "x"}, {"a": 2, "c": "xy"}, {"c": "xyz"}]}, {"name": "uneval-anyof", "schema": {"type": "object", "anyOf": [{"properties": {"a": {"const": 1}}, "required": ["a"]}, {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}], "unevaluatedProperties": False}, "valid": [{"a": 1}, {"b": True}], "invalid": [{}, {"c": 1}, {"a": 1, "c": "x"}, {"a": 2, "c": "xy"}, {"c": "xyz"}, [], [1], [1, True], [1, 2], [True], [2, False, True], None, "s"], "narrowed": [{"a": 1, "b": False}]}, {"name": "uneval-schema", "schema": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 3}}, "unevaluatedProperties": {"type": "string", "maxLength": 2}}, "valid": [{}, {"a": 1}, {"a": 1, "c": "x"}, {"a": 2, "c": "xy"}], "invalid": [{"b": True}, {"a": 1, "b": False}, {"c": 1}, {"c": "xyz"}, [], [1], [1, True], [1, 2], [True], [2, False, True], None, "s"]}, {"name": "uneval-items", "schema": {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 3}], "unevaluatedItems": {"type": "boolean"}}, "valid": [[], [1], [1, True], [2, False, True]], "invalid": [{}, {"a": 1}, {"b": True}, {"a": 1, "b": False}, {"c": 1}, {"a": 1, "c": "x"}, {"a": 2, "c": "xy"}, {"c": "xyz"}, [1, 2], [True], None, "s"]}, {"name": "uneval-ref-sibling", "schema": {"$ref": "#/$defs/base", "properties": {"b": {"type": "boolean"}}, "unevaluatedProperties": False, "$defs": {"base": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 3}}}}}, "valid": [{}, {"a": 1}, {"b": True}, {"a": 1, "b": False}], "invalid": [{"c": 1}, {"a": 1, "c": "x"}, {"a": 2, "c": "xy"}, {"c": "xyz"}, [], [1], [1, True], [1, 2], [True], [2, False, True], None, "s"]}]

# contains: instances of up to four items drawn from the item schema's values, a few kept per case
CONTAINS = [{"name": "contains-one", "schema": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}, "contains": {"const": 2}}, "valid": [[2], [0, 2], [1, 2], [2, 0], [2, 1], [2, 2], [2, 3], [3, 2], [0, 0, 2], [0, 1, 2], [0, 2, 0], [0, 2, 1]], "invalid": [[], [0], [1], [3], [0, 0], [0, 1], [0, 3], [1, 0], [1, 1], [1, 3], [3, 0], [3, 1]]}, {"name": "contains-bounded", "schema": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}, "contains": {"minimum": 3}, "minItems": 2, "maxItems": 3}, "valid": [[0, 3], [1, 3], [2, 3], [3, 0], [3, 1], [3, 2], [3, 3], [0, 0, 3], [0, 1, 3], [0, 2, 3], [0, 3, 0], [0, 3, 1]], "invalid": [[], [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2], [2, 0]]}, {"name": "contains-min-items", "schema": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}, "contains": {"const": 0}, "minItems": 3}, "valid": [[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 0, 3], [0, 1, 0], [0, 1, 1], [0, 1, 2], [0, 1, 3], [0, 2, 0], [0, 2, 1], [0, 2, 2], [0, 2, 3]], "invalid": [[], [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1], [1, 2]]}, {"name": "contains-max-moot", "schema": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}, "contains": {"const": 1}, "maxContains": 2, "maxItems": 2}, "valid": [[1], [0, 1], [1, 0], [1, 1], [1, 2], [1, 3], [2, 1], [3, 1]], "invalid": [[], [0], [2], [3], [0, 0], [0, 2], [0, 3], [2, 0], [2, 2], [2, 3], [3, 0], [3, 2]]}, {"name": "contains-zero", "schema": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}, "contains": {"const": 1}, "minContains": 0}, "valid": [[], [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1], [1, 2]], "invalid": [["a"], [1, "b"], ["ab"], [None, "x"], {}]}, {"name": "contains-any-items", "schema": {"type": "array", "contains": {"type": "string", "maxLength": 1}, "maxItems": 2}, "valid": [["a"], [1, "b"], [None, "x"]], "invalid": [[], [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1], [1, 2]]}]


@pytest.mark.parametrize("case", UNEVALUATED + CONTAINS, ids=[case["name"] for case in UNEVALUATED + CONTAINS])
def test_unevaluated_and_contains_are_enforced_exactly(case: dict[str, Any]) -> None:
    grammar = schema_to_gbnf(case["schema"])
    validator = jsonschema.Draft202012Validator(case["schema"])
    for instance in case["valid"]:
        assert validator.is_valid(instance) and accepts(grammar, json.dumps(instance, separators=(",", ":")))
    for instance in case["invalid"] + case.get("narrowed", []):
        assert not accepts(grammar, json.dumps(instance, separators=(",", ":"))), instance
    for instance in case["invalid"]:
        assert not validator.is_valid(instance)


def test_unevaluated_beside_in_place_applicators_is_left_to_the_check() -> None:
    schema = {"type": "array", "contains": {"const": 1}, "unevaluatedItems": False}  # contains evaluates some
    with pytest.raises(SchemaError, match="unevaluatedItems"):
        convert_schema(schema, strict=True)
    assert [e.keyword for e in convert_schema(schema, strict=False).deferred] == ["unevaluatedItems"]


def test_items_of_one_branch_govern_the_prefix_of_another() -> None:
    # JSON-Schema-Test-Suite: "items does not look in applicators" (accepted [3, 5] before)
    schema = {"allOf": [{"prefixItems": [{"minimum": 3}]}], "items": {"minimum": 5}}
    grammar = schema_to_gbnf(schema)
    assert not accepts(grammar, "[3,5]") and accepts(grammar, "[5,5]")
    cousins = {"allOf": [{"prefixItems": [True]}, {"unevaluatedItems": False}]}
    assert not accepts(schema_to_gbnf(cousins), "[1]") and accepts(schema_to_gbnf(cousins), "[]")


def test_references_into_embedded_resources_resolve_against_their_own_base() -> None:
    schema = {"$id": "https://example.com/root.json", "type": "object",
              "properties": {"tags": {"$ref": "list.json"}, "id": {"$ref": "https://example.com/item.json#/$defs/id"}},
              "$defs": {"list": {"$id": "list.json", "type": "array", "items": {"$ref": "#/$defs/tag"},
                                 "$defs": {"tag": {"enum": ["a", "b"]}}},
                        "item": {"$id": "item.json", "$defs": {"id": {"type": "integer", "minimum": 0,
                                                                          "maximum": 9}}}}}
    grammar = schema_to_gbnf(schema)
    assert accepts(grammar, '{"tags":["a","b"],"id":3}')
    assert not accepts(grammar, '{"tags":["c"]}') and not accepts(grammar, '{"id":10}')
    with pytest.raises(SchemaError, match="remote"):
        schema_to_gbnf({"$ref": "https://example.com/elsewhere.json"})


def test_dynamic_references_that_nothing_extends_are_references() -> None:
    tree = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$dynamicAnchor": "node", "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 3},
                           "children": {"type": "array", "items": {"$dynamicRef": "#node"}}},
            "required": ["name"], "additionalProperties": False}
    grammar = schema_to_gbnf(tree)
    assert accepts(grammar, '{"name":"a","children":[{"name":"b","children":[]}]}')
    assert not accepts(grammar, '{"name":"a","children":[{"children":[]}]}')
    recursive = {"$schema": "https://json-schema.org/draft/2019-09/schema", "$recursiveAnchor": True,
                 "type": "array", "items": {"anyOf": [{"type": "integer"}, {"$recursiveRef": "#"}]}}
    assert accepts(schema_to_gbnf(recursive), "[1,[2,[3]]]") and not accepts(schema_to_gbnf(recursive), '[1,["x"]]')
    extended = {**tree, "$defs": {"other": {"$id": "other.json", "$dynamicAnchor": "node", "type": "integer"}}}
    with pytest.raises(SchemaError, match="more than once"):
        schema_to_gbnf(extended)


def test_one_of_branches_apart_by_values_another_rejects_or_by_string_lengths() -> None:
    codes = {"oneOf": [{"enum": ["US", "GB"]}, {"type": "string", "pattern": "^[0-9]+$"}]}
    grammar = schema_to_gbnf(codes)
    assert accepts(grammar, '"US"') and accepts(grammar, '"42"') and not accepts(grammar, '"FR"')
    lengths = {"oneOf": [{"type": "string", "maxLength": 2}, {"type": "string", "minLength": 3, "maxLength": 4}]}
    assert accepts(schema_to_gbnf(lengths), '"ab"') and accepts(schema_to_gbnf(lengths), '"abc"')
    with pytest.raises(SchemaError, match="may both match"):  # "12" is under both
        schema_to_gbnf({"oneOf": [{"enum": ["12", "x"]}, {"type": "string", "pattern": "^[0-9]+$"}]})


def test_all_of_branches_that_each_have_a_conditional() -> None:
    kinds = {"enum": ["input", "textarea", "dropdown"]}
    schema = {"type": "object", "properties": {"type": kinds, "label": {"type": "string", "maxLength": 5},
                                               "options": {"type": "array", "items": {"type": "string", "maxLength": 3},
                                                           "maxItems": 2}},
              "required": ["type"], "additionalProperties": False,
              "allOf": [{"if": {"properties": {"type": {"const": "dropdown"}}}, "then": {"required": ["options"]}},
                        {"if": {"properties": {"type": {"const": "input"}}}, "then": {"required": ["label"]}}]}
    grammar = schema_to_gbnf(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for instance in ({"type": "dropdown", "options": ["a"]}, {"type": "input", "label": "x"}, {"type": "textarea"},
                     {"type": "dropdown"}, {"type": "input"}, {"type": "input", "options": []}):
        text = json.dumps(instance, separators=(",", ":"))
        assert accepts(grammar, text) == validator.is_valid(instance), instance
