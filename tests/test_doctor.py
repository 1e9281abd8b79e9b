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
import msgspec
import pytest

from app.cli import doctor, gpu_detect


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


# --- which GPUs the desktop has (gpu_detect), from the tools' canned output ----------------------

GPU_TOOLS = Path(__file__).parent / "fixtures" / "gpu_tools"


def tools(**outputs: str | None):
    """A runner for gpu_detect: each tool prints its fixture; a tool not named is not installed."""
    def run(command):
        name = outputs.get(command[0].replace("-", "_"))
        return None if name is None else (GPU_TOOLS / name).read_text() if name.endswith(".txt") else name
    return run


def test_nvidia_smi_lists_each_gpu_for_the_cuda_build():
    gpus = gpu_detect.parse_nvidia_smi((GPU_TOOLS / "nvidia-smi-L.txt").read_text())
    assert gpus == [gpu_detect.GpuFound("NVIDIA", "NVIDIA GeForce RTX 4090", "cuda", "nvidia-smi"),
                    gpu_detect.GpuFound("NVIDIA", "NVIDIA RTX A4000", "cuda", "nvidia-smi")]
    # what it prints without a working driver names no GPU
    assert gpu_detect.parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate with the "
                                       "NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
                                       "and running.\n") == []


def test_rocminfo_gives_the_gpu_agents_with_their_gfx_targets_not_the_cpu():
    [gpu] = gpu_detect.parse_rocminfo((GPU_TOOLS / "rocminfo-gfx1100.txt").read_text())
    assert gpu == gpu_detect.GpuFound("AMD", "Radeon RX 7900 XTX", "hip", "rocminfo", "gfx1100")
    two = gpu_detect.parse_rocminfo((GPU_TOOLS / "rocminfo-gfx1100-gfx1030.txt").read_text())
    assert [(g.name, g.target) for g in two] == [("Radeon RX 7900 XTX", "gfx1100"), ("AMD Radeon RX 6800 XT", "gfx1030")]
    assert gpu_detect.gfx_targets(two) == ["gfx1030", "gfx1100"]
    assert gpu_detect.parse_rocminfo((GPU_TOOLS / "rocminfo-cpu-only.txt").read_text()) == []


def test_vulkaninfo_gives_discrete_and_integrated_gpus_not_llvmpipe():
    [radv] = gpu_detect.parse_vulkaninfo((GPU_TOOLS / "vulkaninfo-radv.txt").read_text())
    assert radv == gpu_detect.GpuFound("AMD", "AMD Radeon RX 7900 XTX (RADV GFX1100)", "vulkan", "vulkaninfo")
    intel = gpu_detect.parse_vulkaninfo((GPU_TOOLS / "vulkaninfo-intel.txt").read_text())
    assert [(g.vendor, g.name) for g in intel] == [("Intel", "Intel(R) Arc(tm) A770 Graphics (DG2)"),
                                                  ("Intel", "Intel(R) UHD Graphics 770 (ADL-S GT1)")]
    assert gpu_detect.parse_vulkaninfo((GPU_TOOLS / "vulkaninfo-llvmpipe.txt").read_text()) == []


def test_a_gpu_listed_twice_by_vulkaninfo_counts_once():
    text = (GPU_TOOLS / "vulkaninfo-radv.txt").read_text()
    devices = text.index("GPU0:")
    doubled = text[:devices] + text[devices:text.index("GPU1:")].replace("GPU0:", "GPU1:") + text[devices:]
    assert len(gpu_detect.parse_vulkaninfo(doubled)) == 1


