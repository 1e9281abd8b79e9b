"""`packaging/`: the install scripts and the service files.

`install.sh --dry-run` runs in a fake environment: a temporary folder first on PATH holds fakes
of `uname`, `sysctl`, `nvidia-smi`, `rocminfo`, `hipconfig`, `vulkaninfo` and `glslc` (no GPU and
no Mac here; the GPU tools print the canned output of tests/fixtures/gpu_tools) to steer the
detection, and a fake `pipx` that records any call, to show that a dry run installs nothing. The
real GPU tools are hidden: PATH's other folder links every other command. The service files are
parsed, and their command is run with a fake `fireside` in a temporary home.
"""

from __future__ import annotations

import configparser
import os
import plistlib
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"
INSTALL_SH = PACKAGING / "install.sh"
PIP_ARGS = "'--pip-args=--no-cache-dir --force-reinstall --no-binary=llama-cpp-python'"
GPU_TOOLS = ROOT / "tests" / "fixtures" / "gpu_tools"
# What steers the detection; a machine with a GPU has the real ones beside bash and sed.
DETECTION_TOOLS = {"nvidia-smi", "rocminfo", "hipconfig", "vulkaninfo", "glslc"}
# Variables of the developer's shell that the script would take up.
BUILD_VARIABLES = {"CMAKE_ARGS", "CUDACXX", "HIPCXX", "HIP_PATH", "VULKAN_SDK"}


def write_tool(folder: Path, name: str, body: str) -> Path:
    tool = folder / name
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return tool


def other_tools(tmp_path: Path) -> Path:
    """A folder of links to each command on PATH but the detection tools."""
    folder = tmp_path / "tools"
    if folder.is_dir():
        return folder
    folder.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not Path(directory).is_dir():
            continue
        for tool in Path(directory).iterdir():
            link = folder / tool.name
            if tool.name not in DETECTION_TOOLS and not link.is_symlink() and tool.is_file() and os.access(tool, os.X_OK):
                link.symlink_to(tool)
    return folder


def fake_env(tmp_path: Path, system: str, machine: str, *, nvidia: bool = False, arm64_hw: bool = False,
             rocminfo: str | None = None, hipconfig: bool = False, vulkaninfo: str | None = None,
             glslc: bool = False, **extra: str) -> dict[str, str]:
    """PATH with the fakes first, then the other tools; rocminfo and vulkaninfo print the fixture named."""
    fakes = tmp_path / "fakes"
    fakes.mkdir(exist_ok=True)
    write_tool(fakes, "uname", f'case "$1" in -s) echo {system} ;; -m) echo {machine} ;; *) echo {system} ;; esac')
    write_tool(fakes, "sysctl", f"echo {1 if arm64_hw else 0}")
    write_tool(fakes, "pipx", f'echo "$@" >> "{tmp_path}/pipx-calls"')
    if nvidia:
        write_tool(fakes, "nvidia-smi", "echo 'GPU 0: NVIDIA GeForce RTX 4090 (fake)'")
    if rocminfo:
        write_tool(fakes, "rocminfo", f"cat '{GPU_TOOLS / rocminfo}'")
    if hipconfig:  # ROCm's answers: -l its clang's folder, -R its root
        write_tool(fakes, "hipconfig", 'case "$1" in -l) printf /opt/rocm/llvm/bin ;; -R) printf /opt/rocm ;; esac')
    if vulkaninfo:
        write_tool(fakes, "vulkaninfo", f'[ "$1" = --summary ] && cat \'{GPU_TOOLS / vulkaninfo}\'')
    if glslc:
        write_tool(fakes, "glslc", "exit 0")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in BUILD_VARIABLES}
    env |= {"PATH": os.pathsep.join([str(fakes), str(other_tools(tmp_path))]), "HOME": str(home), **extra}
    return env


def dry_run(tmp_path: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        ["bash", str(INSTALL_SH), "--dry-run", "--python", sys.executable, *args],
        env=env, capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "pipx-calls").exists(), "a dry run must not call pipx"
    return result.stdout


def install_line(out: str) -> str:
    [line] = [line for line in out.splitlines() if line.startswith("+ env ") and " install " in line]
    return line


