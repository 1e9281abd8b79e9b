"""The keywords the converter writes as what they leave: `dependentRequired`, `dependentSchemas`
and draft-07's `dependencies` (a branch per set of trigger properties present), `propertyNames`
(on objects closed to other names), `if`/`then`/`else` and `not` (in the forms whose complement
can be written). Each method returns an equivalent schema without the keyword, for the
converter to write; a form it cannot write is refused when strict, else left to the check of the
finished answer (`unenforceable`)."""

from __future__ import annotations

from typing import Any

from grammars.schema_combine import canonical, type_set
from grammars.schema_errors import SchemaError
from grammars.schema_keywords import CONDITIONAL, constraining
from grammars.schema_values import value_checker

Path = tuple[str | int, ...]

DEPENDENT_KEYS = ("dependentRequired", "dependentSchemas", "dependencies")
MAX_TRIGGERS = 4  # 2^4 branches at most
TYPE_ORDER = ("object", "array", "string", "number", "integer", "boolean", "null")


# Keywords that, beside `unevaluated*`, could evaluate more properties or items than the schema names
_IN_PLACE = ("allOf", "anyOf", "oneOf", "$ref", "if", "then", "else", "not", "dependentSchemas", "dependencies",
             "$dynamicRef", "$recursiveRef", "contains")


