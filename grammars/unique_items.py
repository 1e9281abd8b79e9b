"""`uniqueItems` at decode time: a grammar cannot say that an array's items differ, so the output is
watched as it is written and a token that would complete a duplicate item is not allowed.

`UniqueItemsGuard` is built once per schema; `start()` gives each sequence a `GuardState`, which
reads the output's bytes (after the reasoning block and answer opener, when the model has them),
follows the JSON value and the schema along it, and answers `advance(piece)`: the state after the
token's bytes, or None when they would complete an item already in an array whose schema says
`uniqueItems: true`. Items are compared by JSON equality (`1` equals `1.0`, key order does not
matter).

Where an item's values are few and known (`enum`, `const`, booleans, integers in a small range), a
token is refused as soon as every value it could still become is already in the array, so the
model is never led into a dead end; a string item with a `maxLength` is refused when it reaches
that length equal to an earlier item (it could only close). Other items are checked when they
end (a string's closing quote, the character after a number, a container's closing bracket):
free strings and numbers can always go on instead.

Only requests whose schema says `uniqueItems` pay for this, one small scan per token.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from grammars.schema_errors import SchemaError
from grammars.schema_keywords import dialect_of, schema_objects
from grammars.schema_refs import SchemaRefs

_WHITESPACE = frozenset(b" \t\n\r")
_SCALAR_BYTES = frozenset(b"0123456789+-.eE" + bytes(range(ord("a"), ord("z") + 1)))
_COMBINATORS = ("allOf", "anyOf", "oneOf", "then", "else")
_NONE: tuple[dict, ...] = ()
_SMALL_RANGE = 256  # an integer item within this span has its values listed


def uses_unique_items(schema: Any) -> bool:
    """Whether `uniqueItems: true` appears anywhere in the schema."""
    return any(node.get("uniqueItems") is True for node in schema_objects(schema))


def item_key(raw: bytes) -> str | None:
    """A JSON value's identity under JSON equality, from its text (None: not a whole value)."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return json.dumps(_normal(value), sort_keys=True, ensure_ascii=False)