def test_install_sh_is_valid_bash():
    subprocess.run(["bash", "-n", str(INSTALL_SH)], check=True)
    assert INSTALL_SH.stat().st_mode & stat.S_IXUSR
    text = INSTALL_SH.read_text()
    assert "set -euo pipefail" in text


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (.ci/run installs it with apt-get)")
def test_install_sh_is_shellcheck_clean():
    result = subprocess.run(["shellcheck", str(INSTALL_SH)], capture_output=True, text=True, timeout=60, check=False)
    # shellcheck writes each finding it has (and nothing else): none, shown if there are any
    assert (result.stdout, result.stderr) == ("", ""), result.stdout + result.stderr
    assert result.returncode == 0


def test_nvidia_smi_gives_the_cuda_build(tmp_path):
    out = dry_run(tmp_path, fake_env(tmp_path, "Linux", "x86_64", nvidia=True))
    assert "building llama-cpp-python for: cuda" in out
    line = install_line(out)
    assert line == (f"+ env CMAKE_ARGS='-DGGML_CUDA=on -DGGML_RPC=on' FORCE_CMAKE=1 pipx install --force --python {sys.executable} "
                    f"{PIP_ARGS} {ROOT}")
    assert out.rstrip().endswith("+ fireside doctor")


def test_apple_silicon_gives_the_metal_build(tmp_path):
    out = dry_run(tmp_path, fake_env(tmp_path, "Darwin", "arm64"))
    assert "building llama-cpp-python for: metal" in out
    assert ("CMAKE_ARGS='-DCMAKE_OSX_ARCHITECTURES=arm64 -DCMAKE_APPLE_SILICON_PROCESSOR=arm64 -DGGML_METAL=on "
            "-DGGML_RPC=on'" in install_line(out))


def test_rosetta_on_apple_silicon_still_builds_metal_and_warns(tmp_path):
    env = fake_env(tmp_path, "Darwin", "x86_64", arm64_hw=True)
    result = subprocess.run(["bash", str(INSTALL_SH), "--dry-run", "--python", sys.executable],
                            env=env, capture_output=True, text=True, timeout=30)
    assert "-DGGML_METAL=on" in install_line(result.stdout)
    assert "Rosetta" in result.stderr


@pytest.mark.parametrize(("system", "machine"), [("Linux", "x86_64"), ("Linux", "aarch64"), ("Darwin", "x86_64")])
def test_anything_else_gives_the_cpu_build(tmp_path, system, machine):
    out = dry_run(tmp_path, fake_env(tmp_path, system, machine))
    assert "building llama-cpp-python for: cpu" in out
    line = install_line(out)
    assert line.startswith("+ env CMAKE_ARGS='-DGGML_NATIVE=on -DGGML_RPC=on' FORCE_CMAKE=1 pipx install --force ")
    assert "GGML_CUDA" not in line and "GGML_METAL" not in line
    assert PIP_ARGS in line


def test_backend_option_and_user_cmake_args(tmp_path):
    env = fake_env(tmp_path, "Linux", "x86_64", nvidia=True, CMAKE_ARGS="-DGGML_CUDA_F16=on")
    line = install_line(dry_run(tmp_path, env))
    assert "CMAKE_ARGS='-DGGML_CUDA=on -DGGML_RPC=on -DGGML_CUDA_F16=on'" in line
    line = install_line(dry_run(tmp_path, fake_env(tmp_path, "Linux", "x86_64", nvidia=True), "--backend", "cpu"))
    assert "CMAKE_ARGS='-DGGML_NATIVE=on -DGGML_RPC=on'" in line


def test_default_model_extra_and_specs(tmp_path):
    env = fake_env(tmp_path, "Linux", "x86_64")
    assert install_line(dry_run(tmp_path, env, "--with-default-model")).endswith(f"'{ROOT}[default-model]'")
    assert install_line(dry_run(tmp_path, env, "--spec", "fireside==0.1.0")).endswith(" fireside==0.1.0")
    line = install_line(dry_run(tmp_path, env, "--with-default-model", "--spec", "git+https://example.org/f.git"))
    assert line.endswith(" 'fireside[default-model] @ git+https://example.org/f.git'")


def test_service_option_enables_the_unit_or_the_agent(tmp_path):
    out = dry_run(tmp_path, fake_env(tmp_path, "Linux", "x86_64"), "--service")
    assert f"+ cp {PACKAGING}/systemd/fireside.service {tmp_path}/home/.config/systemd/user/fireside.service" in out
    assert "+ systemctl --user enable --now fireside" in out
    out = dry_run(tmp_path, fake_env(tmp_path, "Darwin", "arm64"), "--service")
    assert f"{tmp_path}/home/Library/LaunchAgents/dev.fireside.serve.plist" in out
    assert f"+ launchctl bootstrap gui/{os.getuid()} " in out


