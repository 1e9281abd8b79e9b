"""Checking `schema_to_gbnf` against the real-world corpus in this directory: for each schema,
either a grammar that accepts instances generated from the schema and rejects mutated invalid
ones, or a `SchemaError`. Used by tests/test_schema_real_world.py and report.py.

Instances come from hypothesis-jsonschema (derandomized, EXAMPLES_PER_SCHEMA per schema: the same
instances on any machine, however fast), are validated by `jsonschema` (formats asserted, as in ../check_corpus.py), and
rendered as the grammar writes JSON (grammars/json_schema.py's docstring): `json.dumps(
ensure_ascii=False)`, properties in the schema's order, enum and const values as the schema
spells them, bounded numbers in plain decimal. Instances the grammar deliberately never produces
are skipped as *narrowed*: undeclared keys in an object that is silent on additionalProperties,
integers past 64 bits and numbers past 10^17 on a side no bound limits, more than 17 digits
after the point, unbounded numbers past 17 digits, strings whose `pattern` result differs
between Python's `re` and ECMA-262. Texts the test tokenizer cannot spell are skipped too.

Invalid instances are mutations of the rendered valid ones (a required key dropped, a leaf of
the wrong type, an undeclared key in an object with `additionalProperties: false`, a number
out of range, a duplicate item under `uniqueItems`, a string past `maxLength`, a value outside
an `enum`), kept only when `jsonschema` says they are invalid; the grammar must reject each.
An undeclared key added to an object silent on additionalProperties is valid JSON Schema but
narrowed away: the grammar must reject it too (counted apart).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import re
import time
import warnings
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import jsonschema

HERE = Path(__file__).resolve().parent
CORPUS_FILES = ("pydantic.json", "openapi.json", "tools.json", "schemastore.json")

EXAMPLES_PER_SCHEMA = 5  # hypothesis examples asked for (at most 0.7 s for a schema on two busy cores)
MAX_UNROLLED_NODES = 30_000  # a schema with refs inlined past this is not generated from
UNROLL_REPEATS = 2  # how often one $ref may be inlined inside itself before it becomes `false`
MAX_ITEMS, MAX_STRING, MAX_EXTRA_PROPERTIES = 4, 24, 3  # generation only (see _keep_small)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # integers nothing bounds
FREE_NUMBER_LIMIT = Decimal(10) ** 17  # the side of a bounded number no bound limits
MAX_FRACTION_DIGITS = 17  # grammars.numbers.MAX_FREE_DIGITS: fraction digits, bounded or not
# grammars.numbers.NUMBER_BODY: numbers nothing bounds
FREE_NUMBER = re.compile(r"-?(0|[1-9][0-9]{0,16})(\.[0-9]{1,17})?([eE][+-]?([0-9]{1,2}|[0-2][0-9]{2}|30[0-8]))?")


def load_corpus() -> list[dict]:
    entries = []
    for name in CORPUS_FILES:
        for entry in json.loads((HERE / name).read_text(encoding="utf-8")):
            entries.append({**entry, "file": name})
    return entries


# ---------------------------------------------------------------- dialects --


def openapi30_to_draft4(node: Any) -> Any:
    """An OpenAPI 3.0 Schema Object as the draft-04 schema it means: `nullable: true` adds null
    to an explicit `type` (and only there, OpenAPI 3.0.3 section 4.7.25)."""
    if isinstance(node, list):
        return [openapi30_to_draft4(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: openapi30_to_draft4(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable") is True and isinstance(node.get("type"), str):
        out["type"] = [node["type"], "null"]
    return out


def semantic_schema(entry: dict) -> dict:
    """The schema `jsonschema` validates with (the OpenAPI 3.0 ones translated)."""
    if entry.get("dialect") == "openapi-3.0":
        return {**openapi30_to_draft4(entry["schema"]), "$schema": "http://json-schema.org/draft-04/schema#"}
    return entry["schema"]


def ref_overrides_siblings(schema: dict) -> bool:
    named = schema.get("$schema", "") if isinstance(schema, dict) else ""
    return isinstance(named, str) and any(d in named for d in ("draft-03", "draft-04", "draft-06", "draft-07"))


def make_validator(schema: dict) -> jsonschema.protocols.Validator:
    from tests.schema_corpus.check_corpus import format_checker

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=format_checker(jsonschema.Draft202012Validator))


def resolve(root: Any, ref: str) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise KeyError(f"non-local $ref {ref!r}")
    node = root
    for raw in unquote(ref[1:]).split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


# ---------------------------------------------------------------- generation --


class _TooLarge(Exception):
    pass


def for_generation(schema: dict) -> Any:
    """The schema as hypothesis-jsonschema (drafts 04-07, no recursive refs) reads it: local
    refs inlined (a ref inside itself at most UNROLL_REPEATS times, then `false`, which only
    narrows what is generated), 2020-12 `prefixItems` as draft-07 tuple `items`."""
    overrides = ref_overrides_siblings(schema)
    count = [0]

    def walk(node: Any, stack: tuple[str, ...], merged: bool = False) -> Any:
        """`merged`: the node is combined with others (an allOf branch, or an anyOf/oneOf
        branch beside properties), so it is not closed here."""
        count[0] += 1
        if count[0] > MAX_UNROLLED_NODES:
            raise _TooLarge
        if isinstance(node, list):
            return [walk(v, stack) for v in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node and isinstance(node["$ref"], str):
            ref = node["$ref"]
            if stack.count(ref) >= UNROLL_REPEATS:
                return False
            rest = {k: v for k, v in node.items() if k != "$ref"}
            alone = overrides or not any(k in CONSTRAINING for k in rest)
            target = walk(resolve(schema, ref), (*stack, ref), merged and alone or not alone)
            if alone:
                return target
            return {"allOf": [target, walk(rest, stack, True)]}
        beside = any(k in node for k in ("properties", "required", "additionalProperties", "patternProperties"))
        out = {}
        for key, value in node.items():
            if key in ("$defs", "definitions", "components", "$schema", "$id", "id", "$comment", "examples",
                       "example", "default", "discriminator"):
                continue
            if key in ("properties", "patternProperties", "dependentSchemas"):
                out[key] = {k: walk(v, stack) for k, v in value.items()} if isinstance(value, dict) else value
            elif key in ("enum", "const", "required"):
                out[key] = value
            elif key == "allOf" and isinstance(value, list):
                out[key] = [walk(v, stack, True) for v in value]
            elif key in ("anyOf", "oneOf") and isinstance(value, list):
                out[key] = [walk(v, stack, merged or beside) for v in value]
            else:
                out[key] = walk(value, stack)
        _keep_small(out)
        if (not merged and closed_by_silence([out]) and not any(k in out for k in ("allOf", "anyOf", "oneOf"))):
            out["additionalProperties"] = False  # generate what the grammar writes (see closed_by_silence)
        if "prefixItems" in out:
            prefix = out.pop("prefixItems")
            rest = out.pop("items", True)
            out["items"] = prefix
            out["additionalItems"] = rest
        return out

    return walk(schema, ())


def _keep_small(node: dict) -> None:
    """Bound sizes hypothesis would otherwise let grow (instances of tens of kilobytes cost
    seconds each to generate and check): arrays to MAX_ITEMS, strings without pattern or format
    to MAX_STRING, objects to their declared properties and MAX_EXTRA_PROPERTIES more."""
    types = node.get("type")
    types = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else None

    def count(key: str, default: int = 0) -> int:
        value = node.get(key, default)
        return int(value) if _is_number(value) else default

    def cap(key: str, low_key: str, limit: int) -> None:
        if _is_number(node.get(key)) and node[key] <= limit:
            return
        node[key] = max(count(low_key), limit)

    if (types and "array" in types) or "items" in node or "additionalItems" in node:
        cap("maxItems", "minItems", MAX_ITEMS)
    if types and "string" in types and "pattern" not in node and "format" not in node:
        cap("maxLength", "minLength", MAX_STRING)
    if (types and "object" in types) or "properties" in node or "additionalProperties" in node:
        declared = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        cap("maxProperties", "minProperties", max(len(declared), len(_list(node.get("required")))) + MAX_EXTRA_PROPERTIES)


CONSTRAINING = {"type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
                "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength",
                "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                "multipleOf", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "minProperties",
                "maxProperties", "dependentRequired", "dependentSchemas", "dependencies", "contains", "propertyNames",
                "nullable"}


class _Generation:
    """hypothesis-jsonschema, adjusted for this harness while `generate` runs (and restored
    after, so nothing else in the process sees a change):
    - `hypothesis.internal.conjecture.utils.many` gets the `more()` method hypothesis-jsonschema
      0.23 calls, which newer Hypothesis replaced by iteration inside a `with` block;
    - strings use assigned code points only (llama.cpp's tokenizer, which tests.grammar_support
      feeds the grammar with, loses bytes of unassigned code points past U+3FFFF), and "any
      value" (`true`, `{}`) uses that alphabet and short strings too;
    - strategies are built once per distinct subschema: hypothesis-jsonschema builds those of
      an object's properties again at every draw, canonicalising each subschema (most of the
      time spent); strategies are immutable, so sharing them changes nothing drawn;
    - formats it does not know get strategies: uuid, duration."""

    def __init__(self) -> None:
        import hypothesis_jsonschema._from_schema as module
        from hypothesis import strategies as st
        from hypothesis.internal import charmap

        self.module = module
        assigned = [c for c in charmap.categories() if c not in ("Cn", "Cs")]
        self.alphabet = module.CharStrategy.from_characters_args(categories=assigned, codec="utf-8")
        self.alphabet.allow_x00, self.alphabet.codec = True, "utf-8"
        text = st.text(self.alphabet, max_size=MAX_STRING)
        self.any_value = st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=8)
        duration = st.from_regex(r"\AP(?:[1-9][0-9]{0,3}D)?T[1-9][0-9]{0,3}[HMS]\Z") | \
            st.from_regex(r"\AP[1-9][0-9]{0,2}[YMWD]\Z")
        self.formats = {"uuid": st.uuids().map(str), "duration": duration}
        self.original = module.__dict__["__from_schema"]
        self.cache: dict = {}

    def build(self, schema: Any, *, alphabet: Any, custom_formats: Any) -> Any:
        try:
            key = json.dumps(schema, sort_keys=True), id(alphabet), id(custom_formats)
        except (TypeError, ValueError):
            return self.original(schema, alphabet=alphabet, custom_formats=custom_formats)
        if key not in self.cache:
            if len(self.cache) > 20_000:
                self.cache.clear()
            self.cache[key] = self.original(schema, alphabet=alphabet, custom_formats=custom_formats)
        return self.cache[key]

    def strategy(self, schema: Any) -> Any:
        """As `hypothesis_jsonschema.from_schema`, with this alphabet and these formats."""
        from hypothesis import strategies as st

        try:
            return self.build(schema, alphabet=self.alphabet, custom_formats=self.formats)
        except Exception as error:  # noqa: BLE001 - as from_schema does: raised when drawn
            failure = error

            def raise_error() -> None:
                raise failure

            return st.builds(raise_error)

    @contextlib.contextmanager
    def patched(self) -> Iterator[None]:
        from hypothesis.internal.conjecture import utils as cu

        saved = self.module.__dict__["__from_schema"], self.module.JSON_STRATEGY
        added_more = not hasattr(cu.many, "more")
        if added_more:
            cu.many.more = _many_more
        self.module.__dict__["__from_schema"], self.module.JSON_STRATEGY = self.build, self.any_value
        try:
            yield
        finally:
            self.module.__dict__["__from_schema"], self.module.JSON_STRATEGY = saved
            if added_more:
                del cu.many.more


def _many_more(self) -> bool:
    """The old `many.more()` protocol over the new one (enter once, then iterate)."""
    if self._depth is None:
        self.__enter__()
        self._compat_iterator = iter(self)
    try:
        next(self._compat_iterator)
        return True
    except StopIteration:
        self._closed = True
        return False


_GENERATION: list[_Generation] = []


def generate(schema: dict, examples: int = EXAMPLES_PER_SCHEMA) -> tuple[list, str | None]:
    """Up to `examples` instances (deterministic: derandomized, a fixed number of draws), and why
    none could be generated (or None)."""
    from hypothesis import HealthCheck, Phase, given, settings

    if not _GENERATION:
        _GENERATION.append(_Generation())
    generation = _GENERATION[0]
    try:
        target = for_generation(schema)
    except _TooLarge:
        return [], "too large with refs inlined"
    except (KeyError, IndexError, TypeError, ValueError) as error:
        return [], f"unresolvable $ref: {error}"
    found: list = []

    with generation.patched(), warnings.catch_warnings():
        warnings.simplefilter("ignore")

        @settings(max_examples=examples, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        @given(generation.strategy(target))
        def draw(instance: Any) -> None:
            found.append(instance)

        try:
            draw()
        except Exception as error:  # noqa: BLE001 - hypothesis-jsonschema's limits surface as anything
            if not found:
                return [], f"hypothesis-jsonschema: {type(error).__name__}: {str(error)[:100]}"
    return found, None


# ---------------------------------------------------------------- canonical rendering --


class Narrowed(Exception):
    """A valid instance the grammar deliberately never produces (see the module docstring)."""


@dataclasses.dataclass
class Site:
    """A node of a rendered instance and the schema parts that apply to it (for mutations)."""
    path: tuple
    parts: list[dict]
    value: Any


class Renderer:
    def __init__(self, root: dict, validator: jsonschema.protocols.Validator):
        self.root = root
        self.validator = validator
        self.overrides = ref_overrides_siblings(root)
        self.sites: list[Site] = []

    def valid(self, schema: Any, instance: Any) -> bool:
        if schema is True:
            return True
        if schema is False:
            return False
        return self.validator.evolve(schema=schema).is_valid(instance)

    def parts(self, node: Any, instance: Any, depth: int = 0) -> list[dict]:
        """The keyword groups that apply to `instance` under `node`, in the order the converter
        merges them: a $ref's target, the node's own keywords, allOf branches, then the first
        anyOf/oneOf branch the instance matches."""
        if depth > 60:
            raise Narrowed("schema nesting too deep to render")
        if node is True or node is None:
            return []
        if not isinstance(node, dict):
            return []
        out: list[dict] = []
        if "$ref" in node:
            out += self.parts(resolve(self.root, node["$ref"]), instance, depth + 1)
            if self.overrides:
                return out
        out.append({k: v for k, v in node.items() if k not in ("$ref", "allOf", "anyOf", "oneOf")})
        for branch in node.get("allOf", []):
            out += self.parts(branch, instance, depth + 1)
        for keyword in ("anyOf", "oneOf"):
            for branch in node.get(keyword, []):
                if self.valid(branch, instance):
                    out += self.parts(branch, instance, depth + 1)
                    break
        return out

    def render(self, node: Any, instance: Any, path: tuple = ()) -> Any:
        parts = self.parts(node, instance)
        self.sites.append(Site(path, parts, instance))
        for part in parts:  # enum / const: as the schema spells the value
            for values in ([part["const"]] if "const" in part else [], part.get("enum", [])):
                for value in values:
                    if _same(value, instance):
                        return copy.deepcopy(value)
        if isinstance(instance, dict):
            return self.render_object(parts, instance, path)
        if isinstance(instance, list):
            return self.render_array(parts, instance, path)
        if isinstance(instance, bool) or instance is None:
            return instance
        if isinstance(instance, (int, float)):
            return self.render_number(parts, instance)
        if isinstance(instance, str):
            for part in parts:
                pattern = part.get("pattern")
                if isinstance(pattern, str) and python_and_ecma_differ(pattern, instance):
                    raise Narrowed("pattern result differs between Python and ECMA-262")
        return instance

    def render_object(self, parts: list[dict], instance: dict, path: tuple) -> dict:
        declared: list[str] = []
        for part in parts:
            for name in part.get("properties", {}) if isinstance(part.get("properties"), dict) else ():
                if name not in declared:
                    declared.append(name)
        for part in parts:
            for name in part.get("required", []) if isinstance(part.get("required"), list) else ():
                if name not in declared:
                    declared.append(name)
        if closed_by_silence(parts):
            extra = [k for k in instance if k not in declared]
            if extra:
                raise Narrowed("undeclared key in an object silent on additionalProperties")
        order = [k for k in declared if k in instance] + [k for k in instance if k not in declared]
        out = {}
        for key in order:
            subs = [p["properties"][key] for p in parts if isinstance(p.get("properties"), dict) and key in p["properties"]]
            if not subs:
                for p in parts:
                    matched = [s for pat, s in (p.get("patternProperties") or {}).items() if _search(pat, key)]
                    subs += matched
                    if not matched and "additionalProperties" in p:
                        subs.append(p["additionalProperties"])
            out[key] = self.render({"allOf": subs} if subs else True, instance[key], (*path, key))
        return out

    def render_array(self, parts: list[dict], instance: list, path: tuple) -> list:
        out = []
        for i, item in enumerate(instance):
            subs = []
            for p in parts:
                items = p.get("items")
                if "prefixItems" in p:
                    prefix, rest = p["prefixItems"], items
                elif isinstance(items, list):
                    prefix, rest = items, p.get("additionalItems")
                else:
                    prefix, rest = [], items
                sub = prefix[i] if i < len(prefix) else rest
                if sub is not None:
                    subs.append(sub)
            out.append(self.render({"allOf": subs} if subs else True, item, (*path, i)))
        return out

    def render_number(self, parts: list[dict], value: float) -> Any:
        types = None
        for p in parts:
            declared = p.get("type")
            if declared is None:
                continue
            names = {declared} if isinstance(declared, str) else set(declared)
            if p.get("nullable") is True:
                names.add("null")
            types = names if types is None else types & names
        integer_only = types is not None and "integer" in types and "number" not in types
        low, high = bounds(parts)
        if isinstance(value, float) and value.is_integer() and integer_only:
            value = int(value)
        if integer_only:
            if (low is None and value < INT64_MIN) or (high is None and value > INT64_MAX):
                raise Narrowed("integer past 64 bits on an unbounded side")
            return value
        if low is None and high is None:
            if not FREE_NUMBER.fullmatch(json.dumps(value)):
                raise Narrowed("unbounded number past 17 digits")
            return value
        exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        if (low is None and exact < -FREE_NUMBER_LIMIT) or (high is None and exact > FREE_NUMBER_LIMIT):
            raise Narrowed("number past 10^17 on the side no bound limits")
        text = format(abs(exact) if exact == 0 else exact, "f")
        if len(text.partition(".")[2]) > MAX_FRACTION_DIGITS:
            raise Narrowed("bounded number with more than 17 digits after the point")
        if isinstance(value, float) and ("e" in repr(value) or repr(value) == "-0.0"):
            return PlainNumber(text)
        return value


class PlainNumber(float):
    """A float that `dumps` writes as the given plain-decimal text (no exponent)."""

    def __new__(cls, text: str):
        self = super().__new__(cls, text)
        self.text = text
        return self


def dumps(value: Any) -> str:
    """Canonical JSON text (PlainNumber written as its text)."""
    if isinstance(value, PlainNumber):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + dumps(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def plain(value: Any) -> Any:
    """The JSON value (PlainNumber back to float) for jsonschema."""
    if isinstance(value, PlainNumber):
        return float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool)
        and not isinstance(b, bool) and a == b)


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


def python_and_ecma_differ(pattern: str, text: str) -> bool:
    from tests.schema_corpus.check_corpus import ecma_like_search

    try:
        return (re.search(pattern, text) is not None) != ecma_like_search(pattern, text)
    except re.error:
        return True


def closed_by_silence(parts: list[dict]) -> bool:
    """The converter's closed object: declares properties (or required) and says nothing of
    additionalProperties, no patternProperties."""
    declares = any("properties" in p or "required" in p for p in parts)
    return declares and not any("additionalProperties" in p or "patternProperties" in p for p in parts)


def bounds(parts: list[dict]) -> tuple[tuple[Decimal, bool] | None, tuple[Decimal, bool] | None]:
    low = high = None
    for p in parts:
        for key, exclusive_key, side in (("minimum", "exclusiveMinimum", "low"), ("maximum", "exclusiveMaximum", "high")):
            found = []
            if _is_number(p.get(key)):
                found.append((Decimal(repr(p[key])), p.get(exclusive_key) is True))
            if _is_number(p.get(exclusive_key)):
                found.append((Decimal(repr(p[exclusive_key])), True))
            for bound in found:
                if side == "low":
                    low = bound if low is None else max(low, bound, key=lambda b: (b[0], b[1]))
                else:
                    high = bound if high is None else min(high, bound, key=lambda b: (b[0], not b[1]))
    return low, high


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# ---------------------------------------------------------------- mutations --

UNDECLARED = "zz_undeclared"


def mutations(sites: list[Site], rendered: Any, salt: int) -> Iterator[tuple[str, Any]]:
    """(kind, mutated instance) pairs; each kind at most once, at a site chosen by `salt`."""
    def pick(candidates: list[Site]) -> Site | None:
        return candidates[salt % len(candidates)] if candidates else None

    def at(path: tuple, change) -> Any:
        doc = copy.deepcopy(rendered)
        if not path:
            return change(doc)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = change(parent[path[-1]])
        return doc

    objects = [s for s in sites if isinstance(s.value, dict)]
    site = pick([s for s in objects if any(r in s.value for p in s.parts for r in _list(p.get("required")))])
    if site:
        name = next(r for p in site.parts for r in _list(p.get("required")) if r in site.value)
        yield "drop required key", at(site.path, lambda v: {k: x for k, x in v.items() if k != name})
    site = pick([s for s in sites if not isinstance(s.value, (dict, list))])
    if site:
        yield "wrong type at a leaf", at(site.path, _other_type)
    site = pick([s for s in objects if any(p.get("additionalProperties") is False for p in s.parts)])
    if site:
        yield "undeclared key in a closed object", at(site.path, lambda v: {**v, UNDECLARED: 1})
    site = pick([s for s in objects if closed_by_silence(s.parts) and UNDECLARED not in s.value])
    if site:
        yield "narrowed: undeclared key in an object silent on additionalProperties", \
            at(site.path, lambda v: {**v, UNDECLARED: 1})
    numbers = [s for s in sites if _is_number(s.value) and any(b is not None for b in bounds(s.parts))]
    site = pick(numbers)
    if site:
        low, high = bounds(site.parts)
        if high is not None:
            out = high[0] if high[1] else high[0] + 1
        else:
            out = low[0] if low[1] else low[0] - 1
        yield "number out of range", at(site.path, lambda v: int(out) if out == out.to_integral_value() else
                                      PlainNumber(format(out, "f")))
    site = pick([s for s in sites if isinstance(s.value, list) and s.value and any(p.get("uniqueItems") for p in s.parts)])
    if site:
        yield "duplicate item under uniqueItems", at(site.path, lambda v: [*v, copy.deepcopy(v[0])])
    site = pick([s for s in sites if isinstance(s.value, str) and any(_is_number(p.get("maxLength")) and
                                                                      p["maxLength"] <= 100 for p in s.parts)])
    if site:
        limit = min(p["maxLength"] for p in site.parts if _is_number(p.get("maxLength")))
        yield "string past maxLength", at(site.path, lambda v: (v * (limit + 1) if v else "x" * (limit + 1))[:limit + 1])
    site = pick([s for s in sites if isinstance(s.value, str) and any("enum" in p for p in s.parts)])
    if site:
        yield "string outside enum", at(site.path, lambda v: v + "-zz" if v else "zz")


def _list(x: Any) -> list:
    return x if isinstance(x, list) else []


def _other_type(value: Any) -> Any:
    if isinstance(value, str):
        return 12345
    if isinstance(value, bool) or value is None:
        return "x"
    return "x" if _is_number(value) else None


# ---------------------------------------------------------------- one schema --


def spellable(text: str) -> bool:
    """Whether the test model's tokenizer spells `text` exactly (tests.grammar_support feeds the
    grammar tokens; llama.cpp's tokenizer drops bytes of some code points past U+3FFFF)."""
    from tests.grammar_support import _model

    model = _model()
    tokens = model.tokenize(text, add_special=False, parse_special=False)
    return b"".join(model.token_bytes(t) for t in tokens) == text.encode("utf-8")


