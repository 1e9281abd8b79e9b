"""Check the JSON Schema corpus in this directory against the `jsonschema` package.

Run standalone:  .venv/bin/python tests/schema_corpus/check_corpus.py  (exit status 0 = clean)

Corpus files (every *.json here except unsupported.json) hold a list of cases
    {"name": ..., "schema": ..., "valid": [...], "invalid": [...], "narrowed": [...]}
meant for testing a JSON Schema -> GBNF converter: the grammar must accept
    json.dumps(instance, ensure_ascii=False, separators=(",", ":"))
for every valid instance and reject it for every invalid one. `narrowed` (optional) holds
instances valid under the schema that the converter deliberately never generates: extra
properties of an object that declares its properties and is silent on the others, numbers past
the digits a JSON parser holds (see grammars.json_schema); the grammar must reject them too.

What is checked:
  * every schema is a valid schema for its draft ($schema: draft-07 or, by default, 2020-12);
  * every valid and narrowed instance validates and every invalid instance fails (with format
    assertion on);
  * valid instances respect the converter's rules: declared properties in `properties` order
    (across allOf/$ref merges and anyOf/oneOf branches), additional properties after declared
    ones, no exponent notation for numbers under a bound, ints (not floats) where only
    "integer" is allowed, enum/const values serialized exactly as written in the schema;
  * schemas stay inside the supported subset (no unsupported keyword, known formats only,
    no lookaround in patterns, patternProperties only single and with additionalProperties
    false, multipleOf only on unbounded
    integers, only local $refs that resolve);
  * no `pattern` result depends on where Python's re differs from ECMA-262 (`$` before a final
    newline, Unicode \\d/\\w/\\s);
  * unsupported.json: each schema is valid for its draft and `path` (a JSON Pointer, "" is
    the root) points at a schema object that holds `keyword`, the only unsupported construct in it.
It also warns (without failing) about invalid instances that break more than one constraint,
and reports which keywords no invalid instance breaks.

Formats: jsonschema's FormatChecker only checks date-time, time, duration, hostname and uri
when optional packages (rfc3339-validator, isoduration, fqdn, rfc3987) are installed, and
FormatChecker() as a whole maps "time" to the draft-3 strptime check. So that results do not
depend on what is installed, this script uses jsonschema's own stdlib-based checks for date,
email, ipv4, ipv6 and uuid, and its own stdlib checks (below, hand-verified against RFC 3339
section 5.6 and appendix A, RFC 1123 section 2.1, RFC 3986 section 3) for time, date-time,
duration, hostname and uri; date is additionally checked with datetime.date.fromisoformat.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import math
import re
import sys
import uuid
from pathlib import Path
from urllib.parse import unquote

import jsonschema

HERE = Path(__file__).resolve().parent
DRAFT7_IDS = {
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema",
}
KNOWN_FORMATS = {
    "date",
    "time",
    "date-time",
    "duration",
    "uuid",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uri",
}
UNSUPPORTED = {
    "contains",
    "minContains",
    "maxContains",
    "$dynamicRef",
    "$recursiveRef",
    "$anchor",
}
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


# ---------------------------------------------------------------- formats (stdlib) --

_TIME = (
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
_DATE = r"([0-9]{4})-([0-9]{2})-([0-9]{2})"


def _time_ok(m: re.Match, first: int) -> bool:
    hh, mm, ss = (int(m.group(first + i)) for i in range(3))
    ok = hh < 24 and mm < 60 and ss < 60
    if m.group(first + 4):  # numeric offset
        ok = ok and int(m.group(first + 5)) < 24 and int(m.group(first + 6)) < 60
    return ok


def check_date(s: object) -> bool:
    if not isinstance(s, str):
        return True
    if not re.fullmatch(_DATE, s, re.ASCII):
        return False
    try:
        datetime.date.fromisoformat(s)
    except ValueError:
        return False
    return True


def check_time(s: object) -> bool:
    if not isinstance(s, str):
        return True
    m = re.fullmatch(_TIME, s, re.ASCII)
    return bool(m) and _time_ok(m, 1)


def check_date_time(s: object) -> bool:
    if not isinstance(s, str):
        return True
    m = re.fullmatch(_DATE + "[Tt]" + _TIME, s, re.ASCII)
    return bool(m) and check_date(s[:10]) and _time_ok(m, 4)


# RFC 3339 appendix A (ISO 8601 durations), uppercase designators only.
_DUR_SECOND = r"[0-9]+S"
_DUR_MINUTE = rf"[0-9]+M(?:{_DUR_SECOND})?"
_DUR_HOUR = rf"[0-9]+H(?:{_DUR_MINUTE})?"
_DUR_TIME = rf"T(?:{_DUR_HOUR}|{_DUR_MINUTE}|{_DUR_SECOND})"
_DUR_DAY = r"[0-9]+D"
_DUR_MONTH = rf"[0-9]+M(?:{_DUR_DAY})?"
_DUR_YEAR = rf"[0-9]+Y(?:{_DUR_MONTH})?"
_DUR_DATE = rf"(?:{_DUR_DAY}|{_DUR_MONTH}|{_DUR_YEAR})(?:{_DUR_TIME})?"
_DURATION = rf"P(?:{_DUR_DATE}|{_DUR_TIME}|[0-9]+W)"


def check_duration(s: object) -> bool:
    return not isinstance(s, str) or bool(re.fullmatch(_DURATION, s, re.ASCII))


def check_hostname(s: object) -> bool:
    """RFC 1123: dot-separated labels of 1-63 letters/digits/hyphens, no hyphen at either end."""
    if not isinstance(s, str):
        return True
    if not s or len(s) > 253:
        return False
    return all(
        re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", label, re.ASCII)
        for label in s.split(".")
    )


_URI_CHARS = r"A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%"


def check_uri(s: object) -> bool:
    """RFC 3986 absolute URI (scheme ":" ...), ASCII only, well-formed %-escapes, one '#' at most."""
    if not isinstance(s, str):
        return True
    if not re.fullmatch(rf"[A-Za-z][A-Za-z0-9+.\-]*:[{_URI_CHARS}]*", s, re.ASCII):
        return False
    if re.search(r"%(?![0-9A-Fa-f]{2})", s) or s.count("#") > 1:
        return False
    return not ("[" in s or "]" in s) or bool(
        re.match(
            r"[A-Za-z][A-Za-z0-9+.\-]*://(?:[^@/]*@)?\[[0-9A-Fa-f:.]+\](?::[0-9]*)?(?:[/?#]|$)",
            s,
        )
    )


def check_uuid(s: object) -> bool:
    if not isinstance(s, str):
        return True
    if not re.fullmatch(
        r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
        s,
        re.ASCII,
    ):
        return False
    uuid.UUID(s)
    return True


def format_checker(cls) -> jsonschema.FormatChecker:
    fc = jsonschema.FormatChecker(formats=())
    builtin = cls.FORMAT_CHECKER.checkers
    for name in ("email", "ipv4", "ipv6", "uuid", "date"):
        if (
            name in builtin
        ):  # stdlib-based checks of jsonschema itself (ipaddress, uuid, date)
            func, raises = builtin[name]
            fc.checks(name, raises)(func)
    ours = {
        "time": check_time,
        "date-time": check_date_time,
        "duration": check_duration,
        "hostname": check_hostname,
        "uri": check_uri,
    }
    if "uuid" not in fc.checkers:  # draft-07 does not define uuid
        ours["uuid"] = check_uuid
    if "ipv4" not in fc.checkers:
        ours["ipv4"] = lambda s: (
            not isinstance(s, str) or bool(ipaddress.IPv4Address(s))
        )
    for name, func in ours.items():
        fc.checks(name, (ValueError, ipaddress.AddressValueError))(func)
    # date: jsonschema's check plus ours (both must pass)
    prev = fc.checkers["date"][0]
    fc.checks("date", ValueError)(lambda s, prev=prev: prev(s) and check_date(s))
    return fc


PATTERN_MISMATCHES: list[str] = []


def ecma_like_search(pattern: str, s: str) -> bool:
    """Closer to ECMA-262 than re.search: `$` only at the very end, \\d/\\w/\\s ASCII only."""
    return re.search(re.sub(r"\$(?=\)|\||$)", r"\\Z", pattern), s, re.ASCII) is not None


def _extend(cls):
    original = cls.VALIDATORS["pattern"]

    def pattern(validator, patrn, instance, schema):
        if isinstance(instance, str) and (
            re.search(patrn, instance) is not None
        ) != ecma_like_search(patrn, instance):
            PATTERN_MISMATCHES.append(
                f"pattern {patrn!r} on {instance!r} differs between Python and ECMA-262"
            )
        yield from original(validator, patrn, instance, schema)

    return jsonschema.validators.extend(cls, {"pattern": pattern})


VALIDATORS = {
    "draft7": (_extend(jsonschema.Draft7Validator), jsonschema.Draft7Validator),
    "draft2020": (
        _extend(jsonschema.Draft202012Validator),
        jsonschema.Draft202012Validator,
    ),
}


def validator_for(schema):
    sid = schema.get("$schema") if isinstance(schema, dict) else None
    draft7 = sid in DRAFT7_IDS
    cls, base = VALIDATORS["draft7" if draft7 else "draft2020"]
    base.check_schema(schema)
    return cls(schema, format_checker=format_checker(base)), draft7


# ---------------------------------------------------------------- helpers --


def dumps(x) -> str:
    return json.dumps(x, ensure_ascii=False, separators=(",", ":"))


def pointer_get(doc, pointer: str):
    if pointer == "":
        return doc
    if not pointer.startswith("/"):
        raise KeyError(pointer)
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, list):
            doc = doc[int(token)]
        elif isinstance(doc, dict):
            doc = doc[token]
        else:
            raise KeyError(pointer)
    return doc


def resolve(root, ref: str):
    if not ref.startswith("#"):
        raise KeyError(f"non-local $ref {ref!r}")
    return pointer_get(root, unquote(ref[1:]))


def is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def subschemas(schema, path=""):
    """Yield (path, schema) for every schema object reachable through supported keywords."""
    yield path, schema
    if not isinstance(schema, dict):
        return
    for kw in ("properties", "patternProperties", "$defs", "definitions"):
        for key, sub in schema.get(kw, {}).items():
            yield from subschemas(
                sub, f"{path}/{kw}/{key.replace('~', '~0').replace('/', '~1')}"
            )
    for kw in (
        "additionalProperties",
        "additionalItems",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
    ):
        if kw in schema:
            yield from subschemas(schema[kw], f"{path}/{kw}")
    for kw in ("prefixItems", "anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(kw, [])):
            yield from subschemas(sub, f"{path}/{kw}/{i}")
    items = schema.get("items")
    if isinstance(items, list):
        for i, sub in enumerate(items):
            yield from subschemas(sub, f"{path}/items/{i}")
    elif items is not None:
        yield from subschemas(items, f"{path}/items")


# ---------------------------------------------------------------- lint (supported subset) --


def _finite(schema) -> bool:
    return isinstance(schema, dict) and ("const" in schema or "enum" in schema or schema.get("type") == "boolean")


def _one_property_test(test, parent: dict) -> bool:
    """`{"required": [k]}`, or `{"properties": {k: {"const" | "enum": ...}}}` with or without
    `"required": [k]` where the object declares k with finitely many values: the forms of `if`
    (and `not`) the converter writes a complement for."""
    if not isinstance(test, dict) or set(test) - {"properties", "required", "type"}:
        return False
    properties, required = test.get("properties", {}), test.get("required", [])
    names = set(properties) | set(required)
    if len(names) != 1:
        return False
    name = next(iter(names))
    if name not in properties:
        return True
    declared = parent.get("properties", {}).get(name)
    return set(properties[name]) <= {"const", "enum", "type"} and _finite(declared)


def _simple_negation(excluded, parent: dict) -> bool:
    if isinstance(excluded, bool):
        return True
    keys = set(excluded) if isinstance(excluded, dict) else {"?"}
    return (keys == {"type"} or (keys <= {"const", "enum"} and _finite(parent)) or keys == {"required"}
            or _one_property_test(excluded, parent))


def lint(schema) -> list[tuple[str, str, str]]:
    """Constructs outside the supported subset, as (JSON Pointer of the schema object, keyword, message)."""
    problems = []
    for path, s in subschemas(schema):
        if not isinstance(s, dict):
            continue
        for kw in sorted(UNSUPPORTED & s.keys()):
            problems.append((path, kw, f"unsupported keyword {kw}"))
        if "not" in s and not _simple_negation(s["not"], s):
            problems.append((path, "not", "`not` beyond types, values, required names and one property's value"))
        if "if" in s and ("then" in s or "else" in s) and not _one_property_test(s["if"], s):
            problems.append((path, "if", "`if` beyond one property's presence or value"))
        if s.get("uniqueItems") is True:
            problems.append((path, "uniqueItems", "uniqueItems true"))
        if "format" in s and s["format"] not in KNOWN_FORMATS:
            problems.append((path, "format", f"unknown format {s['format']!r}"))
        if "pattern" in s:
            re.compile(s["pattern"])
            if re.search(r"\(\?[=!<]|\\[1-9]", s["pattern"]):
                problems.append(
                    (path, "pattern", "lookaround/backreference in pattern")
                )
        if "patternProperties" in s:
            pp = s["patternProperties"]
            if s.get("additionalProperties", False) is not False:  # silent: closed when generating
                problems.append(
                    (
                        path,
                        "patternProperties",
                        "patternProperties without additionalProperties false",
                    )
                )
            if len(pp) != 1:
                problems.append(
                    (
                        path,
                        "patternProperties",
                        "more than one patternProperties pattern",
                    )
                )
            for pat in pp:
                for name in s.get("properties", {}):
                    if re.search(pat, name):
                        problems.append(
                            (
                                path,
                                "patternProperties",
                                f"declared property {name!r} matches {pat!r}",
                            )
                        )
        if "multipleOf" in s and (
            s.get("type") != "integer"
            or any(b in s for b in BOUNDS)
            or not isinstance(s["multipleOf"], int)
        ):
            problems.append(
                (path, "multipleOf", "multipleOf only for unbounded integers")
            )
        if "$ref" in s:
            try:
                resolve(schema, s["$ref"])
            except (KeyError, IndexError, ValueError) as e:
                problems.append((path, "$ref", f"$ref does not resolve: {e}"))
    return problems


# ---------------------------------------------------------------- rule checks on valid instances --


def alternatives(schema, root, depth=0):
    """Ways to satisfy `schema` as lists of keyword-only parts (allOf/$ref merged, anyOf/oneOf split)."""
    if depth > 50:
        raise RecursionError("applicator recursion too deep")
    if schema is True:
        return [[]]
    if schema is False:
        return []
    base = {
        k: v for k, v in schema.items() if k not in ("allOf", "anyOf", "oneOf", "$ref")
    }
    combos = [[base]]
    merged = []
    if "$ref" in schema:
        merged.append(resolve(root, schema["$ref"]))
    merged.extend(schema.get("allOf", []))
    for sub in merged:
        combos = [c + alt for c in combos for alt in alternatives(sub, root, depth + 1)]
    for kw in ("anyOf", "oneOf"):
        if kw in schema:
            combos = [
                c + alt
                for c in combos
                for b in schema[kw]
                for alt in alternatives(b, root, depth + 1)
            ]
    return combos


def rule_errors(schema, inst, ctx, path="") -> list[str]:
    validator, root, _ = ctx
    last = [f"{path or '/'}: no way to satisfy the schema"]
    for parts in alternatives(schema, root):
        if all(validator.evolve(schema=p).is_valid(inst) for p in parts):
            errs = parts_errors(parts, inst, ctx, path)
            if not errs:
                return []
            last = errs
    return last


def parts_errors(parts, inst, ctx, path) -> list[str]:
    draft7 = ctx[2]
    where = path or "/"
    errs = []
    for p in parts:
        if "enum" in p and dumps(inst) not in {dumps(v) for v in p["enum"]}:
            errs.append(
                f"{where}: {dumps(inst)} equals an enum value but is serialized differently"
            )
        if "const" in p and dumps(inst) != dumps(p["const"]):
            errs.append(
                f"{where}: {dumps(inst)} equals const but is serialized differently"
            )
    if is_number(inst) and isinstance(inst, float):
        if any(b in p for p in parts for b in BOUNDS) and "e" in repr(inst).lower():
            errs.append(f"{where}: bounded number {inst!r} serializes with an exponent")
        for p in parts:
            t = p.get("type")
            types = set(t) if isinstance(t, list) else {t} if t else set()
            if "integer" in types and "number" not in types:
                errs.append(f"{where}: float {inst!r} where only integer is allowed")
    if isinstance(inst, dict):
        declared = []
        for p in parts:
            for k in p.get("properties", {}):
                if k not in declared:
                    declared.append(k)
        keys = list(inst)
        positions = [declared.index(k) for k in keys if k in declared]
        if positions != sorted(positions):
            errs.append(f"{where}: declared properties out of order: {keys}")
        flags = [k in declared for k in keys]
        if False in flags and True in flags[flags.index(False) :]:
            errs.append(f"{where}: additional property before a declared one: {keys}")
        for k, v in inst.items():
            sub = f"{path}/{k}"
            subs = [p["properties"][k] for p in parts if k in p.get("properties", {})]
            if not subs:
                for p in parts:
                    matched = [
                        s
                        for pat, s in p.get("patternProperties", {}).items()
                        if re.search(pat, k)
                    ]
                    subs.extend(matched)
                    if not matched and "additionalProperties" in p:
                        subs.append(p["additionalProperties"])
            for s in subs:
                errs.extend(rule_errors(s, v, ctx, sub))
    if isinstance(inst, list):
        for p in parts:
            items = p.get("items")
            if draft7 and isinstance(items, list):
                prefix, rest = items, p.get("additionalItems")
            elif draft7:
                prefix, rest = [], items
            else:
                prefix, rest = p.get("prefixItems", []), items
            for i, v in enumerate(inst):
                s = prefix[i] if i < len(prefix) else rest
                if s is not None:
                    errs.extend(rule_errors(s, v, ctx, f"{path}/{i}"))
    return errs


# ---------------------------------------------------------------- main --

NAME_MAPS = {
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
}


def broken_keywords(errors) -> set[str]:
    """Keywords along each error's schema path (skipping property/definition names)."""
    out = set()
    for e in errors:
        out.add("False" if e.validator is None else str(e.validator))
        tokens = list(e.schema_path)
        i = 0
        while i < len(tokens):
            t = tokens[i]
            if isinstance(t, str):
                out.add(t)
                if t in NAME_MAPS:
                    i += 1
            i += 1
        if e.context:
            out |= broken_keywords(e.context)
    return out


