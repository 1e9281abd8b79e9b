"""The fallback from llama.cpp's extra CPU buffer types (backends/cpu_repack.py).

The crash it exists for happens only on CPUs with AMX, which no test machine can be made to have:
there the canary's child is a stand-in that dies of a real SIGSEGV (a null read through ctypes),
and the policy's probe is forced on. Everything else is real: the canary child loading the real
models and decoding, the flag reaching llama.cpp (Gemma 3's Q4_K weights go to the CPU_REPACK
buffer with repacking on and never with it off), the verdicts file, doctor's report.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import httpx
import pytest

from backends import cpu_repack
from backends.cpu_repack import RepackPolicy, RepackVerdicts, exit_reason, host_has_amx, run_canary
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path
from tests.servers import DEFAULT_ARGS

SEGFAULT = [sys.executable, "-c", "import ctypes; ctypes.string_at(0)"]


def _marking(marker: Path) -> list[str]:
    """A canary stand-in that serves and leaves `marker` behind (to tell whether it ran)."""
    return [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('ran\\n'); print('extra buffers: AMX')"]


def test_a_crashing_canary_turns_repacking_off_and_is_remembered(tmp_path, caplog):
    model = default_model_path()
    verdicts = tmp_path / "cpu-repack.json"
    policy = RepackPolicy(RepackVerdicts(verdicts), probe=True, canary_command=SEGFAULT)
    with caplog.at_level(logging.INFO, logger="fireside.load"):
        assert policy.repack(model) is False
        assert policy.repack(model) is False  # the second load asks no canary and says nothing more
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "SIGSEGV" in warnings[0] and model.name in warnings[0]
    assert policy.fallbacks == {str(model): "SIGSEGV"}
    [entry] = json.loads(verdicts.read_text()).values()
    assert entry == {"repack": "crashes", "reason": "SIGSEGV"}
    # a server started later reads the verdict instead of running a canary
    marker = tmp_path / "ran"
    later = RepackPolicy(RepackVerdicts(verdicts), probe=True, canary_command=_marking(marker))
    assert later.repack(model) is False and not marker.exists()
    assert RepackVerdicts(verdicts).crashing() == [(str(model.resolve()), "SIGSEGV")]


def test_a_changed_file_or_a_serving_canary_is_checked_anew(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(default_model_path().read_bytes())
    verdicts = RepackVerdicts(tmp_path / "cpu-repack.json")
    assert RepackPolicy(verdicts, probe=True, canary_command=SEGFAULT).repack(model) is False
    model.write_bytes(model.read_bytes() + b"\0")  # replaced: another file as far as the verdict goes
    marker = tmp_path / "ran"
    policy = RepackPolicy(verdicts, probe=True, canary_command=_marking(marker))
    assert policy.repack(model) is True and marker.read_text() == "ran\n"
    assert policy.repack(model) is True and marker.read_text() == "ran\n"  # remembered as serving
    assert policy.fallbacks == {}


def test_no_repack_and_hosts_without_amx_run_no_canary(tmp_path):
    marker = tmp_path / "ran"
    model = default_model_path()
    assert RepackPolicy(enabled=False, probe=True, canary_command=_marking(marker)).repack(model) is False
    assert RepackPolicy(probe=False, canary_command=_marking(marker)).repack(model) is True
    assert not marker.exists()


def test_this_host_is_read_from_its_cpu_flags(tmp_path):
    amx = tmp_path / "amx"
    amx.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f amx_bf16 amx_tile amx_int8\n")
    plain = tmp_path / "plain"
    plain.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n")
    assert host_has_amx(amx) and not host_has_amx(plain) and not host_has_amx(tmp_path / "missing")


def test_the_real_canary_decodes_a_batch_in_a_child_process():
    served = run_canary(default_model_path())
    assert served.serves and served.reason == "served"
    assert not run_canary(default_model_path(), repack=False).extra_buffers
    missing = run_canary(Path("/nonexistent/model.gguf"))
    assert not missing.serves and missing.reason == "exit code 2"
    assert exit_reason(-11) == "SIGSEGV" and exit_reason(-6) == "SIGABRT" and exit_reason(3) == "exit code 3"


def test_the_flag_reaches_llama_cpp(gemma_path):
    """Gemma 3's Q4_K weights are repacked for AVX2/NEON with the extra buffers on, never with them off."""
    repacked = LlamaModel(gemma_path, ModelOptions(cpu_repack=True))
    plain = LlamaModel(gemma_path, ModelOptions(cpu_repack=False))
    try:
        assert plain.cpu_repack is False and not any(name.startswith(("CPU_REPACK", "AMX")) for name in plain.buffers)
        if not any(name.startswith(("CPU_REPACK", "AMX")) for name in repacked.buffers):
            pytest.skip(f"this CPU's backend repacks nothing of Q4_K ({repacked.buffers})")
    finally:
        repacked.close()
        plain.close()


def test_a_model_loads_without_extra_buffers_where_the_policy_saw_a_crash(tmp_path, gemma_path, monkeypatch):
    monkeypatch.setattr(cpu_repack, "_policy", RepackPolicy(RepackVerdicts(tmp_path / "v.json"), probe=True,
                                                            canary_command=SEGFAULT))
    model = LlamaModel(gemma_path, ModelOptions())
    try:
        assert model.cpu_repack is False
        assert not any(name.startswith(("CPU_REPACK", "AMX")) for name in model.buffers)
        assert cpu_repack.repack_fallback(gemma_path) == "SIGSEGV in a canary decode with them"
    finally:
        model.close()


def test_no_repack_reaches_the_served_model_and_health(model_path):
    from tests.conftest import POOL

    server = POOL.get("--model", str(model_path), "--no-repack", "--ctx-size", "256", "--parallel", "1")
    [health] = httpx.get(f"{server.base_url}/health", timeout=30).json()["models"]
    assert health["cpu_repack"] is False and health["cpu_repack_off_because"] is None  # asked for, not crashed
    [shared] = httpx.get(f"{POOL.get(*DEFAULT_ARGS).base_url}/health", timeout=30).json()["models"]
    assert shared["cpu_repack"] is True


def test_the_config_turns_repacking_off(tmp_path):
    from app.settings.config import ConfigError, load_config

    config = tmp_path / "config.toml"
    config.write_text("cpu_repack = false\n")
    assert load_config(config).cpu_repack is False
    config.write_text('cpu_repack = "no"\n')
    with pytest.raises(ConfigError, match="cpu_repack is true or false"):
        load_config(config)
    assert load_config(tmp_path / "missing.toml").cpu_repack is True