@dataclasses.dataclass
class Result:
    name: str
    outcome: str = ""  # "converted", "refused", "crashed"
    keyword: str = ""  # of the SchemaError
    reason: str = ""
    generation_skipped: str = ""  # why no instances were generated
    valid: int = 0  # rendered valid instances checked
    valid_accepted: int = 0
    narrowed_skipped: int = 0  # valid instances the grammar never writes (not checked)
    unspellable: int = 0  # instances the test tokenizer cannot spell (not checked)
    generated_invalid: int = 0  # generated instances jsonschema rejects (discarded)
    invalid: int = 0  # mutated invalid instances checked
    invalid_rejected: int = 0
    narrowed: int = 0  # narrowed mutations checked (valid, never written)
    narrowed_rejected: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)
    narrowed_reasons: list[str] = dataclasses.field(default_factory=list)
    unspellable_texts: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    generation_seconds: float = 0.0


def check_schema(entry: dict, convert, error_type, accepts, compiles=None, salt_base: int = 0) -> Result:
    """Convert one corpus entry and check its grammar; no assertion, everything in the Result."""
    started = time.monotonic()
    result = Result(entry["name"])
    try:
        grammar = convert(entry["schema"])
    except error_type as error:
        result.outcome, result.keyword, result.reason = "refused", getattr(error, "keyword", "?"), str(error)
        result.seconds = time.monotonic() - started
        return result
    except Exception as error:  # noqa: BLE001 - recorded: the converter must not crash
        result.outcome, result.reason = "crashed", f"{type(error).__name__}: {error}"[:300]
        result.seconds = time.monotonic() - started
        return result
    result.outcome = "converted"
    if compiles is not None:
        try:
            compiles(grammar)
        except Exception as error:  # noqa: BLE001
            result.failures.append(f"grammar does not compile: {error}"[:300])
            result.seconds = time.monotonic() - started
            return result
    semantic = semantic_schema(entry)
    try:
        validator = make_validator(semantic)
    except (jsonschema.exceptions.SchemaError, re.error) as error:
        result.generation_skipped = f"jsonschema rejects the schema: {str(error)[:100]}"
        result.seconds = time.monotonic() - started
        return result
    generation_started = time.monotonic()
    instances, why = generate(semantic)
    result.generation_seconds = time.monotonic() - generation_started
    result.generation_skipped = why or ""
    seen: set[str] = set()
    for number, instance in enumerate(instances):
        try:
            if not validator.is_valid(instance):
                result.generated_invalid += 1
                continue
        except Exception:  # noqa: BLE001 - e.g. a pattern Python's re cannot read
            result.generated_invalid += 1
            continue
        renderer = Renderer(semantic, validator)
        try:
            rendered = renderer.render(semantic, instance)
        except Narrowed as why_narrowed:
            result.narrowed_skipped += 1
            result.narrowed_reasons.append(str(why_narrowed))
            continue
        except (KeyError, IndexError, RecursionError):
            result.narrowed_skipped += 1
            continue
        text = dumps(rendered)
        if text in seen:
            continue
        seen.add(text)
        if not spellable(text):
            result.unspellable += 1
            result.unspellable_texts.append(text)
            continue
        if not validator.is_valid(plain(rendered)):
            result.failures.append(f"rendering made the instance invalid (harness bug): {text[:200]}")
            continue
        result.valid += 1
        if accepts(grammar, text):
            result.valid_accepted += 1
        else:
            result.failures.append(f"valid instance rejected: {text[:300]}")
            continue
        for kind, mutant in mutations(renderer.sites, rendered, salt_base + number):
            mutant_text = dumps(mutant)
            if mutant_text in seen:
                continue
            seen.add(mutant_text)
            is_valid = validator.is_valid(plain(mutant))
            if kind.startswith("narrowed"):
                if not is_valid:
                    continue
                result.narrowed += 1
                if accepts(grammar, mutant_text):
                    result.failures.append(f"{kind}: accepted: {mutant_text[:300]}")
                else:
                    result.narrowed_rejected += 1
                continue
            if is_valid:
                continue
            result.invalid += 1
            if accepts(grammar, mutant_text):
                result.failures.append(f"invalid instance ({kind}) accepted: {mutant_text[:300]}")
            else:
                result.invalid_rejected += 1
    result.seconds = time.monotonic() - started
    return result