class SchemaRewrites:
    """Mixed into the converter, which supplies `resolve`, `combine` and `unenforceable`."""

    def localized(self, schema: Any, path: Path) -> Any:
        """`unevaluatedProperties` / `unevaluatedItems` of a schema whose own keywords decide what
        it evaluates (no in-place applicator left): the same as `additionalProperties` / the items
        after the listed ones. Applied to each part before it is merged with others (a part's
        `unevaluated*` sees only its own properties) and to the whole once its parts are merged."""
        if not isinstance(schema, dict) or ("unevaluatedProperties" not in schema and "unevaluatedItems" not in schema):
            return schema
        local = {k: v for k, v in schema.items() if k not in ("unevaluatedProperties", "unevaluatedItems")}
        if any(key in schema for key in _IN_PLACE):
            for key in ("unevaluatedProperties", "unevaluatedItems"):
                if key in schema:
                    self.unenforceable(key, path, f"`{key}` beside applicators other than `allOf`, `anyOf`, "
                                                  "`oneOf` and `$ref` at the same place is not supported")
            return local
        if "unevaluatedProperties" in schema and "additionalProperties" not in schema:
            local["additionalProperties"] = schema["unevaluatedProperties"]
        if "unevaluatedItems" in schema:
            items = schema.get("items")
            if isinstance(items, list) and "additionalItems" not in schema:
                local["additionalItems"] = schema["unevaluatedItems"]
            elif "items" not in schema:
                local["items"] = schema["unevaluatedItems"]
        return local

    def resolve(self, schema: Any, path: Path) -> Any:
        raise NotImplementedError

    def combine(self, a: Any, b: Any, path: Path) -> Any:
        raise NotImplementedError

    def unenforceable(self, keyword: str, path: Path, reason: str) -> None:
        raise NotImplementedError

    def without_clashes(self, merged: Any, branch: Any, path: Path) -> Any:
        """Before `branch` joins `merged` (allOf): a conditional, a `not` or dependencies that both
        have cannot sit in one schema, so `merged`'s are written out first (as what they leave)."""
        if not isinstance(merged, dict) or not isinstance(branch, dict):
            return merged
        if "not" in merged and "not" in branch:
            merged = self.negation(merged, path)
        if isinstance(merged, dict) and set(merged) & CONDITIONAL and set(branch) & CONDITIONAL:
            merged = self.conditional(merged, path)
        if isinstance(merged, dict) and any(k in merged for k in DEPENDENT_KEYS) and any(
                k in branch for k in DEPENDENT_KEYS):
            merged = self.dependent(merged, path)
        return merged

    def dependent(self, schema: dict, path: Path) -> Any:
        """`dependentRequired`, `dependentSchemas` and draft-07's `dependencies` as an `anyOf`, one
        branch per set of trigger properties present (absent ones ruled out in that branch)."""
        rest = {k: v for k, v in schema.items() if k not in DEPENDENT_KEYS}
        needs: dict[str, list[Any]] = {}
        for key in DEPENDENT_KEYS:
            given = schema.get(key)
            if given is None:
                continue
            if not isinstance(given, dict):
                raise SchemaError(key, path, f"`{key}` must be an object")
            for trigger, need in given.items():
                if isinstance(need, list) and not all(isinstance(name, str) for name in need):
                    raise SchemaError(key, path, f"`{key}` lists property names")
                needs.setdefault(trigger, []).append(need)
        if "object" not in type_set(rest):
            return rest
        triggers = list(needs)
        if len(triggers) > MAX_TRIGGERS:
            self.unenforceable(next(k for k in DEPENDENT_KEYS if k in schema), path,
                               f"dependencies on more than {MAX_TRIGGERS} properties are not supported")
            return rest
        was_open = _open(rest)
        branches: list[Any] = []
        for mask in range(1 << len(triggers)):
            present = [t for i, t in enumerate(triggers) if mask >> i & 1]
            absent = [t for t in triggers if t not in present]
            required = [*rest.get("required", []), *present]
            for trigger in present:
                required.extend(name for need in needs[trigger] if isinstance(need, list) for name in need)
            if any(name in required for name in absent):
                continue
            branch: Any = {**rest, "required": list(dict.fromkeys(required)),
                           "properties": {**rest.get("properties", {}), **dict.fromkeys(absent, False)}}
            if was_open:
                branch = _kept_open(branch)
            for trigger in present:
                for need in needs[trigger]:
                    if not isinstance(need, list):
                        branch = self.combine(branch, self.resolve(need, path), path)
            if branch is not False:
                branches.append(branch)
        return _either(branches, "dependentRequired", path, "no object satisfies the dependencies")

    def conditional(self, schema: dict, path: Path) -> Any:
        """`if`/`then`/`else` as an `anyOf` of (`if` and `then`) and (not `if`, and `else`), for an
        object whose `if` tests one property: its presence (`required`), or its value against a
        `const` or `enum` (with or without `required`), where that property's values are a known
        finite set (so "not `if`" can be written)."""
        rest = {k: v for k, v in schema.items() if k not in CONDITIONAL}
        condition = schema.get("if")
        if condition is None or ("then" not in schema and "else" not in schema):
            return rest
        then, otherwise = schema.get("then", True), schema.get("else", True)
        negated = self.negated_condition(rest, condition, path)
        if negated is None:
            self.unenforceable("if", path, "`if`/`then`/`else` is supported for objects whose `if` tests one "
                                           "property's presence, or its value against a `const` or `enum` of "
                                           "known, finitely many values")
            return rest
        if _open(rest):
            rest = _kept_open(rest)
        branches = []
        for parts in ((condition, then), (negated, otherwise)):
            branch: Any = rest
            for part in parts:
                branch = self.combine(branch, self.resolve(part, path), path)
            if branch is not False:
                branches.append(branch)
        return _either(branches, "if", path, "no value satisfies `if`/`then`/`else`")

    def negation(self, schema: dict, path: Path) -> Any:
        """`not` in the forms that can be written as what remains: not these types, not these
        values (of a finite set), not these properties (`required`), or not a one-property test."""
        rest = {k: v for k, v in schema.items() if k != "not"}
        excluded = self.resolve(schema["not"], path)
        remaining: Any = None
        if excluded is True:
            return False
        if excluded is False:
            return rest
        if isinstance(excluded, dict) and set(constraining(excluded)) == {"type"}:
            types = type_set(rest) - type_set(excluded)
            if "number" not in types or "integer" in types:  # "not an integer" among numbers: not written
                remaining = {**rest, "type": sorted(types, key=TYPE_ORDER.index)} if types else False
        elif isinstance(excluded, dict) and set(constraining(excluded)) <= {"const", "enum"}:
            domain = self.finite_values(rest, path)
            if domain is not None:
                tested = [excluded["const"]] if "const" in excluded else excluded.get("enum", [])
                kept = [v for v in domain if canonical(v) not in {canonical(t) for t in tested}]
                remaining = {**{k: v for k, v in rest.items() if k not in ("const", "enum")}, "enum": kept} \
                    if kept else False
        elif isinstance(excluded, dict) and set(constraining(excluded)) == {"required"} \
                and type_set(rest) == {"object"} and isinstance(excluded["required"], list) and excluded["required"]:
            absent = [{"properties": {name: False}} for name in excluded["required"]
                      if name not in rest.get("required", [])]
            remaining = False if not absent else self.combine(
                rest, absent[0] if len(absent) == 1 else {"anyOf": absent}, path)
        else:
            negated = self.negated_condition(rest, excluded, path)
            if negated is not None:
                remaining = self.combine(rest, negated, path)
        if remaining is None:
            self.unenforceable("not", path, "`not` is supported for types, finitely many values, required "
                                            "properties, and one property's value")
            return rest
        if remaining is False:
            raise SchemaError("not", path, "no value satisfies `not`")
        return remaining

    def negated_condition(self, rest: dict, condition: Any, path: Path) -> Any:
        """The objects `condition` rejects, as a schema (None: not in a form this can write)."""
        if condition is True:
            return False
        if condition is False:
            return True
        if not isinstance(condition, dict) or type_set(rest) != {"object"}:
            return None
        keys = set(condition) - {"type"} if condition.get("type") == "object" else set(condition)
        properties = condition.get("properties", {})
        required = condition.get("required", [])
        if not keys <= {"properties", "required"} or not isinstance(properties, dict) or not isinstance(required, list):
            return None
        names = set(properties) | set(required)
        if len(names) != 1:
            return None
        (name,) = names
        if name not in properties:  # a presence test
            return False if name in rest.get("required", []) else {"properties": {name: False}}
        test = self.resolve(properties[name], path)
        if not isinstance(test, dict) or set(constraining(test)) - {"const", "enum", "type"}:
            return None
        tested = test.get("enum", [test["const"]] if "const" in test else None)
        declared = rest.get("properties", {}).get(name) if isinstance(rest.get("properties"), dict) else None
        domain = self.finite_values(declared, path)
        if not isinstance(tested, list) or domain is None:
            return None
        others = [v for v in domain if canonical(v) not in {canonical(t) for t in tested}]
        different: Any = {"properties": {name: {"enum": others}}, "required": [name]} if others else False
        if name in required and name not in rest.get("required", []):  # absent also fails the test
            absent = {"properties": {name: False}}
            return absent if different is False else {"anyOf": [absent, different]}
        return different

    def finite_values(self, schema: Any, path: Path) -> list[Any] | None:
        """The values `schema` allows when they are finitely many and known (None: not so)."""
        schema = self.resolve(schema, path) if isinstance(schema, dict) else schema
        if not isinstance(schema, dict):
            return None
        own: list[Any] | None = None
        if "const" in schema:
            own = [schema["const"]]
        elif isinstance(schema.get("enum"), list):
            own = list(schema["enum"])
        elif schema.get("type") == "boolean" or schema.get("type") == ["boolean"]:
            own = [True, False]
        parts = [own] + [self.finite_values(part, path) for part in schema.get("allOf", [])
                         if isinstance(schema.get("allOf"), list)]
        known = [values for values in parts if values is not None]
        if not known:
            return None
        kept = known[0]
        for values in known[1:]:  # allOf: the values every part allows
            allowed = {canonical(v) for v in values}
            kept = [v for v in kept if canonical(v) in allowed]
        return kept

    def property_names(self, schema: dict, path: Path) -> Any:
        """`propertyNames` where an object has no properties beyond those it names: the names it
        rules out are left out (a required one makes the schema unsatisfiable)."""
        names_schema = schema["propertyNames"]
        rest = {k: v for k, v in schema.items() if k != "propertyNames"}
        if names_schema is True or "object" not in type_set(rest):
            return rest
        if names_schema is False:
            return {**rest, "maxProperties": 0}
        closed = "patternProperties" not in rest and (
            rest.get("additionalProperties") is False
            or ("additionalProperties" not in rest and ("properties" in rest or "required" in rest)))
        checker = value_checker(names_schema)
        if not closed or checker is None:
            self.unenforceable("propertyNames", path,
                               "`propertyNames` is supported for objects that allow only the properties they name")
            return rest
        properties = dict(rest.get("properties", {}))
        for name in [*properties, *rest.get("required", [])]:
            if not checker(name):
                if name in rest.get("required", []):
                    raise SchemaError("propertyNames", path, f"required property `{name}` breaks `propertyNames`")
                properties[name] = False
        return {**rest, "properties": properties}


def _open(schema: dict) -> bool:
    """An object schema that names no properties: any object, even when generating."""
    return not any(k in schema for k in ("properties", "required", "patternProperties", "additionalProperties"))


def _kept_open(schema: dict) -> dict:
    """`schema` saying outright that it is open: naming properties in a rewrite must not close it."""
    return {**schema, "additionalProperties": True}


def _either(branches: list[Any], keyword: str, path: Path, empty: str) -> Any:
    if not branches:
        raise SchemaError(keyword, path, empty)
    return branches[0] if len(branches) == 1 else {"anyOf": branches}