def _normal(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


class UniqueItemsGuard:
    """The schema's navigation for `GuardState`s: which schemas apply to a value, its members
    and items. Immutable once built; its caches are filled by the scheduler thread only."""

    def __init__(self, schema: Any, *, reasoning_start: str | None = None, reasoning_end: str | None = None,
                 opener: str = "", roots: list[Any] | None = None, calls: bool = False):
        """`schema`: the document references resolve in; `roots`: the schemas of the JSON values
        watched (the document itself when None). `calls`: every JSON object or array after the
        opener (found anywhere) is watched, one after another: tool calls' arguments, wrapped or
        not, in whatever markup the call syntax puts around them."""
        self.schema = schema
        self._refs = SchemaRefs(schema, dialect_of(schema))
        self.reasoning_start = reasoning_start.encode() if reasoning_start is not None else None
        self.reasoning_end = reasoning_end.encode() if reasoning_end is not None else None
        self.opener = opener.encode()
        self.calls = calls
        self._domains: dict[int, tuple[bytes, ...] | None] = {}
        self.root = self.expand([schema] if roots is None else roots)

    @classmethod
    def for_calls(cls, parameters: list[Any], *, opener: str, reasoning_start: str | None = None,
                  reasoning_end: str | None = None) -> UniqueItemsGuard:
        """A guard for tool calls' arguments, each tool's `parameters` in `parameters`: the values
        watched are the arguments object, a call object that wraps it (`arguments`, `parameters`,
        `input`), a list of such calls, and each argument's own value (key/value syntaxes)."""
        document = {"tools": [_rebased(schema, f"/tools/{i}") for i, schema in enumerate(parameters)]}
        roots: list[Any] = []
        for schema in document["tools"]:
            call = {"properties": {key: schema for key in ("arguments", "parameters", "input", "args")}}
            roots.extend([schema, call, {"items": call}])
            properties = schema.get("properties") if isinstance(schema, dict) else None
            if isinstance(properties, dict):
                roots.extend(properties.values())
        return cls(document, roots=roots, calls=True, opener=opener, reasoning_start=reasoning_start,
                   reasoning_end=reasoning_end)

    def start(self) -> GuardState:
        return GuardState(self)

    # ---- the schema along the value ---------------------------------------------------------

    def expand(self, schemas: list[Any]) -> tuple[dict, ...]:
        """Every schema object that applies to a value valid under `schemas`: the schemas
        themselves, their reference targets and their combinators' branches (a superset:
        uniqueness is enforced where any of them asks for it)."""
        found: list[dict] = []
        seen: set[int] = set()
        stack = list(schemas)
        while stack:
            node = stack.pop()
            if not isinstance(node, dict) or id(node) in seen:
                continue
            seen.add(id(node))
            found.append(node)
            if isinstance(node.get("$ref"), str):
                try:
                    stack.append(self._refs.lookup(node["$ref"], ())[0])
                except SchemaError:
                    pass
            for key in _COMBINATORS:
                branches = node.get(key)
                stack.extend(branches if isinstance(branches, list) else [branches] if isinstance(branches, dict) else [])
        return tuple(found)

    def member(self, schemas: tuple[dict, ...], key: str) -> tuple[dict, ...]:
        if not schemas:
            return _NONE
        children: list[Any] = []
        for schema in schemas:
            properties = schema.get("properties")
            if isinstance(properties, dict) and key in properties:
                children.append(properties[key])
                continue
            patterns = schema.get("patternProperties")
            matched = False
            if isinstance(patterns, dict):
                for pattern, sub in patterns.items():
                    if _matches(pattern, key):
                        children.append(sub)
                        matched = True
            if not matched and isinstance(schema.get("additionalProperties"), dict):
                children.append(schema["additionalProperties"])
        return self.expand(children) if children else _NONE

    def item(self, schemas: tuple[dict, ...], index: int) -> tuple[list[Any], tuple[dict, ...]]:
        """The schemas written for item `index` (as given), and all that apply to it."""
        if not schemas:
            return [], _NONE
        children: list[Any] = []
        for schema in schemas:
            prefix = schema.get("prefixItems")
            rest = schema.get("items")
            if not isinstance(prefix, list) and isinstance(rest, list):
                prefix, rest = rest, schema.get("additionalItems")
            if isinstance(prefix, list) and index < len(prefix):
                children.append(prefix[index])
            elif isinstance(rest, dict):
                children.append(rest)
        return children, (self.expand(children) if children else _NONE)

    def domain(self, written: list[Any]) -> tuple[bytes, ...] | None:
        """The canonical texts of every value the item can take, when they are few scalars and
        known (a superset is safe: only values outside it are never refused early)."""
        if not written:
            return None
        texts: list[bytes] = []
        for schema in written:
            values = self._domain_of(schema, 0)
            if values is None:
                return None
            texts.extend(values)
        return tuple(dict.fromkeys(texts))

    def longest(self, written: list[Any]) -> int | None:
        """The most characters a string item may have, when every schema written for it bounds it."""
        bounds = []
        for schema in written:
            for candidate in self.expand([schema]):
                if isinstance(candidate.get("maxLength"), int) and candidate.get("type") == "string":
                    bounds.append(candidate["maxLength"])
                    break
            else:
                return None
        return max(bounds) if bounds else None

    def _domain_of(self, schema: Any, hops: int) -> tuple[bytes, ...] | None:
        if not isinstance(schema, dict) or hops > 16:
            return None
        cached = self._domains.get(id(schema), False)
        if cached is not False:
            return cached  # type: ignore[return-value]
        values: list[Any] | None = None
        if "const" in schema:
            values = [schema["const"]]
        elif isinstance(schema.get("enum"), list):
            values = list(schema["enum"])
        elif schema.get("type") == "boolean":
            values = [True, False]
        elif schema.get("type") == "null":
            values = [None]
        elif schema.get("type") == "integer" and _small_range(schema):
            values = list(range(math.ceil(schema["minimum"]), math.floor(schema["maximum"]) + 1))
        result: tuple[bytes, ...] | None = None
        if values is not None:
            if all(v is None or isinstance(v, (str, int, float, bool)) for v in values):
                result = tuple(json.dumps(v, ensure_ascii=False).encode() for v in values)
        elif isinstance(schema.get("$ref"), str):
            try:
                result = self._domain_of(self._refs.lookup(schema["$ref"], ())[0], hops + 1)
            except SchemaError:
                result = None
        elif isinstance(schema.get("anyOf", schema.get("oneOf")), list):
            parts = [self._domain_of(branch, hops + 1) for branch in schema.get("anyOf", schema.get("oneOf"))]
            if all(part is not None for part in parts):
                result = tuple(dict.fromkeys(text for part in parts for text in part))  # type: ignore[union-attr]
        elif isinstance(schema.get("allOf"), list):
            for branch in schema["allOf"]:
                result = self._domain_of(branch, hops + 1)
                if result is not None:
                    break
        self._domains[id(schema)] = result
        return result


def _rebased(schema: Any, base: str) -> Any:
    """`schema` with its references inside itself pointing under `base` of a larger document."""
    if isinstance(schema, list):
        return [_rebased(item, base) for item in schema]
    if not isinstance(schema, dict):
        return schema
    rebased = {key: _rebased(value, base) for key, value in schema.items()}
    ref = schema.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        rebased["$ref"] = "#" + base + ref[1:]
    return rebased


def _small_range(schema: dict) -> bool:
    low, high = schema.get("minimum"), schema.get("maximum")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high))
    return numbers and high - low <= _SMALL_RANGE and "multipleOf" not in schema


