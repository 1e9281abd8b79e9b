"""Which GPUs this desktop has, and which llama.cpp build would serve each: what `fireside doctor`
compares with the build's backends to say how to reinstall.

It asks the tools the drivers install (`nvidia-smi -L`, `rocminfo`, `vulkaninfo --summary`) and
the platform, in the order packaging/install.sh and install.ps1 pick a build: NVIDIA with its
driver → CUDA, Apple Silicon → Metal, AMD with ROCm (or Windows' HIP SDK) → HIP, any other GPU
Vulkan lists → Vulkan. A vendor whose GPUs its own tool listed is not listed again from
vulkaninfo, which sees every GPU. Whatever cannot be run counts as absent: nothing here raises.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence

import msgspec

# A command's standard output, or None when it is not installed or does not finish in time. The
# output counts even when the command fails: the parsers only take lines that name a device.
Runner = Callable[[Sequence[str]], str | None]

# Per build (install.sh's --backend names): how people call it, and the names its backend
# registers in ggml. ggml-cuda.h names the HIP build of the CUDA backend "ROCm"; older Metal
# builds registered "MTL".
LABELS = {"cuda": "CUDA", "metal": "Metal", "hip": "HIP (ROCm)", "vulkan": "Vulkan"}
REGISTRY_NAMES = {"cuda": ("CUDA",), "metal": ("Metal", "MTL"), "hip": ("ROCm",), "vulkan": ("Vulkan",)}

# PCI vendor ids as vulkaninfo prints them (vendorID = 0x1002)
VULKAN_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x106B: "Apple", 0x5143: "Qualcomm",
                  0x13B5: "ARM"}


class GpuFound(msgspec.Struct):
    vendor: str  # NVIDIA, AMD, Intel, Apple, ...
    name: str
    backend: str  # the build that serves it: cuda, metal, hip or vulkan (install.sh's --backend)
    found_by: str  # nvidia-smi, rocminfo, vulkaninfo or platform
    target: str | None = None  # an AMD GPU's gfx target (gfx1100), what a HIP build compiles for


def run_tool(command: Sequence[str], timeout: float = 10) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, errors="replace",
                              timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


# --- parsing -----------------------------------------------------------------------------------

_NVIDIA_LINE = re.compile(r"^GPU \d+: (?P<name>.+?)(?: \(UUID: [^)]*\))?\s*$", re.MULTILINE)


def parse_nvidia_smi(text: str) -> list[GpuFound]:
    """`nvidia-smi -L`: "GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-...)" per GPU."""
    return [GpuFound("NVIDIA", line["name"], "cuda", "nvidia-smi") for line in _NVIDIA_LINE.finditer(text)]


_AGENT_HEADER = re.compile(r"^Agent \d+\s*$")
# An agent's own fields are indented by two spaces; its ISA's "Name:" (amdgcn-amd-amdhsa--gfx1100)
# by six.
_AGENT_FIELD = re.compile(r"^  (?P<key>Name|Marketing Name|Device Type):\s*(?P<value>.*?)\s*$")


def parse_rocminfo(text: str) -> list[GpuFound]:
    """`rocminfo`'s GPU agents: their gfx target ("Name:") and marketing name. CPU agents are left out."""
    agents: list[dict[str, str]] = []
    for line in text.splitlines():
        if _AGENT_HEADER.match(line):
            agents.append({})
        elif agents and (field := _AGENT_FIELD.match(line)):
            agents[-1].setdefault(field["key"], field["value"])
    return [GpuFound("AMD", agent.get("Marketing Name") or agent["Name"], "hip", "rocminfo", agent["Name"])
            for agent in agents
            if agent.get("Device Type") == "GPU" and agent.get("Name", "").startswith("gfx")]


def gfx_targets(gpus: Sequence[GpuFound]) -> list[str]:
    return sorted({gpu.target for gpu in gpus if gpu.target})


_VULKAN_DEVICE = re.compile(r"^GPU\d+:\s*$", re.MULTILINE)
_VULKAN_FIELD = re.compile(r"^\s+(\w+)\s*=\s*(.*?)\s*$", re.MULTILINE)


def parse_vulkaninfo(text: str) -> list[GpuFound]:
    """`vulkaninfo --summary`'s discrete and integrated GPUs; CPU devices (llvmpipe, lavapipe) and
    virtual ones are left out, and so is a device listed twice (the same deviceUUID through two
    loader manifests), as llama.cpp's Vulkan backend skips it."""
    found, seen = [], set()
    for section in _VULKAN_DEVICE.split(text)[1:]:
        fields = dict(_VULKAN_FIELD.findall(section))
        kind = fields.get("deviceType", "").removeprefix("PHYSICAL_DEVICE_TYPE_")
        uuid = fields.get("deviceUUID")
        if kind not in ("DISCRETE_GPU", "INTEGRATED_GPU") or (uuid is not None and uuid in seen):
            continue
        seen.add(uuid)
        found.append(GpuFound(_vulkan_vendor(fields.get("vendorID", "")), fields.get("deviceName", "unknown"),
                              "vulkan", "vulkaninfo"))
    return found


