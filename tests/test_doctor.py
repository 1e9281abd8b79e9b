"""`fireside doctor` on this machine's real llama.cpp build, a CPU build or one with GPU offload
(each checked for what it should report). The command is run in-process through an argparse
parser built with `doctor.add_command`, as the `fireside` command wires it."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import stat
from pathlib import Path

import llama_cpp
import pytest

from app.cli import doctor


def run_doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    parser = argparse.ArgumentParser(prog="fireside")
    commands = parser.add_subparsers(dest="command", required=True)
    doctor.add_command(commands)
    args = parser.parse_args(["doctor", *argv])
    assert args.command == "doctor"
    assert doctor.run(args) == 0
    return capsys.readouterr().out


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    config_dir, models_dir = tmp_path / "config", tmp_path / "models"
    monkeypatch.setenv("FIRESIDE_CONFIG_DIR", str(config_dir))
    monkeypatch.setenv("FIRESIDE_MODELS_DIR", str(models_dir))
    return config_dir, models_dir


# llama.cpp's x86 feature names and the /proc/cpuinfo flag of each
CPUINFO_FLAGS = {"SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma",
                 "BMI2": "bmi2", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni",
                 "AVX512_BF16": "avx512_bf16", "AVX_VNNI": "avx_vnni", "AMX_INT8": "amx_int8"}


def gpu_offload() -> bool:
    return bool(llama_cpp.llama_supports_gpu_offload())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_text_report_shows_the_cpu_build_and_the_folders(capsys, folders):
    config_dir, models_dir = folders
    out = run_doctor(capsys, "--port", str(free_port()))
    assert "llama-cpp-python " in out
    [backends] = [line.split(": ", 1)[1].split(", ") for line in out.splitlines() if "  backends: " in line]
    if gpu_offload():
        assert "GPU offload: yes" in out
        assert "CPU" in backends and len(backends) > 1  # the GPU backend beside the CPU's
    else:
        assert backends == ["CPU"]
        assert "GPU offload: no (this build runs on the CPU)" in out
    assert "CPU features: " in out and "none reported" not in out
    assert f"config file: {config_dir / 'config.toml'} (not written yet)" in out
    assert f"models folder: {models_dir} (not created yet)" in out
    assert "models configured: 0" in out
    assert ": free" in out


def test_json_report_is_one_object_with_the_same_facts(capsys, folders):
    config_dir, models_dir = folders
    models_dir.mkdir()
    config_dir.mkdir()
    (config_dir / "config.toml").write_text(
        '[[models]]\nid = "a"\nfile = "a.gguf"\n\n[[models]]\nid = "b"\nfile = "b.gguf"\ngpu_layers = "auto"\n'
        'mmproj = "b-mmproj.gguf"\n'
    )
    port = free_port()
    report = json.loads(run_doctor(capsys, "--json", "--port", str(port)))
    types = [d["type"] for d in report["devices"]]
    assert report["gpu_offload"] is gpu_offload()
    if gpu_offload():
        assert "CPU" in report["backends"] and len(report["backends"]) > 1
        assert types.count("CPU") == 1 and set(types) <= {"CPU", "GPU", "IGPU", "ACCEL"}
    else:
        assert report["backends"] == ["CPU"]
        assert types == ["CPU"]
    [cpu] = [device for device in report["devices"] if device["type"] == "CPU"]
    assert 0 < cpu["free_bytes"] <= cpu["total_bytes"]
    # llama.cpp's own words: the features its system info marks "= 1" in its CPU section
    cpu_section = re.search(r"\bCPU : (.*?)(?:\|\s*\w+ : |$)", llama_cpp.llama_print_system_info().decode())
    assert report["cpu_features"] == re.findall(r"(\w+) = 1\b", cpu_section[1])
    assert report["cpu_features"]
    # and the processor's: each x86 instruction set that llama.cpp uses, this CPU has
    cpuinfo = Path("/proc/cpuinfo")
    flags = re.search(r"^flags\s*:(.*)$", cpuinfo.read_text(), re.MULTILINE) if cpuinfo.is_file() else None
    if flags is not None:
        assert {CPUINFO_FLAGS[f] for f in report["cpu_features"] if f in CPUINFO_FLAGS} <= set(flags[1].split())
    assert report["config_file"] == {"path": str(config_dir / "config.toml"), "exists": True}
    assert report["models_dir"] == {"path": str(models_dir), "exists": True}
    assert report["models_configured"] == 2 and report["config_error"] is None
    assert report["models_with_images"] == ["b"]
    assert report["port"] == {"host": "127.0.0.1", "port": port, "free": True, "error": None}
    assert report["python_version"].startswith("3.")
    assert report["llama_cpp_python_version"][0].isdigit()
    assert report["default_model"].endswith(".gguf")


def test_a_port_in_use_is_reported_busy_with_a_hint(capsys, folders):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        report = json.loads(run_doctor(capsys, "--json", "--port", str(port)))
        text = run_doctor(capsys, "--port", str(port))
    assert report["port"]["free"] is False and report["port"]["error"]
    assert any(f"port {port} is taken" in hint for hint in report["hints"])
    assert f"port {port} on 127.0.0.1: in use" in text


def test_a_broken_config_is_reported_and_doctor_still_exits_0(capsys, folders):
    config_dir, _ = folders
    config_dir.mkdir()
    (config_dir / "config.toml").write_text("[[models]]\nid = 3\n")
    report = json.loads(run_doctor(capsys, "--json", "--port", str(free_port())))
    assert report["models_configured"] is None
    assert "id is required" in report["config_error"]


def test_an_nvidia_driver_without_a_cuda_build_gets_a_hint(capsys, folders, tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "nvidia-smi"  # a fake driver tool: no GPU here
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    report = json.loads(run_doctor(capsys, "--json", "--port", str(free_port())))
    hinted = any("no CUDA backend" in hint and "packaging/install.sh" in hint for hint in report["hints"])
    assert hinted is ("CUDA" not in report["backends"])  # a CUDA build has nothing to mend


def test_system_info_of_a_cuda_build_parses_by_section():
    # The shape of llama_print_system_info() on a CUDA build (which cannot run here).
    text = ("CUDA : ARCHS = 890 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | "
            "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 0 | LLAMAFILE = 1 | ")
    sections = doctor.parse_system_info(text)
    assert sections == {
        "CUDA": {"ARCHS": "890", "USE_GRAPHS": "1", "PEER_MAX_BATCH_SIZE": "128"},
        "CPU": {"SSE3": "1", "AVX": "1", "AVX2": "1", "AVX512": "0", "LLAMAFILE": "1"},
    }
    assert doctor.cpu_features(sections) == ["SSE3", "AVX", "AVX2", "LLAMAFILE"]
    metal = doctor.parse_system_info("Metal : EMBED_LIBRARY = 1 | CPU : NEON = 1 | ARM_FMA = 1 | ")
    assert doctor.cpu_features(metal) == ["NEON", "ARM_FMA"]