def _matches(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False


class _Container:
    """An object or array being written."""

    __slots__ = ("is_array", "schemas", "start", "key", "expect_key", "index", "unique", "seen", "domain",
                 "item_start", "longest")

    def __init__(self, is_array: bool, schemas: tuple[dict, ...], start: int):
        self.is_array = is_array
        self.schemas = schemas
        self.start = start
        self.key: str | None = None
        self.expect_key = not is_array
        self.index = 0
        self.unique = is_array and any(s.get("uniqueItems") is True for s in schemas)
        self.seen: frozenset[str] = frozenset()
        self.domain: tuple[bytes, ...] | None = None
        self.longest: int | None = None  # the item's maxLength, when it is a string that has one
        self.item_start = -1

    def copy(self) -> _Container:
        twin = _Container.__new__(_Container)
        for name in _Container.__slots__:
            setattr(twin, name, getattr(self, name))
        return twin


_BEFORE, _JSON, _BETWEEN, _DONE = 0, 1, 2, 3
_NO_TOKEN, _STRING, _KEY, _SCALAR = 0, 1, 2, 3


class GuardState:
    """One sequence's position in its output. `advance` does not change the state it is called on."""

    __slots__ = ("guard", "phase", "before", "text", "stack", "lexeme", "escape", "value_start")

    def __init__(self, guard: UniqueItemsGuard):
        self.guard = guard
        self.phase = _BEFORE
        self.before = b""
        self.text = b""
        self.stack: list[_Container] = []
        self.lexeme = _NO_TOKEN
        self.escape = False
        self.value_start = -1

    def advance(self, piece: bytes) -> GuardState | None:
        """The state after `piece`, or None when `piece` would repeat an item of a unique array."""
        if self.phase == _DONE or not piece:
            return self
        twin = GuardState.__new__(GuardState)
        twin.guard, twin.phase, twin.before, twin.text = self.guard, self.phase, self.before, self.text
        twin.stack = [frame.copy() for frame in self.stack]
        twin.lexeme, twin.escape, twin.value_start = self.lexeme, self.escape, self.value_start
        return twin if twin._feed(piece) else None

    # ---- the text before the JSON value -------------------------------------------------------

    def _feed(self, piece: bytes) -> bool:
        if self.phase == _BEFORE:
            self.before += piece
            start = self._json_start()
            if start is None:
                return True
            piece, self.before, self.phase = self.before[start:], b"", _BETWEEN if self.guard.calls else _JSON
        while piece:
            if self.phase == _BETWEEN:  # calls: text up to the next object or array
                starts = [i for i in (piece.find(b"{"), piece.find(b"[")) if i >= 0]
                if not starts:
                    return True
                piece, self.text, self.phase = piece[min(starts):], b"", _JSON
            piece = self._scan(piece)
            if piece is None:
                return False
        return True

    def _json_start(self) -> int | None:
        """Where the JSON value begins in the text so far (None: not known yet)."""
        guard, text = self.guard, self.before
        position = 0
        if guard.reasoning_end is not None:
            opening = guard.reasoning_start
            if opening is None or text.startswith(opening):
                end = text.find(guard.reasoning_end, len(opening or b""))
                if end < 0:
                    return None
                position = end + len(guard.reasoning_end)
            elif opening.startswith(text):
                return None
        while position < len(text) and text[position] in _WHITESPACE:
            position += 1
        if guard.opener and guard.calls:
            found = text.find(guard.opener, position)
            return None if found < 0 else found + len(guard.opener)
        if guard.opener:
            rest = text[position:]
            if len(rest) < len(guard.opener):
                return None if guard.opener.startswith(rest) else position
            if rest.startswith(guard.opener):
                position += len(guard.opener)
        return position

    # ---- the JSON value -----------------------------------------------------------------------

    def _scan(self, piece: bytes) -> bytes | None:
        """Read `piece` into the value: None when it repeats an item, else what follows the value
        (when it ended inside the piece)."""
        offset = len(self.text)
        self.text += piece
        for i, byte in enumerate(piece):
            if not self._byte(byte, offset + i):
                return None
            if self.phase != _JSON:
                if self.guard.calls:
                    self.phase = _BETWEEN
                    return piece[i + 1:]
                return b""
        return b"" if self._may_go_on() else None

    def _byte(self, byte: int, at: int) -> bool:
        lexeme = self.lexeme
        if lexeme == _STRING or lexeme == _KEY:
            if self.escape:
                self.escape = False
            elif byte == 0x5C:  # backslash
                self.escape = True
            elif byte == 0x22:  # closing quote
                self.lexeme = _NO_TOKEN
                if lexeme == _KEY:
                    try:
                        self.stack[-1].key = json.loads(self.text[self.value_start:at + 1])
                    except ValueError:
                        self.stack[-1].key = None
                    return True
                return self._complete(self.value_start, at + 1)
            return True
        if lexeme == _SCALAR:
            if byte in _SCALAR_BYTES:
                return True
            self.lexeme = _NO_TOKEN
            if not self._complete(self.value_start, at):
                return False
            if self.phase == _DONE:
                return True
        if byte in _WHITESPACE:
            return True
        top = self.stack[-1] if self.stack else None
        if byte == 0x7B or byte == 0x5B:  # { [
            schemas = self._begin_value(at)
            self.stack.append(_Container(byte == 0x5B, schemas, at))
        elif byte == 0x22:  # opening quote
            if top is not None and top.expect_key:
                self.lexeme = _KEY
            else:
                self._begin_value(at)
                self.lexeme = _STRING
            self.value_start = at
        elif byte == 0x3A:  # :
            if top is not None:
                top.expect_key = False
        elif byte == 0x2C:  # ,
            if top is not None:
                if top.is_array:
                    top.index += 1
                else:
                    top.expect_key, top.key = True, None
        elif byte == 0x7D or byte == 0x5D:  # } ]
            if top is not None:
                self.stack.pop()
                return self._complete(top.start, at + 1)
        else:
            self._begin_value(at)
            self.lexeme = _SCALAR
            self.value_start = at
        return True

    def _begin_value(self, at: int) -> tuple[dict, ...]:
        """The schemas that apply to a value starting at `at` (and note the item it is)."""
        guard = self.guard
        if not self.stack:
            return guard.root
        top = self.stack[-1]
        if not top.is_array:
            return guard.member(top.schemas, top.key) if top.key is not None else _NONE
        written, schemas = guard.item(top.schemas, top.index)
        if top.unique:
            top.item_start = at
            top.domain = guard.domain(written)
            top.longest = guard.longest(written) if top.domain is None else None
        return schemas

    def _complete(self, start: int, end: int) -> bool:
        """A value ended: False when it repeats an item of its unique array."""
        if not self.stack:
            self.phase = _DONE
            return True
        top = self.stack[-1]
        if not top.unique or top.item_start != start:
            return True
        key = item_key(self.text[start:end])
        top.item_start = -1
        if key is None:
            return True
        if key in top.seen:
            return False
        top.seen = top.seen | {key}
        return True

    def _may_go_on(self) -> bool:
        """Whether the item being written can still become one the array does not have."""
        if self.lexeme not in (_STRING, _SCALAR) or not self.stack:
            return True
        top = self.stack[-1]
        if not top.unique or top.item_start != self.value_start:
            return True
        written = self.text[self.value_start:]
        if top.domain is not None:
            return any(text.startswith(written) and item_key(text) not in top.seen for text in top.domain)
        if top.longest is not None and self.lexeme == _STRING and not self.escape:
            # a string at its maxLength can only close: not when it would close on a taken value
            whole = written + b'"'
            try:
                full = len(json.loads(whole)) >= top.longest
            except ValueError:
                return True
            return not full or item_key(whole) not in top.seen
        return True
