"""llama.cpp's extra CPU buffer types, and the way back from them where they crash.

Loading a model, llama.cpp may put CPU weights in "extra" buffer types that repack them for the
CPU's matrix units: AMX tiles on Xeons with AMX (Sapphire Rapids and later), interleaved blocks
for AVX2 and NEON (`CPU_REPACK`). On AMX hosts the AMX buffers crash the process at its first
decode (llama.cpp issue 20824; Ollama issues 17205 and 17249: every model). Loading with
`use_extra_bufts = false` (llama-server's `--no-repack`) serves correctly there.

`RepackPolicy` decides per model file: off when the operator says so (`--no-repack`, config
`cpu_repack = false`); else the verdict remembered for this file and llama.cpp build; else, on a
host whose CPU and build both have AMX, a canary (backends/cpu_canary.py: the model loaded as it
will be, one batch decoded, in a child process) finds out, and its verdict is remembered in the
data folder. Elsewhere nothing is tried: repacking is llama.cpp's default and pays.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("fireside.load")

REPACK_VERDICTS = "cpu-repack.json"  # in the data folder
CANARY_TIMEOUT = 600.0  # seconds: a large model's load from a cold disk


def host_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU has AMX (Linux reports `amx_tile`; other systems never use ggml's AMX)."""
    try:
        with cpuinfo.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if line.startswith("flags"):
                    return "amx_tile" in line.split()
    except OSError:
        return False
    return False


def build_has_amx() -> bool:
    """Whether the llama.cpp build's CPU backend was compiled with AMX."""
    import llama_cpp

    from backends.llama_log import init_backend

    init_backend()
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    return "AMX_INT8 = 1" in info


def build_id() -> str:
    """The llama.cpp build: llama-cpp-python's version and what the backend says it was built for."""
    import llama_cpp

    from backends.llama_log import init_backend

    init_backend()
    info = llama_cpp.llama_print_system_info()
    return f"{llama_cpp.__version__}:{hashlib.sha256(info).hexdigest()[:16]}"


def file_id(path: Path) -> str:
    """A model file as it is now: its place, size and time of change (a replaced file is new)."""
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


@dataclass(frozen=True)
class CanaryResult:
    serves: bool  # the load and one batch's decode finished
    reason: str  # "served", or how the child ended ("SIGSEGV", "exit code 3", "timed out after 600 s")
    extra_buffers: tuple[str, ...] = ()  # the extra buffer types the load used ("AMX", "CPU_REPACK")


def run_canary(path: Path, *, gpu_layers: int = 0, repack: bool = True, threads: int = 1,
               timeout: float = CANARY_TIMEOUT, command: list[str] | None = None) -> CanaryResult:
    """Load `path` and decode one batch in a child process; how it ended. `command` replaces the
    child's command line (the tests' crashing stand-in)."""
    argv = command or [sys.executable, "-m", "backends.cpu_canary", str(path), "--gpu-layers", str(gpu_layers),
                       "--threads", str(threads), *([] if repack else ["--no-repack"])]
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return CanaryResult(False, f"timed out after {timeout:g} s")
    lines = done.stdout.strip().splitlines()
    buffers = tuple(lines[-1].removeprefix("extra buffers:").split()) if lines and lines[-1].startswith(
        "extra buffers:") else ()
    if done.returncode == 0:
        return CanaryResult(True, "served", buffers)
    return CanaryResult(False, exit_reason(done.returncode), buffers)


def exit_reason(returncode: int) -> str:
    """How a child process ended, in words: `SIGSEGV`, `exit code 3`."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class RepackVerdicts:
    """Which model files crash with extra buffer types on this host's build, kept in a JSON file
    (the data folder's `cpu-repack.json`; in memory alone without one)."""

    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, str]] = {}
        if path is not None:
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                self._entries = {k: v for k, v in loaded.items() if isinstance(v, dict)}
            except (OSError, ValueError, AttributeError):
                self._entries = {}

    @staticmethod
    def key(model: Path, build: str) -> str:
        return f"{file_id(model)}|{build}"

    def get(self, model: Path, build: str) -> dict[str, str] | None:
        with self._lock:
            return self._entries.get(self.key(model, build))

    def put(self, model: Path, build: str, serves: bool, reason: str) -> None:
        with self._lock:
            self._entries[self.key(model, build)] = {"repack": "serves" if serves else "crashes", "reason": reason}
            if self.path is not None:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    temporary = self.path.with_suffix(".tmp")
                    temporary.write_text(json.dumps(self._entries, indent=1), encoding="utf-8")
                    os.replace(temporary, self.path)
                except OSError as error:
                    log.warning("cannot remember the extra-buffer verdict in %s: %s", self.path, error)

    def crashing(self) -> list[tuple[str, str]]:
        """(model file, reason) of each file remembered as crashing with extra buffers."""
        with self._lock:
            return [(key.split("|", 1)[0].rsplit(":", 2)[0], entry.get("reason", ""))
                    for key, entry in self._entries.items() if entry.get("repack") == "crashes"]


class RepackPolicy:
    """Whether a model loads with llama.cpp's extra CPU buffer types (see the module's text)."""

    def __init__(self, verdicts: RepackVerdicts | None = None, *, enabled: bool = True,
                 probe: bool | None = None, canary_command: list[str] | None = None):
        self.verdicts = verdicts or RepackVerdicts(None)
        self.enabled = enabled
        self._probe = probe  # None: where this host's CPU and build have AMX
        self._canary_command = canary_command
        self._lock = threading.Lock()
        self.fallbacks: dict[str, str] = {}  # model file -> why it loads without extra buffers

    def probes(self) -> bool:
        if self._probe is None:
            self._probe = host_has_amx() and build_has_amx()
        return self._probe

    def repack(self, path: Path, *, gpu_layers: int = 0, threads: int = 1) -> bool:
        """Whether `path` loads with extra buffer types; runs the canary (once per file and build,
        remembered) where this host needs one."""
        if not self.enabled:
            return False
        if not self.probes():
            return True
        with self._lock:  # one canary at a time: each loads a whole model
            build = build_id()
            verdict = self.verdicts.get(path, build)
            if verdict is None:
                log.info("checking that %s decodes with llama.cpp's extra CPU buffers on this CPU (AMX) in a child "
                         "process", path.name)
                result = run_canary(path, gpu_layers=gpu_layers, threads=threads, command=self._canary_command)
                if not result.serves and "timed out" in result.reason:
                    log.warning("the extra-buffer check of %s %s; loading it with them", path.name, result.reason)
                    return True
                verdict = {"repack": "serves" if result.serves else "crashes", "reason": result.reason}
                self.verdicts.put(path, build, result.serves, result.reason)
                if not result.serves:
                    log.warning("%s crashed (%s) with llama.cpp's extra CPU buffers (%s) on this CPU: it loads "
                                "without them from now on (--no-repack does this for every model; remembered%s)",
                                path.name, result.reason, ", ".join(result.extra_buffers) or "AMX",
                                f" in {self.verdicts.path}" if self.verdicts.path else "")
            if verdict["repack"] == "crashes":
                self.fallbacks[str(path)] = verdict.get("reason", "")
                return False
            return True


_policy = RepackPolicy()


def policy() -> RepackPolicy:
    """The process's policy (`configure` sets the server's)."""
    return _policy


def configure(new: RepackPolicy) -> None:
    global _policy
    _policy = new


def repack_fallback(path: Path) -> str | None:
    """Why `path` loads without extra buffer types where they crashed on this host (None elsewhere)."""
    reason = _policy.fallbacks.get(str(path))
    return None if reason is None else f"{reason} in a canary decode with them"
