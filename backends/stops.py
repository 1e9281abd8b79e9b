"""Stop sequences over streamed text.

Text arrives a piece at a time; a stop sequence may span pieces. The matcher releases only text
that can no longer be the start of a stop sequence and holds the rest back, so released text
never contains any part of a stop sequence that later completes.
"""

from __future__ import annotations


class StopMatcher:
    __slots__ = ("_held", "_longest", "_stops", "matched")

    def __init__(self, stops: tuple[str, ...]):
        self._stops = tuple(s for s in stops if s)
        self._longest = max((len(s) for s in self._stops), default=0)
        self._held = ""
        self.matched: str | None = None  # the stop sequence that ended the text, once one has

    def feed(self, piece: str) -> tuple[str, bool]:
        """Add a piece; return (text safe to release, whether a stop sequence was hit)."""
        if not self._stops:
            return piece, False
        text = self._held + piece
        # A stop can only complete inside the new piece plus what was held back.
        found = [(i, -len(s), s) for s in self._stops if (i := text.find(s)) >= 0]
        if found:
            cut, _, self.matched = min(found)  # the earliest; of those starting there, the longest
            self._held = ""
            return text[:cut], True
        keep = self._partial_suffix(text)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep], False

    def flush(self) -> str:
        """Release what was held back (generation ended without completing a stop)."""
        held, self._held = self._held, ""
        return held

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop sequence."""
        for size in range(min(len(text), self._longest - 1), 0, -1):
            tail = text[-size:]
            if any(s.startswith(tail) for s in self._stops):
                return size
        return 0
