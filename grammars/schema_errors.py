"""The one error a schema conversion raises: which keyword, where, and why."""

from __future__ import annotations


def pointer(path: tuple[str | int, ...]) -> str:
    """A JSON Pointer ("" is the whole schema)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


class SchemaError(ValueError):
    """A schema Fireside cannot turn into an exact grammar, so it refuses it (fails closed)."""

    def __init__(self, keyword: str, path: tuple[str | int, ...], reason: str):
        self.keyword = keyword
        self.path = pointer(path)
        self.reason = reason
        super().__init__(f"{reason} (keyword `{keyword}` at {self.path or '/'})")


class Unsatisfiable(SchemaError):
    """A schema (or part of one) that no value satisfies: an alternative that says so is left
    out, a whole schema that says so is refused."""