def test_detect_takes_each_vendor_from_its_own_tool_and_the_rest_from_vulkan():
    # an NVIDIA card with its driver, beside an Intel iGPU only Vulkan sees
    found = gpu_detect.detect(tools(nvidia_smi="nvidia-smi-L.txt", vulkaninfo="vulkaninfo-intel.txt"),
                              "Linux", "x86_64", environ={})
    assert [(g.vendor, g.backend, g.found_by) for g in found] == [
        ("NVIDIA", "cuda", "nvidia-smi"), ("NVIDIA", "cuda", "nvidia-smi"),
        ("Intel", "vulkan", "vulkaninfo"), ("Intel", "vulkan", "vulkaninfo")]
    # ROCm sees the Radeon: HIP, and vulkaninfo's RADV entry for it is not listed again
    found = gpu_detect.detect(tools(rocminfo="rocminfo-gfx1100.txt", vulkaninfo="vulkaninfo-radv.txt"),
                              "Linux", "x86_64", environ={})
    assert [(g.name, g.backend, g.target) for g in found] == [("Radeon RX 7900 XTX", "hip", "gfx1100")]
    # ROCm that sees no GPU (not in the render group): the Radeon is Vulkan's
    found = gpu_detect.detect(tools(rocminfo="rocminfo-cpu-only.txt", vulkaninfo="vulkaninfo-radv.txt"),
                              "Linux", "x86_64", environ={})
    assert [(g.vendor, g.backend) for g in found] == [("AMD", "vulkan")]
    # NVIDIA's Vulkan driver without nvidia-smi: Vulkan's
    found = gpu_detect.detect(tools(vulkaninfo="vulkaninfo-nvidia.txt"), "Linux", "x86_64", environ={})
    assert [(g.name, g.backend) for g in found] == [("NVIDIA GeForce RTX 4090", "vulkan")]
    assert gpu_detect.detect(tools(vulkaninfo="vulkaninfo-llvmpipe.txt"), "Linux", "x86_64", environ={}) == []
    assert gpu_detect.detect(tools(), "Linux", "x86_64", environ={}) == []


def test_detect_on_windows_and_macs():
    # Windows has no rocminfo: the HIP SDK (its HIP_PATH) makes an AMD GPU Vulkan lists a HIP one
    radv = tools(vulkaninfo="vulkaninfo-radv.txt")
    [gpu] = gpu_detect.detect(radv, "Windows", "AMD64", environ={"HIP_PATH": "C:\\Program Files\\AMD\\ROCm\\6.2\\"})
    assert (gpu.vendor, gpu.backend) == ("AMD", "hip")
    [gpu] = gpu_detect.detect(radv, "Windows", "AMD64", environ={})
    assert gpu.backend == "vulkan"
    # Apple Silicon, also under Rosetta; MoltenVK's listing of the same GPU is not repeated
    moltenvk = ((GPU_TOOLS / "vulkaninfo-radv.txt").read_text().replace("0x1002", "0x106b")
                .replace("PHYSICAL_DEVICE_TYPE_DISCRETE_GPU", "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU")
                .replace("AMD Radeon RX 7900 XTX (RADV GFX1100)", "Apple M2 Pro"))
    assert [(g.vendor, g.name) for g in gpu_detect.parse_vulkaninfo(moltenvk)] == [("Apple", "Apple M2 Pro")]
    mac = tools(sysctl="Apple M2 Pro\n", vulkaninfo=moltenvk)
    assert gpu_detect.detect(mac, "Darwin", "arm64", environ={}) == [
        gpu_detect.GpuFound("Apple", "Apple M2 Pro GPU", "metal", "platform")]
    assert gpu_detect.is_apple_silicon(tools(sysctl="1\n"), "Darwin", "x86_64")
    assert not gpu_detect.is_apple_silicon(tools(sysctl="0\n"), "Darwin", "x86_64")
    assert not gpu_detect.is_apple_silicon(tools(sysctl="1\n"), "Linux", "aarch64")


