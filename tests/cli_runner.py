"""`fireside ARGS` run in this process: its exit status and what it printed, without a new Python
process (each of those spends about a second importing before it checks anything).

For the checks that need no running server: argument errors, refusals, `models`, `rm`, `template`,
`doctor`. The run is as close to the real command's as one process allows:

- its output: file descriptors 1 and 2 go to temporary files for the run, and `sys.stdout` /
  `sys.stderr` write there too, so what native code (llama.cpp) writes to them is caught as well,
  in order with Python's (a subprocess's `capture_output` would see it too);
- `SystemExit` (argparse's errors, `--help`) becomes the exit status, as the interpreter makes it;
  any other exception propagates (a real run would print a traceback: the test fails either way);
- the environment is what `env` makes it during the run (None removes a variable), then as it was;
- logging starts as in a fresh process (no root handlers, so `serve`'s `logging.basicConfig` takes
  effect and logs to the run's stderr), and the root logger, the loggers' levels, the SIGINT /
  SIGTERM handlers and the working directory are put back afterwards.

What must stay a real process: a `fireside serve` that starts listening, anything killed or signalled,
anything that changes the process itself (`os._exit`, rlimits), and a few smoke tests of the console
script itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self, TextIO


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*argv: str | os.PathLike[str], env: Mapping[str, str | None] | None = None) -> CliResult:
    """`fireside ARGV` in this process (`app.cli.main`), with `env` over `os.environ` meanwhile."""
    from app.cli import main

    with contextlib.ExitStack() as stack:
        stack.enter_context(_environment(env or {}))
        stack.enter_context(_process_state())
        out = stack.enter_context(_Captured(1, "stdout"))
        err = stack.enter_context(_Captured(2, "stderr"))
        try:
            code = main([os.fspath(arg) for arg in argv])
        except SystemExit as exit_:
            code = _exit_status(exit_.code)
    return CliResult(code, out.text, err.text)


def _exit_status(code: Any) -> int:
    """The status the interpreter exits with for `sys.exit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # a message: printed, status 1
    return 1


@contextlib.contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """`env` over `os.environ` (None: removed) during the run; afterwards the environment as it
    was, whatever the run set."""
    saved = dict(os.environ)
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        for name, value in saved.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


@contextlib.contextmanager
def _process_state() -> Iterator[None]:
    """Logging as a fresh process has it, then the logging, signal handlers and working directory
    as they were."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logger.level for name, logger in logging.Logger.manager.loggerDict.items()
              if isinstance(logger, logging.Logger)}
    signals = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    cwd = os.getcwd()
    root.handlers = []
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers, root.level = handlers, level
        for name, saved in levels.items():
            logging.getLogger(name).setLevel(saved)
        for number, handler in signals.items():
            if handler is not None:
                signal.signal(number, handler)
        os.chdir(cwd)


def _flush_native() -> None:
    """Whatever C stdio holds for the descriptors, written before they are swapped."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


class _Captured:
    """File descriptor `fd` and `sys.<name>` sent to one temporary file for the run; `text` after it."""

    def __init__(self, fd: int, name: str):
        self.fd, self.name, self.text = fd, name, ""

    def __enter__(self) -> Self:
        self._saved_stream: TextIO = getattr(sys, self.name)
        self._saved_stream.flush()
        _flush_native()
        self._file = tempfile.TemporaryFile()
        self._saved_fd = os.dup(self.fd)
        os.dup2(self._file.fileno(), self.fd)
        self._stream = io.TextIOWrapper(io.FileIO(self.fd, "w", closefd=False), encoding="utf-8",
                                        errors="replace", line_buffering=True)
        setattr(sys, self.name, self._stream)
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self._stream.flush()
            _flush_native()
        finally:
            setattr(sys, self.name, self._saved_stream)
            os.dup2(self._saved_fd, self.fd)
            os.close(self._saved_fd)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", errors="replace")
        self._file.close()
