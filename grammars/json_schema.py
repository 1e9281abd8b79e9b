"""JSON Schema to llama.cpp GBNF: a grammar whose sentences are JSON texts valid under the schema,
or a `SchemaError` naming what cannot be expressed (fail closed).

`schema_to_gbnf(schema)` is public: tools outside the server call it; it refuses whatever the
grammar alone cannot enforce. `convert_schema(schema, strict=..., unique_items=...)` is what the
server uses: `uniqueItems` left to decoding (`grammars.unique_items`), and without `strict` the
keywords a grammar cannot enforce left out and listed, for the check of the finished answer. Drafts 04, 06, 07, 2019-09
and 2020-12 are read by the root's `$schema` (2020-12 when it names none; the draft-07 spellings
`definitions` and array `items` with `additionalItems` are understood in every draft), and
OpenAPI 3.0's `nullable`. Keywords outside the validation vocabularies are annotations and change
nothing (`grammars.schema_keywords`), unknown formats included.

Canonical JSON here means `json.dumps(value, ensure_ascii=False)` characters, no whitespace
except a bounded allowance (`ws`: one space, or one newline and up to 20 spaces or tabs) after
`{`, `[`, `:` and `,` and before `}` and `]`. The grammar is narrower than JSON Schema:
- in form: object properties come in the schema's order; strings use the shortest escapes;
  numbers under bounds are written without exponent;
- closed objects: an object schema that lists `properties` (or `required`) and says nothing of
  `additionalProperties` gets only those properties (and keys its `patternProperties` match), as
  OpenAI's strict mode, llama.cpp and XGrammar generate; `additionalProperties: true` or a schema
  opens it, and `{"type": "object"}` alone stays any object;
- bounded numbers: a side of a range no bound limits stops where JSON parsers do: integers
  within 64 bits, other numbers within 10^17 in plain decimal, and at most 17 digits after the
  point beyond those a bound needs, with an exponent up to 308 where nothing bounds a number at
  all. Without this a model may write digits until it runs out of tokens;
- `not`, `if`/`then`/`else`, `dependentRequired`/`dependentSchemas` and `propertyNames` are
  written as what they leave (alternatives with a property present or absent, a value set less
  some values, types less some types) in the forms their methods name; other forms are refused
  when strict, else left to the check of the finished answer.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from grammars.array_contains import containing_items
from grammars.formats import FORMATS, format_grammar
from grammars.gbnf import (
    JSON_CHAR,
    JSON_CHAR_BODY,
    MAX_CODE_POINT,
    GrammarBuilder,
    GrammarTooLarge,
    complement,
    json_chars,
    json_string_literal,
    literal,
    normalize,
    repeat,
)
from grammars.item_sequences import COMMA, array_items, object_items
from grammars.numbers import (
    INT64_MAX,
    INT64_MIN,
    MAX_FREE_DIGITS,
    NUMBER_BODY,
    integer_multiple_of,
    integer_range,
    number_range,
)
from grammars.regex import NEVER, RegexError, regex_to_gbnf
from grammars.schema_combine import (
    MAX_BRANCHES,
    canonical,
    disjoint,
    generated_apart,
    json_type,
    merge,
    numeric_bounds,
    type_set,
)
from grammars.schema_errors import SchemaError, Unsatisfiable
from grammars.schema_keywords import (
    constraining,
    dialect_of,
)
from grammars.schema_refs import SchemaRefs
from grammars.schema_rewrites import DEPENDENT_KEYS, TYPE_ORDER, SchemaRewrites
from grammars.schema_values import value_checker

__all__ = ["SchemaError", "SchemaGrammar", "convert_schema", "schema_to_gbnf", "JSON_OBJECT_GRAMMAR"]

Path = tuple[str | int, ...]

MAX_SCHEMA_NODES = 20_000
MAX_SCHEMA_DEPTH = 64
MAX_RULES = 4_000
MAX_GRAMMAR_CHARS = 400_000

WS = "ws"
WS_BODY = '( " " | "\\n" [ \\t]{0,20} )?'
QUOTE = literal('"')
COLON = literal(":") + " " + WS
_ANY_BODIES = {
    "value": 'object | array | string | number | "true" | "false" | "null"',
    "object": '"{" ws ( string ":" ws value ( "," ws string ":" ws value )* ws )? "}"',
    "array": '"[" ws ( value ( "," ws value )* ws )? "]"',
    "string": '"\\"" json-char* "\\""',
    "number": NUMBER_BODY,
}

_OBJECT_KEYS = ("properties", "required", "additionalProperties", "patternProperties", "minProperties", "maxProperties")
_ARRAY_KEYS = ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "contains")
_STRING_KEYS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_TYPE_ORDER = TYPE_ORDER


def schema_to_gbnf(schema: dict) -> str:
    """A GBNF grammar (rule `root`) for the JSON texts valid under `schema`.

    Raises `SchemaError` (a `ValueError`) naming the keyword and its JSON Pointer when the
    schema uses something a grammar cannot enforce exactly (`uniqueItems` included: see
    `convert_schema`), or is too large.
    """
    return convert_schema(schema, strict=True, unique_items=False).grammar


@dataclass(frozen=True)
class SchemaGrammar:
    """A schema's grammar and what the grammar leaves to others.

    `unique_items`: the schema says `uniqueItems` somewhere, which decoding enforces
    (`grammars.unique_items`). `deferred`: the keywords the grammar does not enforce, each
    with its JSON Pointer and why; only a conversion that is not strict defers, and the
    finished answer is then checked against the whole schema."""

    grammar: str
    unique_items: bool = False
    deferred: tuple[SchemaError, ...] = ()


def convert_schema(schema: Any, *, strict: bool = True, unique_items: bool = True) -> SchemaGrammar:
    """The grammar for `schema`. `strict`: a keyword the grammar cannot enforce is a
    `SchemaError` (else it is left out of the grammar and listed in `deferred`).
    `unique_items`: `uniqueItems` is left to decoding (else it cannot be enforced)."""
    if not isinstance(schema, (dict, bool)):
        raise SchemaError("schema", (), "a JSON Schema must be an object or a boolean")
    _check_size(schema)
    converter = _Converter(schema, strict=strict, unique_items=unique_items)
    try:
        grammar = converter.convert()
    except GrammarTooLarge as error:
        raise SchemaError("schema", (), f"the schema is too large to convert: {error}") from None
    except RecursionError:
        raise SchemaError("schema", (), "the schema nests too deeply") from None
    deferred = tuple({(e.keyword, e.path): e for e in converter.deferred}.values())
    return SchemaGrammar(grammar, converter.uses_unique_items, deferred)


def _check_size(schema: Any) -> None:
    stack: list[tuple[Any, int]] = [(schema, 0)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise SchemaError("schema", (), f"the schema is too large (more than {MAX_SCHEMA_NODES} JSON nodes)")
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaError("schema", (), f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children)


def _number_value(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(schema: dict, key: str, path: Path, default: int | None) -> int | None:
    value = schema.get(key, default)
    if value is None or value is default:
        return value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SchemaError(key, path, f"`{key}` must be a non-negative integer")
    return value


class _Converter(SchemaRewrites):
    def __init__(self, root: Any, *, strict: bool = True, unique_items: bool = False):
        self.root = root
        self.strict = strict
        self.unique_items = unique_items
        self.uses_unique_items = False
        self.deferred: list[SchemaError] = []
        self.dialect = dialect_of(root)
        self.refs = SchemaRefs(root, self.dialect)
        self.b = GrammarBuilder(max_rules=MAX_RULES, max_chars=MAX_GRAMMAR_CHARS)
        self.ref_rules: dict[str, str] = {}
        self.ranges: dict[tuple, str] = {}  # number and integer ranges already written, by their bounds
        self.b.fixed(WS, WS_BODY)
        self.b.fixed(JSON_CHAR, JSON_CHAR_BODY)

    def convert(self) -> str:
        return self.b.render(self.ref_rule("#", ()))

    # ---- references -----------------------------------------------------------------------

    def lookup(self, ref: Any, path: Path) -> tuple[Any, Path, str]:
        return self.refs.lookup(ref, path)

    def ref_rule(self, ref: str, path: Path) -> str:
        target, where, key = self.lookup(ref, path)
        name = self.ref_rules.get(key)
        if name is None:
            if isinstance(target, dict) and "$ref" in target:
                self.resolve(target, where)  # a chain of references only: refused if it goes round
            hint = str(where[-1]) if where else "root"
            name = self.ref_rules[key] = self.b.reserve(hint)
            self.b.define(name, self.value(target, where))
        return name

    def resolve(self, schema: Any, path: Path, hops: int = 0) -> Any:
        """`schema` with a top-level `$ref` replaced by (its target merged with) the rest."""
        schema = self.static_ref(schema, path)
        if not isinstance(schema, dict) or "$ref" not in schema:
            return schema
        if hops > 32:
            raise SchemaError("$ref", path, "the references go round in a circle")
        target, where, _ = self.lookup(schema["$ref"], path)
        target = self.resolve(target, where, hops + 1)
        rest = constraining(schema, without=("$ref",))
        if self.dialect.ref_overrides_siblings or not rest:
            return target
        return self.combine(self.localized(target, where), rest, path, part=False)

    def unless_unsatisfiable(self, write: Callable[[Any, Path], str], schema: Any, path: Path) -> str | None:
        """`write(schema, path)`, or None (and the grammar as it was) when `schema` admits no value."""
        saved = self.b.snapshot(), dict(self.ref_rules), dict(self.ranges)
        try:
            return write(schema, path)
        except Unsatisfiable:
            self.b.restore(saved[0])
            self.ref_rules, self.ranges = saved[1], saved[2]
            return None

    def static_ref(self, schema: Any, path: Path) -> Any:
        """`$dynamicRef` / `$recursiveRef` as the `$ref` they are where nothing can extend them: the
        document has at most one `$dynamicAnchor` of that name (`$recursiveAnchor: true`), so
        every dynamic scope resolves them alike."""
        if not isinstance(schema, dict):
            return schema
        for key, anchor in (("$dynamicRef", "$dynamicAnchor"), ("$recursiveRef", "$recursiveAnchor")):
            if key not in schema:
                continue
            target = schema[key]
            rest = {k: v for k, v in schema.items() if k != key}
            name = target.partition("#")[2] if isinstance(target, str) else None
            wanted = True if key == "$recursiveRef" else name
            if name is None or "$ref" in schema:
                self.unenforceable(key, path, f"`{key}` beside `$ref` is not supported")
                return rest
            if key == "$recursiveRef" or not name.startswith("/"):
                if self.refs.count_anchor(anchor, wanted) > 1:
                    self.unenforceable(key, path, f"`{key}` whose anchor is declared more than once (extended "
                                                  "dynamically) is not supported")
                    return rest
            return {**rest, "$ref": target}
        return schema

    def combine(self, a: Any, b: Any, path: Path, *, part: bool = True) -> Any:
        """`a` and `b` together; `part`: `b` is a part of `a`'s schema (an `allOf` branch, ...), whose
        `unevaluated*` see only `b`'s own properties."""
        if part:
            b = self.localized(b, path)
        if a is False or b is False:
            return False
        if a is True:
            return b
        if b is True:
            return a
        return merge(a, b, path)

    # ---- any schema -----------------------------------------------------------------------

    def value(self, schema: Any, path: Path) -> str:
        """A GBNF expression for the JSON values valid under `schema`."""
        if schema is True:
            return self.any_value()
        if schema is False:
            raise Unsatisfiable("false", path, "the schema `false` admits no value here")
        if not isinstance(schema, dict):
            raise SchemaError("schema", path, "a schema must be an object or a boolean")
        self.check_keywords(schema, path)
        schema = self.static_ref(schema, path)
        if "$ref" in schema:
            rest = constraining(schema, without=("$ref",))
            if self.dialect.ref_overrides_siblings or not rest:
                return self.ref_rule(schema["$ref"], path)
            return self.value(self.resolve(schema, path), path)
        # composition first: what follows reads the whole object (each alternative carries the rest)
        if "allOf" in schema:
            return self.all_of(schema, path)
        if "anyOf" in schema or "oneOf" in schema:
            return self.alternatives(schema, path)
        if "not" in schema:
            return self.value(self.negation(schema, path), path)
        if "if" in schema or "then" in schema or "else" in schema:
            return self.value(self.conditional(schema, path), path)
        if any(key in schema for key in DEPENDENT_KEYS):
            return self.value(self.dependent(schema, path), path)
        if "propertyNames" in schema:
            return self.value(self.property_names(schema, path), path)
        if "unevaluatedProperties" in schema or "unevaluatedItems" in schema:
            schema = self.localized(schema, path)  # its parts are merged: what it names is all it evaluates
        if "enum" in schema or "const" in schema:
            return self.constants(schema, path)
        return self.typed(schema, path)

    def check_keywords(self, schema: dict, path: Path) -> None:
        """Note `uniqueItems` (left to decoding, or refused) and check `type`; the other keywords
        are checked where they are written."""
        if schema.get("uniqueItems") is True:
            if self.unique_items:
                self.uses_unique_items = True
            else:
                self.unenforceable("uniqueItems", path, "`uniqueItems` cannot be expressed as a grammar")
        types = schema.get("type")
        if types is not None:
            names = [types] if isinstance(types, str) else types
            if not isinstance(names, list) or not names or any(t not in _TYPE_ORDER for t in names):
                raise SchemaError("type", path, "`type` must be a JSON type name or a list of them")

    def unenforceable(self, keyword: str, path: Path, reason: str) -> None:
        """A keyword the grammar cannot enforce: refused when strict, else left to the check of
        the finished answer (the grammar admits what the keyword would rule out)."""
        error = SchemaError(keyword, path, reason)
        if self.strict:
            raise error
        self.deferred.append(error)

    def any_value(self) -> str:
        for name, body in _ANY_BODIES.items():
            self.b.fixed(name, body)
        return "value"

    def all_of(self, schema: dict, path: Path) -> str:
        branches = schema["allOf"]
        if not isinstance(branches, list) or not branches:
            raise SchemaError("allOf", path, "`allOf` must be a non-empty list of schemas")
        merged: Any = {k: v for k, v in schema.items() if k != "allOf"}
        merged = self.resolve(merged, path)
        for i, branch in enumerate(branches):
            if isinstance(branch, dict):
                self.check_keywords(branch, (*path, "allOf", i))
            branch = self.resolve(branch, (*path, "allOf", i))
            merged = self.without_clashes(merged, branch, path)
            merged = self.combine(merged, branch, (*path, "allOf", i))
        if merged is False:
            raise Unsatisfiable("allOf", path, "the allOf branches admit no common value")
        return self.value(merged, path)

    def alternatives(self, schema: dict, path: Path) -> str:
        keyword = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[keyword]
        if not isinstance(branches, list) or not branches:
            raise SchemaError(keyword, path, f"`{keyword}` must be a non-empty list of schemas")
        if len(branches) > MAX_BRANCHES:
            raise SchemaError(keyword, path, f"more than {MAX_BRANCHES} alternatives")
        if keyword == "oneOf":
            # the grammar writes each branch as it stands only when nothing beside oneOf shapes objects
            as_written = not any(key in schema for key in _OBJECT_KEYS)
            for i in range(len(branches)):
                for j in range(i + 1, len(branches)):
                    if not disjoint(branches[i], branches[j], self.resolve, path) and not (
                            as_written and generated_apart(branches[i], branches[j], self.resolve, path)):
                        self.unenforceable(
                            "oneOf", path,
                            f"oneOf branches {i} and {j} may both match a value, which a grammar cannot rule out; "
                            "use anyOf, or make the branches disjoint (different types or a `const` discriminator)")
        rest = {k: v for k, v in schema.items() if k != keyword}
        shared = constraining(rest)
        options = []
        for i, branch in enumerate(branches):
            where = (*path, keyword, i)
            if branch is False:
                continue
            if isinstance(branch, dict):
                self.check_keywords(branch, where)
            combined = self.combine(self.resolve(shared, path), self.resolve(branch, where), where) \
                if shared else branch
            if combined is False:
                continue
            option = self.unless_unsatisfiable(self.value, combined, where)
            if option is not None:
                options.append(option)
        if not options:
            raise SchemaError(keyword, path, f"no `{keyword}` branch admits a value")
        return _alternation(self.b, keyword.lower(), list(dict.fromkeys(options)))

    def constants(self, schema: dict, path: Path) -> str:
        keyword = "const" if "const" in schema else "enum"
        values = [schema["const"]] if keyword == "const" else schema["enum"]
        if not isinstance(values, list) or not values:
            raise SchemaError("enum", path, "`enum` must be a non-empty list")
        if keyword == "const" and "enum" in schema:
            values = [v for v in values if canonical(v) in {canonical(e) for e in schema["enum"]}]
        others = constraining(schema, without=("enum", "const", "type", "nullable"))
        if others:
            allows = value_checker(others)  # the other keywords keep only some of the values
            if allows is None:
                first = next(iter(others))
                raise SchemaError(first, path, f"`{keyword}` together with `{first}` is not supported")
            values = [v for v in values if allows(v)]
        types = type_set(schema)
        kept = [v for v in values if json_type(v) in types]
        if not kept:
            raise Unsatisfiable(keyword, path, f"no value of `{keyword}` has an allowed type")
        return _alternation(self.b, "enum", list(dict.fromkeys(self.constant(v) for v in kept)))

    def constant(self, value: Any) -> str:
        """One JSON value, with the same whitespace allowance as everything else."""
        if isinstance(value, dict) and value:
            members = f" {COMMA} ".join(
                f"{literal(json.dumps(k, ensure_ascii=False))} {COLON} {self.constant(v)}" for k, v in value.items())
            return self.b.rule("const", f'"{{" ws {members} ws "}}"')
        if isinstance(value, list) and value:
            items = f" {COMMA} ".join(self.constant(v) for v in value)
            return self.b.rule("const", f'"[" ws {items} ws "]"')
        if value == {} or value == []:
            return self.b.rule("const", '"{" ws "}"' if value == {} else '"[" ws "]"')
        return literal(canonical(value))

    def typed(self, schema: dict, path: Path) -> str:
        types = type_set(schema)
        if "number" in types:
            types.discard("integer")
        options = []
        for name in _TYPE_ORDER:
            if name not in types:
                continue
            if name == "object":
                options.append(self.object(schema, path))
            elif name == "array":
                options.append(self.array(schema, path))
            elif name == "string":
                options.append(self.string(schema, path))
            elif name in ("number", "integer"):
                options.append(self.number(schema, path, integer=name == "integer"))
            elif name == "boolean":
                options.append('("true" | "false")')
            else:
                options.append('"null"')
        return _alternation(self.b, "value", options)

    # ---- objects ---------------------------------------------------------------------------

    def object(self, schema: dict, path: Path) -> str:
        if not any(k in schema for k in _OBJECT_KEYS):
            self.any_value()
            return "object"
        properties = schema.get("properties", {})
        if not isinstance(properties, dict):
            raise SchemaError("properties", path, "`properties` must be an object")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaError("required", path, "`required` must be a list of property names")
        required = list(dict.fromkeys(required))
        additional = schema.get("additionalProperties", True)
        patterns = schema.get("patternProperties", {})
        if not isinstance(patterns, dict):
            raise SchemaError("patternProperties", path, "`patternProperties` must be an object")
        if patterns and "additionalProperties" not in schema:
            additional = False  # closed when generating: the named properties and the patterns' keys
        min_count = _count(schema, "minProperties", path, 0) or 0
        max_count = _count(schema, "maxProperties", path, None)
        # Closed when generating: an object that declares its properties and is silent on the
        # others gets only those (as OpenAI's strict mode, llama.cpp and XGrammar do).
        closed = "additionalProperties" not in schema and not patterns and ("properties" in schema or "required" in schema)

        declared: list[tuple[str, Any, Path]] = []
        for name, sub in properties.items():
            if sub is False:
                if name in required:
                    raise Unsatisfiable("required", path, f"property `{name}` is required but its schema is `false`")
                continue
            declared.append((name, sub, (*path, "properties", name)))
        for name in required:
            if name not in properties:
                if patterns:
                    raise SchemaError("required", path,
                                      f"required property `{name}` is not in `properties` while `patternProperties` is set")
                if additional is False:
                    raise SchemaError("required", path, f"property `{name}` is required but additional properties are not allowed")
                declared.append((name, additional, (*path, "additionalProperties")))
        items = [
            self.b.rule("kv-" + name, f"{literal(json.dumps(name, ensure_ascii=False))} {COLON} {self.value(sub, where)}")
            for name, sub, where in declared
        ]
        required_at = [name in required for name, _, _ in declared]
        extra = None if closed else self.extra_property(schema, path, set(properties) | set(required), additional,
                                                        patterns)
        body = object_items(self.b, items, required_at, extra, min_count, max_count)
        if body is None:
            raise SchemaError("minProperties" if min_count else "maxProperties", path,
                              "no object satisfies the property counts")
        items_expr, empty_allowed = body
        if items_expr is None:
            return self.b.rule("object-empty", '"{" ws "}"')
        inner = f"( {items_expr} ws )?" if empty_allowed else f"{items_expr} ws"
        return self.b.rule("object", f'"{{" ws {inner} "}}"')

    def extra_property(self, schema: dict, path: Path, names: set[str], additional: Any,
                       patterns: dict) -> str | None:
        """The rule for one property beyond the declared ones, or None when none is allowed."""
        if patterns:
            if additional is not False:
                raise SchemaError("patternProperties", path,
                                  "patternProperties is supported only with `additionalProperties: false`")
            distinct = {canonical(s) for s in patterns.values()}
            if len(distinct) > 1:
                raise SchemaError("patternProperties", path,
                                  "several patternProperties with different schemas: a key matching two of them "
                                  "would need both, which a grammar cannot express")
            keys = []
            for pattern in patterns:
                for name in names:
                    if _python_search(pattern, name):
                        raise SchemaError("patternProperties", path,
                                          f"declared property `{name}` also matches pattern `{pattern}`")
                keys.append(self.pattern(pattern, (*path, "patternProperties")))
            key = _alternation(self.b, "pattern-key", keys)
            value = self.value(next(iter(patterns.values())), (*path, "patternProperties", next(iter(patterns))))
        elif additional is False:
            return None
        else:
            key = self.key_not_in(sorted(names))
            value = self.value(additional, (*path, "additionalProperties"))
        return self.b.rule("extra-kv", f"{QUOTE} {key} {QUOTE} {COLON} {value}")

    def key_not_in(self, names: list[str]) -> str:
        """Content of a JSON string that is none of `names` (a trie, walked deterministically)."""
        if not names:
            return f"{JSON_CHAR}*"
        trie: dict = {}
        for name in names:
            node = trie
            for char in name:
                node = node.setdefault(char, {})
            node[""] = {}
        return self._trie_rule(trie)

    def _trie_rule(self, node: dict) -> str:
        children = sorted(c for c in node if c)
        options = [] if "" in node else ['""']
        taken = [(ord(c), ord(c)) for c in children]
        other = _other_chars(taken)
        if other is not None:
            options.append(f"{other} {JSON_CHAR}*")
        for char in children:
            options.append(f"{json_string_literal(char)} {self._trie_rule(node[char])}")
        return self.b.rule("other-key", " | ".join(options))

    # ---- arrays ----------------------------------------------------------------------------

    def array(self, schema: dict, path: Path) -> str:
        if not any(k in schema for k in _ARRAY_KEYS):
            self.any_value()
            return "array"
        items = schema.get("items", True)
        if "prefixItems" in schema:
            prefix, rest, rest_where = schema["prefixItems"], items, (*path, "items")
        elif isinstance(items, list):
            prefix, rest, rest_where = items, schema.get("additionalItems", True), (*path, "additionalItems")
        else:
            prefix, rest, rest_where = [], items, (*path, "items")
        if not isinstance(prefix, list):
            raise SchemaError("prefixItems", path, "`prefixItems` must be a list of schemas")
        prefix_key = "prefixItems" if "prefixItems" in schema else "items"
        min_items = _count(schema, "minItems", path, 0) or 0
        max_items = _count(schema, "maxItems", path, None)
        for i, sub in enumerate(prefix):
            if sub is False:
                max_items = i if max_items is None else min(max_items, i)
                prefix = prefix[:i]
                break
        if rest is False:
            max_items = len(prefix) if max_items is None else min(max_items, len(prefix))
        if max_items is not None and max_items < min_items:
            raise SchemaError("minItems", path, "no array satisfies minItems and maxItems")
        if "contains" in schema:
            containing = self.containing(schema, path, prefix, rest, rest_where, min_items, max_items)
            if containing is not None:
                return containing
        prefix_rules = [self.value(sub, (*path, prefix_key, i)) for i, sub in enumerate(prefix)]
        rest_rule = self.value(rest, rest_where) if rest is not False else None
        items_expr = array_items(self.b, prefix_rules, rest_rule, min_items, max_items)
        if items_expr is None:
            return self.b.rule("array-empty", '"[" ws "]"')
        inner = f"( {items_expr} ws )?" if min_items == 0 else f"{items_expr} ws"
        return self.b.rule("array", f'"[" ws {inner} "]"')

    def containing(self, schema: dict, path: Path, prefix: list, rest: Any, rest_where: Path, min_items: int,
                   max_items: int | None) -> str | None:
        """An array with `contains` (`minContains` 1; `maxContains` only where `maxItems` makes it
        moot): None when `contains` asks nothing (`minContains: 0`), or when it is left to the check."""
        least = _count(schema, "minContains", path, 1)
        most = _count(schema, "maxContains", path, None)
        if least == 0 and most is None:
            return None
        problem = None
        if least != 1:
            problem = ("minContains", "`minContains` above 1 is not supported")
        elif most is not None and (max_items is None or most < max_items):
            problem = ("maxContains", "`maxContains` below `maxItems` is not supported")
        elif prefix or rest is False:
            problem = ("contains", "`contains` together with `prefixItems` is not supported")
        if problem is None:
            marked = self.combine(rest, schema["contains"], (*path, "contains"))
            if marked is False or max_items == 0:
                raise SchemaError("contains", path, "no item satisfies both `items` and `contains`")
            body = containing_items(self.b, self.value(rest, rest_where), self.value(marked, (*path, "contains")),
                                    COMMA, min_items, max_items)
            if body is not None:
                return self.b.rule("array", f'"[" ws {body} ws "]"')
            problem = ("contains", "`contains` with more than 64 items is not supported")
        self.unenforceable(problem[0], path, problem[1])
        return None

    # ---- strings ---------------------------------------------------------------------------

    def string(self, schema: dict, path: Path) -> str:
        min_length = _count(schema, "minLength", path, 0) or 0
        max_length = _count(schema, "maxLength", path, None)
        if max_length is not None and max_length < min_length:
            raise SchemaError("maxLength", path, "no string satisfies minLength and maxLength")
        pattern, form = schema.get("pattern"), schema.get("format")
        if form is not None and not isinstance(form, str):
            raise SchemaError("format", path, "`format` must be a string")
        if form not in FORMATS:
            form = None  # a format this converter does not know is an annotation, as the specification says
        if pattern is not None and form is not None:
            self.unenforceable("format", path, "`pattern` together with `format` is not supported")
            form = None
        content = self.pattern_or_deferred(pattern, path, min_length, max_length) if pattern is not None else None
        if content is None and form is not None:
            try:
                content = format_grammar(self.b, form, min_length=min_length, max_length=max_length)
            except ValueError as error:
                raise SchemaError("format", path, f"format `{form}` with minLength/maxLength: {error}") from None
        elif content is None and min_length == 0 and max_length is None:
            self.any_value()
            return "string"
        elif content is None:
            content = repeat(self.b, JSON_CHAR, min_length, max_length)
        return self.b.rule("string", f"{QUOTE} {content} {QUOTE}")

    def pattern_or_deferred(self, pattern: Any, path: Path, min_length: int, max_length: int | None) -> str | None:
        """The pattern's grammar; None when it cannot be translated and the conversion defers it."""
        try:
            return self.pattern(pattern, path, min_length, max_length)
        except SchemaError as error:
            if self.strict or not isinstance(pattern, str) or isinstance(error, Unsatisfiable):
                raise
            self.deferred.append(error)
            return None

    def pattern(self, pattern: Any, path: Path, min_length: int = 0, max_length: int | None = None) -> str:
        if not isinstance(pattern, str):
            raise SchemaError("pattern", path, "`pattern` must be a string")
        try:
            content = regex_to_gbnf(pattern, self.b, min_length=min_length, max_length=max_length)
        except RegexError as error:
            raise SchemaError("pattern", path, f"pattern `{pattern}`: {error}") from None
        if content == NEVER:
            raise Unsatisfiable("pattern", path, f"no string matches pattern `{pattern}` within the length bounds")
        return content

    # ---- numbers ---------------------------------------------------------------------------

    def number(self, schema: dict, path: Path, *, integer: bool) -> str:
        for key in _NUMBER_KEYS:
            if key in schema and not _number_value(schema[key]) and not (
                    key.startswith("exclusive") and isinstance(schema[key], bool)):
                raise SchemaError(key, path, f"`{key}` must be a number")
        low, high = numeric_bounds(schema)
        divisor = schema.get("multipleOf")
        if divisor is not None:
            return self.multiple_of(schema, divisor, low, high, integer, path)
        if not integer:
            if low is None and high is None:
                self.any_value()
                return "number"
            # the side no bound limits: at most MAX_FREE_DIGITS digits before the point
            free = Decimal(10) ** MAX_FREE_DIGITS
            if low is None and high[0] > -free:
                low = (-free, False)
            if high is None and low[0] < free:
                high = (free, False)
            key = ("number", low, high)
            if key not in self.ranges:
                try:
                    self.ranges[key] = self.b.rule("number", number_range(
                        self.b, low and low[0], high and high[0],
                        exclusive_minimum=bool(low and low[1]), exclusive_maximum=bool(high and high[1])))
                except ValueError:
                    raise Unsatisfiable("minimum", path, "no number satisfies the bounds") from None
            return self.ranges[key]
        int_low = None if low is None else (math.floor(low[0]) + 1 if low[1] else math.ceil(low[0]))
        int_high = None if high is None else (math.ceil(high[0]) - 1 if high[1] else math.floor(high[0]))
        # the side no bound limits: 64 bits
        if int_low is None and (int_high is None or int_high >= INT64_MIN):
            int_low = INT64_MIN
        if int_high is None and int_low <= INT64_MAX:
            int_high = INT64_MAX
        key = ("integer", int_low, int_high)
        if key not in self.ranges:
            try:
                self.ranges[key] = self.b.rule("integer", integer_range(self.b, int_low, int_high))
            except ValueError:
                raise Unsatisfiable("minimum", path, "no integer satisfies the bounds") from None
        return self.ranges[key]

    def multiple_of(self, schema: dict, divisor: Any, low: Any, high: Any, integer: bool, path: Path) -> str:
        whole = _number_value(divisor) and Decimal(str(divisor)) == Decimal(str(divisor)).to_integral_value()
        if not integer or not whole or not 1 <= divisor <= 1000:
            reason = "`multipleOf` is supported for integers with a whole divisor from 1 to 1000"
        elif low is not None or high is not None:
            reason = "`multipleOf` together with bounds is not supported"
        else:
            return self.b.rule("multiple", integer_multiple_of(self.b, int(divisor)))
        if not _number_value(divisor) or divisor <= 0:
            raise SchemaError("multipleOf", path, "`multipleOf` must be a number above 0")
        self.unenforceable("multipleOf", path, reason)
        return self.number({k: v for k, v in schema.items() if k != "multipleOf"}, path, integer=integer)


# ---- item sequences ------------------------------------------------------------------------


def _alternation(builder: GrammarBuilder, hint: str, options: list[str]) -> str:
    if len(options) == 1:
        return options[0]
    return builder.rule(hint, " | ".join(options))


def _other_chars(taken: list[tuple[int, int]]) -> str | None:
    return _chars_besides(tuple(taken))


@functools.lru_cache(maxsize=4096)
def _chars_besides(taken: tuple[tuple[int, int], ...]) -> str | None:
    rest = complement(normalize(taken)) if taken else [(0, MAX_CODE_POINT)]
    return json_chars(rest) if rest else None


def _python_search(pattern: str, text: str) -> bool:
    """Whether an ECMAScript pattern matches `text`, through Python's `re` (the same for the
    patterns property keys use); a pattern `re` cannot read counts as matching (refused)."""
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return True


def _json_object_grammar() -> str:
    builder = GrammarBuilder()
    builder.fixed(WS, WS_BODY)
    builder.fixed(JSON_CHAR, JSON_CHAR_BODY)
    for name, body in _ANY_BODIES.items():
        builder.fixed(name, body)
    return builder.render("object")


JSON_OBJECT_GRAMMAR = _json_object_grammar()