def test_unknown_options_are_refused(tmp_path):
    result = subprocess.run(["bash", str(INSTALL_SH), "--frobnicate"], env=fake_env(tmp_path, "Linux", "x86_64"),
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "unknown option: --frobnicate" in result.stderr


ROCM_ENV = "HIPCXX=/opt/rocm/llvm/bin/clang HIP_PATH=/opt/rocm"


def test_rocminfo_with_a_gfx_agent_gives_the_hip_build_for_its_target(tmp_path):
    env = fake_env(tmp_path, "Linux", "x86_64", rocminfo="rocminfo-gfx1100.txt", hipconfig=True,
                   vulkaninfo="vulkaninfo-radv.txt")
    out = dry_run(tmp_path, env)
    assert "building llama-cpp-python for: hip" in out
    assert "using the HIP compiler at /opt/rocm/llvm/bin/clang (ROCm at /opt/rocm)" in out
    assert install_line(out) == (
        f"+ env CMAKE_ARGS='-DGGML_HIP=on -DGPU_TARGETS=gfx1100 -DGGML_RPC=on' FORCE_CMAKE=1 {ROCM_ENV} "
        f"pipx install --force --python {sys.executable} {PIP_ARGS} {ROOT}")


def test_two_amd_gpus_give_both_targets_as_a_cmake_list(tmp_path):
    env = fake_env(tmp_path, "Linux", "x86_64", rocminfo="rocminfo-gfx1100-gfx1030.txt", hipconfig=True)
    assert "CMAKE_ARGS='-DGGML_HIP=on -DGPU_TARGETS=gfx1030;gfx1100 -DGGML_RPC=on'" in install_line(dry_run(tmp_path, env))


def test_hipconfig_without_rocminfo_gives_the_hip_build_for_the_gpus_it_finds(tmp_path):
    line = install_line(dry_run(tmp_path, fake_env(tmp_path, "Linux", "x86_64", hipconfig=True)))
    assert f"CMAKE_ARGS='-DGGML_HIP=on -DGGML_RPC=on' FORCE_CMAKE=1 {ROCM_ENV} pipx install" in line


@pytest.mark.parametrize("listing", ["vulkaninfo-radv.txt", "vulkaninfo-intel.txt"])
def test_a_gpu_only_vulkan_lists_gives_the_vulkan_build(tmp_path, listing):
    env = fake_env(tmp_path, "Linux", "x86_64", vulkaninfo=listing, glslc=True)
    out = dry_run(tmp_path, env)
    assert "building llama-cpp-python for: vulkan" in out
    assert install_line(out).startswith("+ env CMAKE_ARGS='-DGGML_VULKAN=on -DGGML_RPC=on' FORCE_CMAKE=1 pipx install ")


def test_rocm_that_sees_no_gpu_leaves_the_amd_gpu_to_vulkan(tmp_path):
    env = fake_env(tmp_path, "Linux", "x86_64", rocminfo="rocminfo-cpu-only.txt", hipconfig=True,
                   vulkaninfo="vulkaninfo-radv.txt", glslc=True)
    assert "CMAKE_ARGS='-DGGML_VULKAN=on -DGGML_RPC=on' FORCE_CMAKE=1 pipx" in install_line(dry_run(tmp_path, env))


def test_only_llvmpipe_in_vulkan_gives_the_cpu_build(tmp_path):
    env = fake_env(tmp_path, "Linux", "x86_64", vulkaninfo="vulkaninfo-llvmpipe.txt", glslc=True)
    out = dry_run(tmp_path, env)
    assert "building llama-cpp-python for: cpu" in out
    assert "CMAKE_ARGS='-DGGML_NATIVE=on -DGGML_RPC=on'" in install_line(out)


@pytest.mark.parametrize(("system", "machine", "built"), [("Linux", "x86_64", "cuda"), ("Darwin", "arm64", "metal")])
def test_cuda_and_metal_come_before_rocm_and_vulkan(tmp_path, system, machine, built):
    env = fake_env(tmp_path, system, machine, nvidia=built == "cuda", rocminfo="rocminfo-gfx1100.txt",
                   hipconfig=True, vulkaninfo="vulkaninfo-nvidia.txt", glslc=True)
    out = dry_run(tmp_path, env)
    assert f"building llama-cpp-python for: {built}" in out
    assert "GGML_HIP" not in out and "GGML_VULKAN" not in out and "HIPCXX" not in out


def test_backend_option_forces_vulkan_or_hip(tmp_path):
    plain = fake_env(tmp_path, "Linux", "x86_64", glslc=True)
    line = install_line(dry_run(tmp_path, plain, "--backend", "vulkan"))
    assert "CMAKE_ARGS='-DGGML_VULKAN=on -DGGML_RPC=on' FORCE_CMAKE=1 pipx" in line
    result = subprocess.run(["bash", str(INSTALL_SH), "--dry-run", "--python", sys.executable, "--backend=hip"],
                            env=plain, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    assert "CMAKE_ARGS='-DGGML_HIP=on -DGGML_RPC=on' FORCE_CMAKE=1 pipx" in install_line(result.stdout)
    assert "hipconfig (ROCm's HIP SDK) is not on PATH" in result.stderr
    refused = subprocess.run(["bash", str(INSTALL_SH), "--backend", "opencl"], env=plain, capture_output=True,
                             text=True, timeout=30, check=False)
    assert refused.returncode == 1
    assert "--backend is auto, cuda, metal, hip, vulkan or cpu, not opencl" in refused.stderr


def test_vulkan_without_glslc_stops_before_installing_and_names_the_packages(tmp_path):
    env = fake_env(tmp_path, "Linux", "x86_64", vulkaninfo="vulkaninfo-radv.txt")
    result = subprocess.run(["bash", str(INSTALL_SH), "--dry-run", "--python", sys.executable],
                            env=env, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 1
    assert "building llama-cpp-python for: vulkan" in result.stdout and "+ env" not in result.stdout
    assert "the Vulkan build needs glslc" in result.stderr
    assert "apt install glslc libvulkan-dev spirv-headers" in result.stderr and "--backend cpu" in result.stderr


def test_install_ps1_builds_cuda_when_nvidia_smi_is_found_else_cpu():
    text = (PACKAGING / "install.ps1").read_text()
    assert "Get-Command nvidia-smi" in text
    assert '"-DGGML_CUDA=on -DGGML_RPC=on"' in text and '"-DGGML_NATIVE=on -DGGML_RPC=on"' in text
    assert '"--pip-args=--no-cache-dir --force-reinstall --no-binary=llama-cpp-python"' in text
    assert "fireside[default-model]" in text and "$DryRun" in text
    assert text.count("{") == text.count("}")
    assert text.count("(") == text.count(")")


def test_install_ps1_builds_hip_with_the_hip_sdk_then_vulkan_for_a_listed_gpu():
    text = (PACKAGING / "install.ps1").read_text()
    assert '[ValidateSet("auto", "cuda", "hip", "vulkan", "cpu")]' in text
    detection = text[text.index("function Get-Backend {"):]
    detection = detection[:detection.index("\n}\n")]
    # the order install.sh has: NVIDIA's driver, AMD's HIP SDK, a GPU that Vulkan lists, the CPU
    order = ["Get-Command nvidia-smi", "Get-HipPath", "Test-VulkanGpu", '"cpu"']
    assert [detection.index(step) for step in order] == sorted(detection.index(step) for step in order)
    assert "$env:HIP_PATH" in text and "Get-Command hipconfig" in text and "hipconfig -R" in text
    assert "gcnArchName:" in text and '" -DGPU_TARGETS=$targets"' in text
    assert '"-DGGML_HIP=on$gpuTargets -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DGGML_RPC=on"' in text
    assert '$vars["CMAKE_GENERATOR"] = "Ninja"' in text and '$vars["HIPCXX"] = Join-Path $bin "clang.exe"' in text
    assert "& vulkaninfo --summary" in text
    assert "'deviceType\\s*=\\s*(PHYSICAL_DEVICE_TYPE_)?(DISCRETE|INTEGRATED)_GPU'" in text
    assert '"-DGGML_VULKAN=on -DGGML_RPC=on"' in text
    assert "Get-Command glslc" in text and "LunarG Vulkan SDK" in text


def test_the_vulkan_pattern_of_both_scripts_takes_gpus_and_leaves_llvmpipe():
    """The one regular expression install.sh (grep -E) and install.ps1 (-match) use, against the fixtures."""
    import re

    pattern = re.compile(r"deviceType\s*=\s*(PHYSICAL_DEVICE_TYPE_)?(DISCRETE|INTEGRATED)_GPU")
    shell = (PACKAGING / "install.sh").read_text()
    assert "'deviceType[[:space:]]*=[[:space:]]*(PHYSICAL_DEVICE_TYPE_)?(DISCRETE|INTEGRATED)_GPU'" in shell
    for listing, has_gpu in [("vulkaninfo-radv.txt", True), ("vulkaninfo-intel.txt", True),
                             ("vulkaninfo-nvidia.txt", True), ("vulkaninfo-llvmpipe.txt", False)]:
        assert bool(pattern.search((GPU_TOOLS / listing).read_text())) is has_gpu, listing


# PowerShell is in none of the package registries this project installs from (Debian, PyPI, npm's
# `pwsh` only downloads it from GitHub when installed), so CI cannot install it: this runs where a
# developer has `pwsh`, and the structural checks above run everywhere.
@pytest.mark.skipif(shutil.which("pwsh") is None,
                    reason="pwsh is not installed, and neither Debian, PyPI nor npm can install it here")
def test_install_ps1_parses():
    # the parser's own report: how many errors, then each with its line, shown if there are any
    script = ("$t = $null; $e = $null; [System.Management.Automation.Language.Parser]::ParseFile("
              f"'{PACKAGING / 'install.ps1'}', [ref]$t, [ref]$e) | Out-Null; "
              "Write-Output \"errors: $($e.Count)\"; "
              "foreach ($x in $e) { Write-Output \"line $($x.Extent.StartLineNumber): $($x.Message)\" }")
    result = subprocess.run(["pwsh", "-NoProfile", "-NonInteractive", "-Command", script], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.stdout.splitlines() == ["errors: 0"], result.stdout + result.stderr
    assert result.returncode == 0, result.stderr


def fake_fireside(home: Path) -> Path:
    """`~/.local/bin/fireside` that prints its arguments."""
    folder = home / ".local" / "bin"
    folder.mkdir(parents=True)
    return write_tool(folder, "fireside", 'echo "fake fireside: $*"')


def test_systemd_unit_runs_fireside_serve_from_pipx_bin(tmp_path):
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read(PACKAGING / "systemd" / "fireside.service")
    assert unit.sections() == ["Unit", "Service", "Install"]
    service = unit["Service"]
    assert service["ExecStart"] == "%h/.local/bin/fireside serve"
    assert service["Restart"] == "on-failure"
    assert unit["Install"]["WantedBy"] == "default.target"  # what `systemctl --user enable` hooks into
    home = tmp_path / "home"
    fake_fireside(home)
    command = shlex.split(service["ExecStart"].replace("%h", str(home)))
    result = subprocess.run(command, capture_output=True, text=True, check=True, timeout=10)
    assert result.stdout.strip() == "fake fireside: serve"


def test_launchd_plist_runs_fireside_serve_at_load_and_logs(tmp_path):
    with (PACKAGING / "launchd" / "dev.fireside.serve.plist").open("rb") as file:
        plist = plistlib.load(file)
    assert plist["Label"] == "dev.fireside.serve"
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"]  # restarted after a crash
    home = tmp_path / "home"
    fake_fireside(home)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}  # what launchd gives an agent
    subprocess.run(plist["ProgramArguments"], env=env, check=True, timeout=10)
    log = home / "Library" / "Logs" / "fireside.log"
    assert log.read_text().strip() == "fake fireside: serve"


def test_packaging_readme_covers_each_file():
    readme = (PACKAGING / "README.md").read_text()
    for name in ("install.sh", "install.ps1", "fireside.service", "dev.fireside.serve.plist",
                 "systemctl --user enable --now fireside", "launchctl bootstrap", "fireside doctor",
                 "-DGGML_HIP=on", "-DGGML_VULKAN=on", "--backend hip", "-Backend vulkan"):
        assert name in readme


def test_the_wheel_carries_the_page(tmp_path):
    """A pipx install is a wheel: the page's static files must be in it, beside the code."""
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=300)
    wheel, = tmp_path.glob("fireside-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"app/static/index.html", "app/static/page.js", "app/static/page.css",
            "app/static/vendor/marked.umd.js", "app/static/vendor/purify.min.js"} <= names
    assert "app/server/page.py" in names
