"""The uniqueItems guard on its own: fed documents in random token-sized pieces, it refuses exactly
the piece that completes a repeated item of an array whose schema says `uniqueItems`, compared
with `jsonschema` on the same documents."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest

from grammars.json_schema import convert_schema, schema_to_gbnf
from grammars.schema_errors import SchemaError
from grammars.unique_items import UniqueItemsGuard, item_key, uses_unique_items

TAGS = {"type": "object", "properties": {
    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    "scores": {"type": "array", "items": {"type": "number"}, "uniqueItems": True},
    "free": {"type": "array", "items": {"type": "string"}},
    "nested": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}, "uniqueItems": True},
    "points": {"type": "array", "items": {"type": "object"}, "uniqueItems": True},
    "maybe": {"anyOf": [{"$ref": "#/$defs/set"}, {"type": "null"}]},
}, "$defs": {"set": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True}}}


def _feed(guard: UniqueItemsGuard, text: str, rng: random.Random) -> int | None:
    """Feed `text` in pieces of 1 to 4 bytes: the byte offset of the piece refused, None if none."""
    data, state, at = text.encode(), guard.start(), 0
    while at < len(data):
        piece = data[at:at + rng.randint(1, 4)]
        following = state.advance(piece)
        if following is None:
            return at
        state, at = following, at + len(piece)
    return None


def _document(rng: random.Random) -> dict:
    def pick(values: list) -> list:
        return [rng.choice(values) for _ in range(rng.randint(0, 4))]
    return {
        "tags": pick(["x", "y", "x y", "é", "\"q\"", "\\"]),
        "scores": pick([1, 1.0, 2, 2.5, -0.5, 10]),
        "free": pick(["x", "y"]),
        "nested": [pick([1, 2]) for _ in range(rng.randint(0, 3))],
        "points": [dict(rng.sample([("a", 1), ("b", 2.0), ("c", None)], rng.randint(0, 2)))
                   for _ in range(rng.randint(0, 3))],
        "maybe": rng.choice([None, pick(["a", "b", "c"])]),
    }


@pytest.mark.parametrize("seed", range(40))
def test_refuses_exactly_the_documents_with_repeated_items(seed: int) -> None:
    rng = random.Random(seed)
    guard = UniqueItemsGuard(TAGS)
    for _ in range(25):
        document = _document(rng)
        text = json.dumps(document, ensure_ascii=False, separators=(",", rng.choice([":", ": "])))
        valid = jsonschema.Draft202012Validator(TAGS).is_valid(document)
        refused_at = _feed(guard, text, rng)
        assert (refused_at is None) == valid, (text, refused_at)


def test_an_enum_item_is_refused_as_soon_as_every_value_it_could_become_is_taken() -> None:
    schema = {"type": "array", "items": {"enum": ["red", "green", "rose"]}, "uniqueItems": True}
    state = UniqueItemsGuard(schema).start().advance(b'["red","rose",')
    assert state is not None
    assert state.advance(b'"r') is None  # both r-words are taken: the model is not led into a dead end
    assert state.advance(b'"g') is not None
    booleans = UniqueItemsGuard({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True})
    assert booleans.start().advance(b"[true,t") is None


def test_a_number_item_is_refused_when_it_ends_equal_to_an_earlier_one() -> None:
    state = UniqueItemsGuard({"type": "array", "items": {"type": "number"}, "uniqueItems": True}).start()
    state = state.advance(b"[2,")
    assert state is not None
    assert state.advance(b"2.0,") is None
    assert state.advance(b"2.0]") is None
    assert state.advance(b"2") is not None and state.advance(b"25]") is not None
    small = UniqueItemsGuard({"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 12},
                              "uniqueItems": True}).start().advance(b"[1,2,10,11,12,")
    assert small is not None
    assert small.advance(b"1") is None  # 1, 10, 11 and 12 are all taken: no dead end after it
    assert small.advance(b"3") is not None


def test_the_guard_starts_after_the_reasoning_block_and_the_answer_opener() -> None:
    guard = UniqueItemsGuard({"type": "array", "uniqueItems": True}, reasoning_start="<think>",
                             reasoning_end="</think>", opener="<answer>")
    state = guard.start().advance(b'<think>["a","a"] is wrong</think>\n<answer>["a",')
    assert state is not None
    assert state.advance(b'"a"') is None
    unopened = guard.start().advance(b'["a","a"')  # no reasoning block at all
    assert unopened is None


def test_items_compare_by_json_equality() -> None:
    assert item_key(b'{"a":1,"b":[2.0]}') == item_key(b'{"b": [2], "a": 1.0}')
    assert item_key(b"true") != item_key(b"1")
    assert item_key(b'"1"') != item_key(b"1")


def test_strictness_decides_what_is_refused_and_what_is_deferred() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer", "not": {"const": 3}},
                                               "b": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(SchemaError, match="uniqueItems"):
        schema_to_gbnf(schema["properties"]["b"])  # the grammar alone cannot keep items apart: refused
    with pytest.raises(SchemaError, match="`not`"):
        convert_schema(schema, strict=True)
    relaxed = convert_schema(schema, strict=False)
    assert relaxed.unique_items and [(e.keyword, e.path) for e in relaxed.deferred] == [("not", "/properties/a")]
    assert uses_unique_items(schema) and not uses_unique_items({"type": "array", "uniqueItems": False})


def test_a_string_at_its_max_length_is_refused_when_it_could_only_close_on_a_taken_value() -> None:
    schema = {"type": "array", "items": {"type": "string", "maxLength": 3}, "uniqueItems": True}
    state = UniqueItemsGuard(schema).start().advance(b'["abc","ab')
    assert state is not None
    assert state.advance(b"c") is None  # "abc" is taken and nothing may follow its third character
    assert state.advance(b"d") is not None and state.advance(b'"') is not None
