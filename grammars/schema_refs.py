"""References inside one schema: `$ref` by JSON Pointer or `$anchor`, relative to the root's base
URI (`$id`, draft-04's `id`). Remote references are refused; a grammar cannot fetch."""

from __future__ import annotations

import urllib.parse
from typing import Any

from grammars.schema_errors import SchemaError
from grammars.schema_keywords import Dialect

Path = tuple[str | int, ...]


class SchemaRefs:
    """Looks up the targets of `$ref` in `root`."""

    def __init__(self, root: Any, dialect: Dialect):
        self.root = root
        base = root.get(dialect.id_keyword) if isinstance(root, dict) else None
        self.base = base if isinstance(base, str) and base else None

    def lookup(self, ref: Any, path: Path) -> tuple[Any, Path, str]:
        """The schema a `$ref` points to, its path, and a key naming it."""
        if not isinstance(ref, str):
            raise SchemaError("$ref", path, "`$ref` must be a string")
        if self.base is not None and ref.startswith(self.base):
            ref = ref[len(self.base):]
        if not ref.startswith("#") and ref != "":
            raise SchemaError("$ref", path, f"`{ref}` is a remote reference; only references inside the schema are followed")
        fragment = urllib.parse.unquote(ref[1:])
        if fragment and not fragment.startswith("/"):
            return self.anchor(fragment, ref, path)
        node, where = self.root, ()
        for raw in fragment.split("/")[1:] if fragment else []:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node, where = node[part], (*where, part)
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node, where = node[int(part)], (*where, int(part))
            else:
                raise SchemaError("$ref", path, f"`{ref}` points to nothing in the schema")
        return node, where, "#" + fragment

    def anchor(self, name: str, ref: str, path: Path) -> tuple[Any, Path, str]:
        stack: list[tuple[Any, Path]] = [(self.root, ())]
        while stack:
            node, where = stack.pop()
            if isinstance(node, dict):
                if node.get("$anchor") == name:
                    return node, where, "#" + name
                stack.extend((v, (*where, k)) for k, v in node.items())
            elif isinstance(node, list):
                stack.extend((v, (*where, i)) for i, v in enumerate(node))
        raise SchemaError("$ref", path, f"`{ref}` names no `$anchor` in the schema")
