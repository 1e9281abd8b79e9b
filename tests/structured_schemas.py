"""Schemas for the end-to-end structured-output test: each with a prompt for the default model.

Free-text strings carry a `maxLength` and arrays a `maxItems` where a tiny model might otherwise
ramble past the token limit; the grammar then closes them in time.
"""

from __future__ import annotations

NAME = {"type": "string", "maxLength": 30}
TEXT = {"type": "string", "maxLength": 60}

SCHEMAS: list[tuple[str, str, dict]] = [
    ("person", "a person", {
        "type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": False}),
    ("city", "a city", {
        "type": "object", "properties": {"city": NAME, "country": NAME, "population": {"type": "integer", "minimum": 0, "maximum": 100_000_000}},
        "required": ["city", "country", "population"], "additionalProperties": False}),
    ("color-enum", "your favourite colour", {
        "type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"],
        "additionalProperties": False}),
    ("boolean", "whether the sky is blue", {
        "type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"],
        "additionalProperties": False}),
    ("number-range", "a temperature in Celsius", {
        "type": "object", "properties": {"celsius": {"type": "number", "minimum": -50, "maximum": 60}},
        "required": ["celsius"], "additionalProperties": False}),
    ("integer-exclusive", "a dice roll", {
        "type": "object", "properties": {"roll": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 7}},
        "required": ["roll"], "additionalProperties": False}),
    ("negative-range", "a winter temperature", {
        "type": "object", "properties": {"t": {"type": "integer", "minimum": -40, "maximum": -1}},
        "required": ["t"], "additionalProperties": False}),
    ("string-list", "three fruits", {
        "type": "object", "properties": {"fruits": {"type": "array", "items": NAME, "minItems": 3, "maxItems": 3}},
        "required": ["fruits"], "additionalProperties": False}),
    ("top-level-array", "a list of up to four numbers", {
        "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 100}, "minItems": 1, "maxItems": 4}),
    ("nested-object", "a book and its author", {
        "type": "object", "properties": {
            "title": TEXT,
            "author": {"type": "object", "properties": {"first": NAME, "last": NAME}, "required": ["first", "last"],
                       "additionalProperties": False}},
        "required": ["title", "author"], "additionalProperties": False}),
    ("array-of-objects", "two products with prices", {
        "type": "object", "properties": {"products": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
            "type": "object", "properties": {"name": NAME, "price": {"type": "number", "minimum": 0, "maximum": 1000}},
            "required": ["name", "price"], "additionalProperties": False}}},
        "required": ["products"], "additionalProperties": False}),
    ("date", "today's date", {
        "type": "object", "properties": {"date": {"type": "string", "format": "date"}}, "required": ["date"],
        "additionalProperties": False}),
    ("date-time", "a meeting time", {
        "type": "object", "properties": {"start": {"type": "string", "format": "date-time"}}, "required": ["start"],
        "additionalProperties": False}),
    ("time", "a wake-up time", {
        "type": "object", "properties": {"at": {"type": "string", "format": "time"}}, "required": ["at"],
        "additionalProperties": False}),
    ("uuid", "a user id", {
        "type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}, "required": ["id"],
        "additionalProperties": False}),
    ("email", "a contact", {
        "type": "object", "properties": {"name": NAME, "email": {"type": "string", "format": "email"}},
        "required": ["name", "email"], "additionalProperties": False}),
    ("ipv4", "a server address", {
        "type": "object", "properties": {"host": {"type": "string", "format": "ipv4"}}, "required": ["host"],
        "additionalProperties": False}),
    ("ipv6", "a server address in IPv6", {
        "type": "object", "properties": {"host": {"type": "string", "format": "ipv6"}}, "required": ["host"],
        "additionalProperties": False}),
    ("hostname", "a website host name", {
        "type": "object", "properties": {"host": {"type": "string", "format": "hostname"}}, "required": ["host"],
        "additionalProperties": False}),
    ("uri", "a link to a web page", {
        "type": "object", "properties": {"url": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 60}}, "required": ["url"],
        "additionalProperties": False}),
    ("duration", "how long a film lasts", {
        "type": "object", "properties": {"length": {"type": "string", "format": "duration"}}, "required": ["length"],
        "additionalProperties": False}),
    ("pattern-anchored", "a product code", {
        "type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}},
        "required": ["code"], "additionalProperties": False}),
    ("pattern-phone", "a phone number", {
        "type": "object", "properties": {"phone": {"type": "string", "pattern": "^\\+?[0-9]{7,12}$"}},
        "required": ["phone"], "additionalProperties": False}),
    ("ref-defs", "a shipping and a billing address", {
        "$defs": {"address": {"type": "object", "properties": {"street": TEXT, "zip": {"type": "string",
                                                                                      "pattern": "^[0-9]{5}$"}},
                              "required": ["street", "zip"], "additionalProperties": False}},
        "type": "object", "properties": {"shipping": {"$ref": "#/$defs/address"}, "billing": {"$ref": "#/$defs/address"}},
        "required": ["shipping", "billing"], "additionalProperties": False}),
    ("recursive", 'a small family tree, shaped like {"name": "Ann", "children": [{"name": "Bob", "children": []}]}', {
        "$defs": {"person": {"type": "object", "properties": {
            "name": NAME, "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/person"}}},
            "required": ["name"], "additionalProperties": False}},
        "$ref": "#/$defs/person"}),
    ("any-of", "either a number or a word", {
        "type": "object", "properties": {"value": {"anyOf": [{"type": "integer"}, NAME]}}, "required": ["value"],
        "additionalProperties": False}),
    ("one-of-discriminated", "a pet", {
        "type": "object", "properties": {"pet": {"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "minimum": 1,
                                                                                   "maximum": 9}},
             "required": ["kind", "lives"], "additionalProperties": False},
            {"type": "object", "properties": {"kind": {"const": "dog"}, "breed": NAME},
             "required": ["kind", "breed"], "additionalProperties": False}]}},
        "required": ["pet"], "additionalProperties": False}),
    ("all-of", "an employee", {
        "properties": {"name": True, "salary": True}, "additionalProperties": False,
        "allOf": [
            {"type": "object", "properties": {"name": NAME}, "required": ["name"]},
            {"type": "object", "properties": {"salary": {"type": "integer", "minimum": 1000, "maximum": 99999}},
             "required": ["salary"]}]}),
    ("optional-properties", "a movie, the year is optional", {
        "type": "object", "properties": {"title": TEXT, "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
                                         "genre": {"enum": ["drama", "comedy", "action"]}},
        "required": ["title"], "additionalProperties": False}),
    ("nullable", "a middle name, or null if none", {
        "type": "object", "properties": {"middle": {"type": ["string", "null"], "maxLength": 20}},
        "required": ["middle"], "additionalProperties": False}),
    ("tuple", "a point as [x, y, label]", {
        "type": "array", "prefixItems": [{"type": "integer", "minimum": -100, "maximum": 100},
                                         {"type": "integer", "minimum": -100, "maximum": 100}, NAME],
        "items": False, "minItems": 3}),
    ("additional-typed", "word counts of a sentence", {
        "type": "object", "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 99},
        "minProperties": 1, "maxProperties": 4}),
    ("min-max-properties", "up to two tags", {
        "type": "object", "properties": {"a": NAME, "b": NAME, "c": NAME}, "additionalProperties": False,
        "minProperties": 1, "maxProperties": 2}),
    ("multiple-of", "an amount in steps of five", {
        "type": "object", "properties": {"amount": {"type": "integer", "multipleOf": 5}}, "required": ["amount"],
        "additionalProperties": False}),
    ("string-length", "a short nickname", {
        "type": "object", "properties": {"nick": {"type": "string", "minLength": 3, "maxLength": 8}},
        "required": ["nick"], "additionalProperties": False}),
    ("recipe", "a pancake recipe", {
        "type": "object", "properties": {
            "name": TEXT, "servings": {"type": "integer", "minimum": 1, "maximum": 12},
            "ingredients": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
                "type": "object", "properties": {"item": NAME, "grams": {"type": "integer", "minimum": 1,
                                                                        "maximum": 1000}},
                "required": ["item", "grams"], "additionalProperties": False}},
            "vegan": {"type": "boolean"}},
        "required": ["name", "servings", "ingredients", "vegan"], "additionalProperties": False}),
]