def test_the_runner_reports_a_missing_tool_as_none_and_a_failing_one_by_its_output(tmp_path, monkeypatch):
    fake = tmp_path / "rocminfo"
    fake.write_text("#!/bin/sh\necho 'ROCk module is loaded'\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_detect.run_tool(["rocminfo"]) == "ROCk module is loaded\n"
    assert gpu_detect.run_tool(["vulkaninfo", "--summary"]) is None


def report_with(backends: list[str], gpus: list[gpu_detect.GpuFound], platform: str = "Linux-x86_64") -> doctor.DoctorReport:
    """A report of a build with these backends on a desktop with these GPUs (the rest as a quiet machine's)."""
    return doctor.DoctorReport(
        fireside_version="0.1.0", python_version="3.11.7", python_executable="/usr/bin/python3",
        platform=platform, llama_cpp_python_version="0.3.36", backends=backends, gpu_offload=False,
        devices=[], cpu_features=["AVX2"], system_info={}, config_file=doctor.PathInfo("/c/config.toml", True),
        models_dir=doctor.PathInfo("/m", True), models_configured=1, models_with_images=[], config_error=None,
        default_model="/m/smol.gguf", port=doctor.PortInfo("127.0.0.1", 8080, True), hints=[], rpc=True,
        gpus_found=gpus,
    )


def test_a_gpu_whose_backend_the_build_lacks_gets_the_exact_reinstall_command(monkeypatch):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)  # no nvidia-smi of this machine's
    radeon = gpu_detect.parse_rocminfo((GPU_TOOLS / "rocminfo-gfx1100.txt").read_text())
    [hint] = doctor.hints(report_with(["CPU", "RPC"], radeon))
    assert hint.startswith("Radeon RX 7900 XTX would run on llama.cpp's HIP (ROCm) backend, which this build lacks: "
                           "reinstall with `packaging/install.sh --backend hip`, or, installed from PyPI: ")
    assert hint.endswith('`HIPCXX="$(hipconfig -l)/clang" HIP_PATH="$(hipconfig -R)" '
                         'CMAKE_ARGS="-DGGML_HIP=on -DGPU_TARGETS=gfx1100 -DGGML_RPC=on" pipx runpip fireside install '
                         '--force-reinstall --no-deps --no-cache-dir --no-binary=llama-cpp-python llama-cpp-python==0.3.36`')
    assert doctor.hints(report_with(["ROCm", "CPU", "RPC"], radeon)) == []  # ggml's name for the HIP build

    arc = gpu_detect.parse_vulkaninfo((GPU_TOOLS / "vulkaninfo-intel.txt").read_text())
    [hint] = doctor.hints(report_with(["CPU", "RPC"], arc))
    assert hint.startswith("Intel(R) Arc(tm) A770 Graphics (DG2), Intel(R) UHD Graphics 770 (ADL-S GT1) would run on "
                           "llama.cpp's Vulkan backend")
    assert "`packaging/install.sh --backend vulkan`" in hint and 'CMAKE_ARGS="-DGGML_VULKAN=on -DGGML_RPC=on" pipx' in hint
    assert doctor.hints(report_with(["Vulkan", "CPU", "RPC"], arc)) == []
    [hint] = doctor.hints(report_with(["CPU", "RPC"], arc, "Windows-AMD64"))
    assert ("`packaging\\install.ps1 -Backend vulkan`, or, installed from PyPI: "
            '`$env:CMAKE_ARGS="-DGGML_VULKAN=on -DGGML_RPC=on"; pipx runpip fireside install') in hint

    nvidia = gpu_detect.parse_nvidia_smi((GPU_TOOLS / "nvidia-smi-L.txt").read_text())
    monkeypatch.setattr(doctor.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    [hint] = doctor.hints(report_with(["CPU", "RPC"], nvidia))  # one hint, not also the driver's
    assert hint.startswith("NVIDIA GeForce RTX 4090, NVIDIA RTX A4000 would run on llama.cpp's CUDA backend")
    assert "--backend cuda" in hint and 'CMAKE_ARGS="-DGGML_CUDA=on -DGGML_RPC=on"' in hint


def test_the_text_report_lists_the_gpus_and_what_they_want(monkeypatch):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    gpus = (gpu_detect.parse_rocminfo((GPU_TOOLS / "rocminfo-gfx1100.txt").read_text())
            + gpu_detect.parse_vulkaninfo((GPU_TOOLS / "vulkaninfo-intel.txt").read_text())[1:])
    report = report_with(["Vulkan", "CPU", "RPC"], gpus)
    report.hints = doctor.hints(report)
    text = doctor.render_text(report)
    assert ("GPUs on this desktop:\n"
            "  Radeon RX 7900 XTX (AMD gfx1100, from rocminfo): wants the HIP (ROCm) build; this build lacks it\n"
            "  Intel(R) UHD Graphics 770 (ADL-S GT1) (Intel, from vulkaninfo): wants the Vulkan build; this build has it\n"
            ) in text
    assert "hint: Radeon RX 7900 XTX would run on llama.cpp's HIP (ROCm) backend" in text
    assert "GPUs on this desktop: none found" in doctor.render_text(report_with(["CPU"], []))


def test_the_json_report_carries_the_gpus_found(capsys, folders):
    report = json.loads(run_doctor(capsys, "--json", "--port", str(free_port())))
    assert report["gpus_found"] == [msgspec.to_builtins(gpu) for gpu in gpu_detect.detect()]
    assert all(set(gpu) == {"vendor", "name", "backend", "found_by", "target"} for gpu in report["gpus_found"])
