"""GBNF grammars through llama.cpp's grammar sampler: compiling, checking and advancing.

A `CompiledGrammar` is parsed once (and cached by its text); every sequence that samples under
it gets its own `GrammarState`, a clone that advances with the tokens the sequence accepts.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import tempfile
import threading
from collections import OrderedDict

import llama_cpp

from backends.llama_model import init_backend

_NEG_INF = float("-inf")


class GrammarError(Exception):
    """A grammar that llama.cpp's parser rejects; the message is the parser's own."""


_stderr_lock = threading.Lock()


def _parse_with_messages(vocab: llama_cpp.llama_vocab_p, text: bytes, root: bytes) -> tuple[int | None, str]:
    """llama.cpp prints grammar syntax errors to stderr, and other grammar errors (no root,
    left recursion) to its log: stderr's file descriptor is pointed at a temporary file for
    the call, and any other output that lands there meanwhile is passed on on success."""
    with init_backend().thread_errors() as logged:
        handle, output = _parse_capturing_stderr(vocab, text, root)
    return handle, output + "\n".join(logged)


def _parse_capturing_stderr(vocab: llama_cpp.llama_vocab_p, text: bytes, root: bytes) -> tuple[int | None, str]:
    with _stderr_lock, tempfile.TemporaryFile() as capture:
        sys.stderr.flush()
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all (a detached service): no message either
            handle = llama_cpp.llama_sampler_init_grammar(vocab, text, root)
            return (handle or None), ""
        os.dup2(capture.fileno(), 2)
        try:
            handle = llama_cpp.llama_sampler_init_grammar(vocab, text, root)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        output = capture.read().decode("utf-8", errors="replace")
    if handle:
        if output:
            sys.stderr.write(output)
        return handle, ""
    return None, output


_PARSER_MESSAGE = re.compile(r"error parsing grammar: (.*?)(?:\n\n|$)", re.S)


def _parser_message(output: str) -> str:
    found = _PARSER_MESSAGE.search(output)
    if found:
        return found.group(1).strip()
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[0] if lines else "llama.cpp could not parse the grammar"


class CompiledGrammar:
    """A parsed grammar that is never advanced itself; `start` gives each sequence its own."""

    __slots__ = ("text", "_handle", "__weakref__")

    def __init__(self, vocab: llama_cpp.llama_vocab_p, text: str, root: str = "root"):
        self.text = text
        if "\x00" in text:
            raise GrammarError("the grammar contains a NUL character")
        handle, output = _parse_with_messages(vocab, text.encode(), root.encode())
        if not handle:
            raise GrammarError(_parser_message(output))
        self._handle = handle

    def start(self) -> GrammarState:
        return GrammarState(llama_cpp.llama_sampler_clone(self._handle))

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            llama_cpp.llama_sampler_free(handle)


class GrammarState:
    """One sequence's position in its grammar. Used on the scheduler thread only."""

    __slots__ = ("_handle", "_one", "_one_array")

    def __init__(self, handle: llama_cpp.llama_sampler_p):
        self._handle = handle
        self._one = llama_cpp.llama_token_data(0, 0.0, 0.0)
        self._one_array = llama_cpp.llama_token_data_array(ctypes.pointer(self._one), 1, -1, False)

    def allows(self, token: int) -> bool:
        """Whether the grammar can take `token` next (an end-of-generation token: whether the
        grammar may end here)."""
        self._one.id, self._one.logit = token, 0.0
        self._one_array.size = 1
        llama_cpp.llama_sampler_apply(self._handle, ctypes.byref(self._one_array))
        return self._one.logit != _NEG_INF

    def constrain(self, candidates: llama_cpp.llama_token_data_array) -> None:
        """Set the logit of every candidate the grammar rejects to -inf."""
        llama_cpp.llama_sampler_apply(self._handle, ctypes.byref(candidates))

    def accept(self, token: int) -> None:
        """Advance past `token`, which `allows` must have approved (llama.cpp aborts otherwise)."""
        llama_cpp.llama_sampler_accept(self._handle, token)

    def close(self) -> None:
        if self._handle:
            llama_cpp.llama_sampler_free(self._handle)
            self._handle = None


class GrammarCache:
    """Compiled grammars of one model by text, least recently used dropped first. Thread-safe;
    a grammar dropped while a request still holds it lives until that request lets go."""

    def __init__(self, vocab: llama_cpp.llama_vocab_p, capacity: int = 64):
        self._vocab = vocab
        self._capacity = capacity
        self._grammars: OrderedDict[tuple[str, str], CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str, root: str = "root") -> CompiledGrammar:
        key = (root, text)
        with self._lock:
            grammar = self._grammars.get(key)
            if grammar is not None:
                self._grammars.move_to_end(key)
                return grammar
        grammar = CompiledGrammar(self._vocab, text, root)
        with self._lock:
            self._grammars[key] = grammar
            while len(self._grammars) > self._capacity:
                self._grammars.popitem(last=False)
        return grammar
