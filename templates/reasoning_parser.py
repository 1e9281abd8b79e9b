"""Splitting a model's streamed output into reasoning and content.

`ReasoningParser` is configured by a family's markers (`<think>`/`</think>`, `[THINK]`/`[/THINK]`,
...); `ChannelParser` reads message-per-channel formats (OpenAI's harmony). Both take text pieces
as the engine produces them and release `("reasoning" | "content", text)` pieces as soon as no
marker can still be forming at their end; markers themselves never reach either field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Piece = tuple[str, str]


class ReasoningParser:
    """Reasoning between `start` and `end` markers, content elsewhere.

    Without markers every piece is content, unchanged. With them:
    - text before the start marker is content; `in_reasoning` starts inside the block (the prompt opened it);
    - one block per generation, as vLLM and llama.cpp read it: once it closes, the rest is content,
      where the same tags are plain text (an answer may well talk about `<think>`);
    - a stray end marker before the block, or a repeated start marker inside it, is dropped;
    - `drop` lists markers that wrap the answer (`<|START_RESPONSE|>`, ...), removed from content;
    - whitespace is dropped at the edges of the reasoning, at the start of content and around
      dropped markers (the model's layout, not its text);
    - output that ends inside reasoning stays reasoning.
    """

    def __init__(self, start: str | None = None, end: str | None = None, *, in_reasoning: bool = False,
                 drop: Iterable[str] = ()):
        self.start = start or None
        self.end = end or None
        self.drop = tuple(marker for marker in drop if marker)
        self.in_reasoning = in_reasoning and self.end is not None
        self.closed = False  # the reasoning block has ended
        self.passthrough = self.end is None and not self.drop
        self._buffer = ""
        self._strip = self.end is not None  # drop whitespace until the current segment has text
        self._held = ""  # trailing whitespace, released only if more text of the same segment follows

    def feed(self, text: str) -> list[Piece]:
        if self.passthrough:
            return [("content", text)] if text else []
        self._buffer += text
        return self._drain(final=False)

    def finish(self) -> list[Piece]:
        pieces = self._drain(final=True)
        if self._held and not self.in_reasoning:
            pieces = merge([*pieces, ("content", self._held)])
        self._held = ""
        return pieces

    def _markers(self) -> tuple[str, ...]:
        if self.in_reasoning:
            return tuple(m for m in (self.end, self.start) if m)
        if self.closed:
            return self.drop
        return tuple(m for m in (self.start, self.end) if m) + self.drop

    def _drain(self, final: bool) -> list[Piece]:
        out: list[Piece] = []
        while self._buffer:
            markers = self._markers()
            index, marker = find_first(self._buffer, markers)
            if marker is None:
                keep = 0 if final else partial_marker_length(self._buffer, markers)
                cut = len(self._buffer) - keep
                self._emit(out, self._buffer[:cut])
                self._buffer = self._buffer[cut:]
                break
            self._emit(out, self._buffer[:index])
            self._buffer = self._buffer[index + len(marker):]
            self._on_marker(marker)
        return merge(out)

    def _on_marker(self, marker: str) -> None:
        if self.in_reasoning:
            if marker == self.end:
                self.in_reasoning, self.closed = False, True
                self._strip, self._held = True, ""
        elif marker == self.start and not self.closed:
            self.in_reasoning, self._strip, self._held = True, True, ""
        elif marker in self.drop:
            self._strip, self._held = True, ""

    def _emit(self, out: list[Piece], text: str) -> None:
        if self._strip:
            text = text.lstrip()
            if not text:
                return
            self._strip = False
        text = self._held + text
        body = text.rstrip()
        self._held = text[len(body):]
        if body:
            out.append(("reasoning" if self.in_reasoning else "content", body))


class OpeningMarkerParser(ReasoningParser):
    """Reasoning for a model no family describes: a block that opens the output with any of
    `pairs`' start markers (leading whitespace allowed) is reasoning up to that pair's end marker;
    output that opens otherwise is content, unchanged, markers and all."""

    def __init__(self, pairs: Iterable[tuple[str, str]]):
        super().__init__()
        self.passthrough = False
        self._pairs = tuple(pairs)
        self._deciding = True

    def feed(self, text: str) -> list[Piece]:
        if not self._deciding:
            return super().feed(text)
        self._buffer += text
        return self._decide(final=False)

    def finish(self) -> list[Piece]:
        if self._deciding:
            return self._decide(final=True) + super().finish()
        return super().finish()

    def _decide(self, final: bool) -> list[Piece]:
        head = self._buffer.lstrip()
        for start, end in self._pairs:
            if head.startswith(start):
                self._deciding, self.start, self.end, self._strip = False, start, end, True
                return self._drain(final)
        if not final and (not head or any(start.startswith(head) for start, _ in self._pairs)):
            return []
        self._deciding, self.passthrough = False, True
        text, self._buffer = self._buffer, ""
        return [("content", text)] if text else []


class ChannelParser(ReasoningParser):
    """Messages of the form `HEADER<|message|>BODY<terminator>`, one channel each (harmony).

    `classify(header)` says what a body is: "reasoning", "content", or "raw" (a message for a
    tool: passed on whole, header and terminator included, as content for the tool-call parser).
    `header` is the part of a header the prompt already wrote (`<|start|>assistant`); `kind`
    the body the prompt already opened, if any.
    """

    def __init__(self, classify: Callable[[str], str], *, terminators: tuple[str, ...],
                 header_starts: tuple[str, ...], message: str = "<|message|>", header: str = "",
                 kind: str | None = None):
        super().__init__()
        self.passthrough = False
        self.classify = classify
        self.terminators = terminators
        self.header_starts = header_starts
        self.message = message
        self._header = header
        self._prompt_part = len(header)  # the start of `_header` that the prompt wrote, not the model
        self._kind = kind

    def _drain(self, final: bool) -> list[Piece]:
        out: list[Piece] = []
        while self._buffer:
            if self._kind is None:
                header = self._header + self._buffer
                index = header.find(self.message)
                if index < 0:
                    self._header, self._buffer = header, ""
                    break
                self._header, self._buffer = header[:index], header[index + len(self.message):]
                self._kind = self.classify(self._header)
                if self._kind == "raw":
                    out.append(("content", self._header + self.message))
                self._header, self._prompt_part = "", 0
                continue
            markers = self.terminators + self.header_starts
            index, marker = find_first(self._buffer, markers)
            if marker is None:
                keep = 0 if final else partial_marker_length(self._buffer, markers)
                cut = len(self._buffer) - keep
                self._emit_body(out, self._buffer[:cut])
                self._buffer = self._buffer[cut:]
                break
            self._emit_body(out, self._buffer[:index])
            self._buffer = self._buffer[index + len(marker):]
            if marker in self.terminators:
                if self._kind == "raw":
                    out.append(("content", marker))
                self._header = ""
            else:
                self._header = marker
            self._kind = None
        if final and self._kind is None:
            # Output without any channel markup (the model ignored the format) is the answer itself;
            # an unfinished header is dropped.
            text = self._header[self._prompt_part:]
            if text.strip() and "<|" not in text and not text.lstrip().startswith("to="):
                out.append(("content", text))
            self._header, self._prompt_part = "", 0
        return merge(out)

    def _emit_body(self, out: list[Piece], text: str) -> None:
        if text:
            out.append(("reasoning" if self._kind == "reasoning" else "content", text))


def find_first(text: str, markers: Iterable[str]) -> tuple[int, str | None]:
    """The earliest marker in `text` (the longest one where several start at the same place)."""
    best, found = len(text), None
    for marker in markers:
        index = text.find(marker)
        if index >= 0 and (index < best or (index == best and found is not None and len(marker) > len(found))):
            best, found = index, marker
    return (best, found) if found is not None else (-1, None)


def partial_marker_length(text: str, markers: Iterable[str]) -> int:
    """How many characters at the end of `text` could be the beginning of a marker."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if marker.startswith(text[-size:]):
                longest = size
                break
    return longest


def merge(pieces: list[Piece]) -> list[Piece]:
    """Adjacent pieces of the same kind joined."""
    merged: list[Piece] = []
    for kind, text in pieces:
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + text)
        else:
            merged.append((kind, text))
    return merged