def schema_keywords(schema) -> set[str]:
    out = set()
    for _, s in subschemas(schema):
        if s is False:
            out.add("False")
        elif isinstance(s, dict):
            out |= s.keys()
    return out


def check_json_value(x, where) -> list[str]:
    if isinstance(x, float) and not math.isfinite(x):
        return [f"{where}: non-finite number"]
    if isinstance(x, list):
        return [m for i, v in enumerate(x) for m in check_json_value(v, f"{where}/{i}")]
    if isinstance(x, dict):
        return [m for k, v in x.items() for m in check_json_value(v, f"{where}/{k}")]
    return []


def main() -> int:
    failures: list[str] = []
    warnings: list[str] = []
    names: set[str] = set()
    used_kw: set[str] = set()
    broken_kw: set[str] = set()
    n_cases = n_valid = n_invalid = 0
    files = sorted(p for p in HERE.glob("*.json") if p.name != "unsupported.json")
    for path in files:
        cases = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(cases, list):
            failures.append(f"{path.name}: not a list")
            continue
        for case in cases:
            name = case.get("name")
            tag = f"{path.name}:{name}"
            if not {"name", "schema", "valid", "invalid"} <= set(case) <= {"name", "schema", "valid", "invalid",
                                                                           "narrowed"}:
                failures.append(f"{tag}: keys are {sorted(case)}")
                continue
            if name in names:
                failures.append(f"{tag}: duplicate name")
            names.add(name)
            n_cases += 1
            schema = case["schema"]
            try:
                validator, draft7 = validator_for(schema)
            except jsonschema.SchemaError as e:
                failures.append(f"{tag}: invalid schema: {e.message}")
                continue
            failures.extend(
                f"{tag}: {where or '(root)'}: {m}" for where, _, m in lint(schema)
            )
            used_kw |= schema_keywords(schema)
            ctx = (validator, schema, draft7)
            valid_texts = {dumps(v) for v in case["valid"]}
            for i, inst in enumerate(case["valid"]):
                n_valid += 1
                failures.extend(
                    f"{tag}: valid[{i}]{m}" for m in check_json_value(inst, "")
                )
                errors = list(validator.iter_errors(inst))
                if errors:
                    failures.append(
                        f"{tag}: valid[{i}] {dumps(inst)[:80]} fails: {errors[0].message[:160]}"
                    )
                    continue
                failures.extend(
                    f"{tag}: valid[{i}] {m}" for m in rule_errors(schema, inst, ctx)
                )
            for i, inst in enumerate(case.get("narrowed", [])):
                n_valid += 1
                errors = list(validator.iter_errors(inst))
                if errors:
                    failures.append(
                        f"{tag}: narrowed[{i}] {dumps(inst)[:80]} fails: {errors[0].message[:160]}"
                    )
            for i, inst in enumerate(case["invalid"]):
                n_invalid += 1
                failures.extend(
                    f"{tag}: invalid[{i}]{m}" for m in check_json_value(inst, "")
                )
                if dumps(inst) in valid_texts:
                    failures.append(f"{tag}: invalid[{i}] also listed as valid")
                errors = list(validator.iter_errors(inst))
                if not errors:
                    failures.append(f"{tag}: invalid[{i}] {dumps(inst)[:80]} is valid")
                    continue
                broken_kw |= broken_keywords(errors)
                if len(errors) > 1:
                    warnings.append(
                        f"{tag}: invalid[{i}] breaks {len(errors)} constraints: "
                        + "; ".join(e.message[:60] for e in errors)
                    )

    # unsupported.json
    n_unsupported = 0
    upath = HERE / "unsupported.json"
    for case in json.loads(upath.read_text(encoding="utf-8")):
        tag = f"unsupported.json:{case.get('name')}"
        n_unsupported += 1
        if set(case) != {"name", "schema", "keyword", "path"}:
            failures.append(f"{tag}: keys are {sorted(case)}")
            continue
        if case["name"] in names:
            failures.append(f"{tag}: duplicate name")
        names.add(case["name"])
        try:
            validator_for(case["schema"])
        except jsonschema.SchemaError as e:
            failures.append(f"{tag}: invalid schema: {e.message}")
        try:
            holder = pointer_get(case["schema"], case["path"])
        except (KeyError, IndexError, ValueError):
            failures.append(f"{tag}: path {case['path']!r} does not resolve")
            continue
        if not isinstance(holder, dict) or case["keyword"] not in holder:
            failures.append(f"{tag}: {case['keyword']!r} not at {case['path']!r}")
        if (case["path"], holder) not in [
            (p, s) for p, s in subschemas(case["schema"])
        ]:
            failures.append(f"{tag}: path {case['path']!r} is not a schema location")
        problems = lint(case["schema"])
        if (case["path"], case["keyword"]) not in {(w, k) for w, k, _ in problems}:
            failures.append(
                f"{tag}: lint does not find {case['keyword']!r} at {case['path']!r}: {problems}"
            )
        if {w for w, _, _ in problems} != {case["path"]}:
            failures.append(
                f"{tag}: unsupported constructs at more than one place: {problems}"
            )

    interesting = {
        "type",
        "enum",
        "const",
        "required",
        "additionalProperties",
        "patternProperties",
        "minProperties",
        "maxProperties",
        "items",
        "prefixItems",
        "additionalItems",
        "minItems",
        "maxItems",
        "anyOf",
        "oneOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "False",
    }
    not_broken = sorted((interesting & used_kw) - broken_kw)

    failures.extend(sorted(set(PATTERN_MISMATCHES)))
    print(
        f"{len(files)} corpus files, {n_cases} cases, {n_valid} valid and {n_invalid} invalid instances; "
        f"{n_unsupported} unsupported schemas"
    )
    for w in warnings:
        print("warning:", w)
    if not_broken:
        print("warning: keywords no invalid instance breaks:", ", ".join(not_broken))
    for f in failures:
        print("FAIL:", f)
    print("OK" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
