"""Where things are in a TOML file, for error messages that name the line: `config.toml:7:`.

tomlkit keeps a file's comments and layout but not its positions, so lines are found by reading
the text the way TOML lays it out: a `[table]` or `[[array]]` header opens a table, `key =` or
`a.b =` sets a key in it. The first line that sets a key wins; a key that cannot be placed (set
inside an inline table, say) is given the line of the nearest table that can.
"""

from __future__ import annotations

import re
from pathlib import Path

from tomlkit.exceptions import ParseError, TOMLKitError

Key = tuple[str | int, ...]  # ("models", 0, "sampling", "temperature")

_BARE_OR_QUOTED = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_DOTTED = rf"{_BARE_OR_QUOTED}(?:\s*\.\s*{_BARE_OR_QUOTED})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGNMENT = re.compile(rf"^\s*({_DOTTED})\s*=")
_PART = re.compile(_BARE_OR_QUOTED)
_AT_LINE = re.compile(r"\s+at line \d+ col \d+$")


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(part.strip("\"'") for part in _PART.findall(dotted))


def key_name(key: Key) -> str:
    """`models[0].sampling.temperature`."""
    text = ""
    for part in key:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


class Places:
    """The line of each key and table header of one TOML text."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.text = text
        self.lines: dict[Key, int] = {}
        self.repeated: list[tuple[Key, int]] = []  # a key set again: its second line
        arrays: dict[tuple[str, ...], int] = {}  # [[name]]: the index of its last table
        table: Key = ()
        for number, line in enumerate(text.splitlines(), 1):
            header = _HEADER.match(line)
            if header:
                names = _parts(header[2])
                if header[1] == "[[":
                    arrays[names] = arrays.get(names, -1) + 1
                table = self._resolve(names, arrays)
                self.lines.setdefault(table, number)
                continue
            assignment = _ASSIGNMENT.match(line)
            if assignment:
                key = (*table, *_parts(assignment[1]))
                if key in self.lines:
                    self.repeated.append((key, number))
                self.lines.setdefault(key, number)

    @staticmethod
    def _resolve(names: tuple[str, ...], arrays: dict[tuple[str, ...], int]) -> Key:
        """`[models.sampling]` after two `[[models]]`: ("models", 1, "sampling")."""
        key: list[str | int] = []
        for end in range(1, len(names) + 1):
            key.append(names[end - 1])
            if names[:end] in arrays:
                key.append(arrays[names[:end]])
        return tuple(key)

    def line(self, key: Key) -> int | None:
        """The line that sets `key`, else the line of the closest table around it."""
        for end in range(len(key), 0, -1):
            if key[:end] in self.lines:
                return self.lines[key[:end]]
        return None

    def where(self, key: Key, *, line_of: Key | None = None) -> str:
        """`config.toml:7: models[0].gpu_layers`: the file, the line of `line_of` (default: the
        key's own), and the key's name."""
        line = self.line(key if line_of is None else line_of)
        place = f"{self.path}:{line}" if line else str(self.path)
        return f"{place}: {key_name(key)}" if key else place

    def syntax_error(self, error: TOMLKitError) -> str:
        """A parse error as `config.toml:4: invalid TOML at column 7: ...`, with the line's text."""
        line, column = (error.line, error.col) if isinstance(error, ParseError) else (None, None)
        reason = _AT_LINE.sub("", str(error))
        if reason.startswith("Unexpected character: '\\x00'"):
            reason = "unexpected end of file"
        # A key set twice: tomlkit before 0.15.3 gives no line for it, later ones the line and
        # `Key "id" already exists`; either way the message names the key by its whole path.
        if self.repeated and (line is None or line == self.repeated[0][1]):
            key, line = self.repeated[0]
            reason, column = f"{key_name(key)} is set twice", None
        if line is None:
            return f"{self.path}: invalid TOML: {reason}"
        source = self.text.splitlines()[line - 1] if 0 < line <= len(self.text.splitlines()) else ""
        at = f" at column {column}" if column else ""
        return f"{self.path}:{line}: invalid TOML{at}: {reason}\n    {line} | {source}"
