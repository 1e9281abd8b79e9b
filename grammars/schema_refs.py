"""References inside one schema: `$ref` by JSON Pointer or `$anchor`, relative to the root's base
URI (`$id`, draft-04's `id`), and to the resources the schema embeds under their own `$id`
(bundled schemas). Remote references are refused; a grammar cannot fetch."""

from __future__ import annotations

import urllib.parse
from typing import Any

from grammars.schema_errors import SchemaError, pointer
from grammars.schema_keywords import Dialect, schema_objects

Path = tuple[str | int, ...]


class SchemaRefs:
    """Looks up the targets of `$ref` in `root`."""

    def __init__(self, root: Any, dialect: Dialect):
        self.root = root
        self.id_keyword = dialect.id_keyword
        self.ref_overrides_siblings = dialect.ref_overrides_siblings  # up to draft-07 an `$id` beside `$ref` is not one
        base = root.get(self.id_keyword) if isinstance(root, dict) else None
        self.base = base if isinstance(base, str) and base else None
        self._resources: dict[str, tuple[Any, Path]] | None = None

    def resources(self) -> dict[str, tuple[Any, Path, str]]:
        """Every embedded resource by its absolute URI (and by its `$id` as written): the schema,
        its path and its base URI."""
        if self._resources is None:
            found: dict[str, tuple[Any, Path, str]] = {}
            stack: list[tuple[Any, Path, str]] = [(self.root, (), self.base or "")]
            while stack:
                node, where, base = stack.pop()
                if isinstance(node, dict):
                    given = node.get(self.id_keyword)
                    if (isinstance(given, str) and given and not given.startswith("#") and where
                            and not (self.ref_overrides_siblings and "$ref" in node)):
                        base = urllib.parse.urljoin(base, given)
                        found.setdefault(base.split("#")[0], (node, where, base))
                        found.setdefault(given.split("#")[0], (node, where, base))
                    stack.extend((v, (*where, k), base) for k, v in node.items()
                                 if k not in ("enum", "const", "examples", "default"))
                elif isinstance(node, list):
                    stack.extend((v, (*where, i), base) for i, v in enumerate(node))
            self._resources = found
        return self._resources

    def _enclosing(self, path: Path) -> tuple[Any, Path, str]:
        """The innermost resource (the root, or an embedded one) that holds the schema at `path`."""
        best: tuple[Any, Path, str] = (self.root, (), self.base or "")
        for node, where, base in self.resources().values():
            if len(where) > len(best[1]) and path[:len(where)] == where:
                best = (node, where, base)
        return best

    def count_anchor(self, keyword: str, value: Any) -> int:
        """How many schemas in the document declare `keyword: value`."""
        return sum(1 for node in schema_objects(self.root)
                   if node.get(keyword) == value and isinstance(node.get(keyword), bool) == isinstance(value, bool))

    def lookup(self, ref: Any, path: Path) -> tuple[Any, Path, str]:
        """The schema a `$ref` at `path` points to, its path, and a key naming it."""
        if not isinstance(ref, str):
            raise SchemaError("$ref", path, "`$ref` must be a string")
        start, start_where, base = self._enclosing(path)
        uri, _, fragment_part = ref.partition("#")
        if uri:
            absolute = urllib.parse.urljoin(base, uri).split("#")[0]
            if absolute != base.split("#")[0]:
                resource = self.resources().get(absolute) or self.resources().get(uri)
                if resource is None and absolute == (self.base or "").split("#")[0]:
                    resource = (self.root, (), self.base or "")
                if resource is None:
                    raise SchemaError("$ref", path,
                                      f"`{ref}` is a remote reference; only references inside the schema are followed")
                start, start_where = resource[0], resource[1]
        ref = "#" + fragment_part
        fragment = urllib.parse.unquote(ref[1:])
        if fragment and not fragment.startswith("/"):
            return self.anchor(fragment, ref, path, start, start_where)
        node, where = start, start_where
        for raw in fragment.split("/")[1:] if fragment else []:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node, where = node[part], (*where, part)
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node, where = node[int(part)], (*where, int(part))
            else:
                raise SchemaError("$ref", path, f"`{ref}` points to nothing in the schema")
        return node, where, "#" + pointer(where)

    def anchor(self, name: str, ref: str, path: Path, start: Any = None,
               start_where: Path = ()) -> tuple[Any, Path, str]:
        stack: list[tuple[Any, Path]] = [(self.root if start is None else start, start_where)]
        while stack:
            node, where = stack.pop()
            if isinstance(node, dict):
                if node.get("$anchor") == name or node.get("$dynamicAnchor") == name:
                    return node, where, "#" + pointer(where)
                stack.extend((v, (*where, k)) for k, v in node.items())
            elif isinstance(node, list):
                stack.extend((v, (*where, i)) for i, v in enumerate(node))
        raise SchemaError("$ref", path, f"`{ref}` names no `$anchor` in the schema")