def _vulkan_vendor(vendor_id: str) -> str:
    try:
        return VULKAN_VENDORS.get(int(vendor_id, 16), f"vendor {vendor_id}")
    except ValueError:
        return "unknown"


# --- detecting ---------------------------------------------------------------------------------

def is_apple_silicon(run: Runner, system: str, machine: str) -> bool:
    if system != "Darwin":
        return False
    # A Python under Rosetta reports x86_64 on Apple Silicon hardware.
    return machine == "arm64" or (run(["sysctl", "-n", "hw.optional.arm64"]) or "").strip() == "1"


def detect(run: Runner = run_tool, system: str | None = None, machine: str | None = None,
           environ: Mapping[str, str] = os.environ) -> list[GpuFound]:
    """The GPUs of this desktop, each with the build that would serve it."""
    system = system or platform.system()
    machine = machine or platform.machine()
    found = parse_nvidia_smi(run(["nvidia-smi", "-L"]) or "")
    if is_apple_silicon(run, system, machine):
        chip = (run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip() or "Apple Silicon"
        found.append(GpuFound("Apple", f"{chip} GPU", "metal", "platform"))
    rocminfo = run(["rocminfo"])
    found += parse_rocminfo(rocminfo or "")
    # Without rocminfo (Windows has none) the HIP SDK alone says an AMD GPU gets the HIP build, as
    # install.sh and install.ps1 decide.
    hip_sdk = rocminfo is None and (bool(environ.get("HIP_PATH")) or run(["hipconfig", "--version"]) is not None)
    listed = {gpu.vendor for gpu in found}
    for gpu in parse_vulkaninfo(run(["vulkaninfo", "--summary"]) or ""):
        if gpu.vendor in listed:
            continue
        if gpu.vendor == "AMD" and hip_sdk:
            gpu.backend = "hip"
        found.append(gpu)
    return found


# --- advice ------------------------------------------------------------------------------------

def has_backend(backends: Sequence[str], backend: str) -> bool:
    return any(name in backends for name in REGISTRY_NAMES[backend])


def cmake_args(backend: str, targets: Sequence[str] = ()) -> str:
    """install.sh's CMAKE_ARGS for a build (targets: the gfx targets of a HIP build)."""
    flags = {
        "cuda": "-DGGML_CUDA=on",
        "metal": "-DCMAKE_OSX_ARCHITECTURES=arm64 -DCMAKE_APPLE_SILICON_PROCESSOR=arm64 -DGGML_METAL=on",
        "hip": "-DGGML_HIP=on" + (f" -DGPU_TARGETS={';'.join(targets)}" if targets else ""),
        "vulkan": "-DGGML_VULKAN=on",
    }[backend]
    return f"{flags} -DGGML_RPC=on"


def describe(gpus: Sequence[GpuFound], backends: Sequence[str]) -> list[str]:
    """One line per GPU: what it is, who found it, the build it wants and whether this is one."""
    lines = []
    for gpu in gpus:
        what = f"{gpu.vendor} {gpu.target}" if gpu.target else gpu.vendor
        state = "this build has it" if has_backend(backends, gpu.backend) else "this build lacks it"
        lines.append(f"{gpu.name} ({what}, from {gpu.found_by}): wants the {LABELS[gpu.backend]} build; {state}")
    return lines


def reinstall_command(backend: str, gpus: Sequence[GpuFound], platform_name: str, version: str) -> str:
    """How to get the build: the install script, or for an install from PyPI, rebuilding
    llama-cpp-python (the same version) inside Fireside's pipx environment."""
    args = cmake_args(backend, gfx_targets(gpus))
    pinned = f"llama-cpp-python=={version}" if version[:1].isdigit() else "llama-cpp-python"
    pip = f"pipx runpip fireside install --force-reinstall --no-deps --no-cache-dir --no-binary=llama-cpp-python {pinned}"
    if platform_name.startswith("Windows"):
        script = f"packaging\\install.ps1 -Backend {backend}"
        if backend == "hip":  # the HIP SDK's clang, Ninja and PATH: more than one line can say
            return f"reinstall with `{script}`"
        return f"reinstall with `{script}`, or, installed from PyPI: `$env:CMAKE_ARGS=\"{args}\"; {pip}`"
    env = f'CMAKE_ARGS="{args}"'
    if backend == "hip":
        env = f'HIPCXX="$(hipconfig -l)/clang" HIP_PATH="$(hipconfig -R)" {env}'
    return f"reinstall with `packaging/install.sh --backend {backend}`, or, installed from PyPI: `{env} {pip}`"


def reinstall_hints(gpus: Sequence[GpuFound], backends: Sequence[str], platform_name: str,
                    version: str) -> list[str]:
    """A hint per build that a GPU here wants and this llama.cpp build lacks."""
    wanted: dict[str, list[GpuFound]] = {}
    for gpu in gpus:
        if not has_backend(backends, gpu.backend):
            wanted.setdefault(gpu.backend, []).append(gpu)
    return [f"{', '.join(gpu.name for gpu in these)} would run on llama.cpp's {LABELS[backend]} backend, "
            f"which this build lacks: {reinstall_command(backend, these, platform_name, version)}"
            for backend, these in wanted.items()]
