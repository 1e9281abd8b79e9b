"""`fireside doctor`: what this install can use. The versions, the llama.cpp build's backends and
whether it can offload to a GPU, the devices and their free memory as llama.cpp reports them, the
CPU features the CPU backend was built for, the config file and models folder, and whether the
serve port is free. `--json` prints the same as one JSON object.

It answers the questions people ask when a model runs slower than it should ("is this the CUDA
build?", "does llama.cpp see my GPU?") from llama.cpp itself rather than from guesses, and it
always exits 0: whatever cannot be found out is reported, not raised.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import msgspec

from app.cli import doctor_plan, gpu_detect
from app.cli.defaults import DEFAULT_HOST, DEFAULT_PORT


class DeviceInfo(msgspec.Struct):
    name: str
    description: str
    type: str  # CPU, GPU, IGPU, ACCEL
    backend: str
    free_bytes: int
    total_bytes: int


class PathInfo(msgspec.Struct):
    path: str
    exists: bool


class PortInfo(msgspec.Struct):
    host: str
    port: int
    free: bool
    error: str | None = None  # why it is not free


class KvUse(msgspec.Struct):
    model: str
    used_bytes: int  # what the slots hold: running requests and prefixes kept for reuse
    total_bytes: int  # allocated for all slots


class WorkerInfo(msgspec.Struct):
    endpoint: str  # HOST:PORT
    used_by: list[str]  # "--rpc", or the configured models that name it
    reachable: bool
    error: str | None = None  # why it cannot be used
    protocol: str | None = None  # the RPC protocol version it speaks
    devices: list[DeviceInfo] = []


class CpuRepackInfo(msgspec.Struct):
    """llama.cpp's extra CPU buffer types (weights repacked for AMX, AVX2, NEON) on this host."""

    host_amx: bool  # the CPU has AMX (where those buffers have crashed llama.cpp)
    build_amx: bool  # the llama.cpp build's CPU backend has AMX
    enabled: bool  # false: config cpu_repack = false (serve's --no-repack does the same)
    canary_model: str | None  # the model the canary decoded with them: --model, else the default model
    canary_serves: bool | None  # None: no model to try
    canary_result: str | None  # "served", or how the child process ended ("SIGSEGV")
    canary_buffers: list[str] = []  # the extra buffer types its load used
    crashed_before: list[str] = []  # model files the server remembers as crashing with them: "file (SIGSEGV)"


class DoctorReport(msgspec.Struct):
    fireside_version: str
    python_version: str
    python_executable: str
    platform: str  # system-machine, e.g. Linux-x86_64, Darwin-arm64
    llama_cpp_python_version: str
    backends: list[str]  # the llama.cpp build's backend registry: CPU, CUDA, Metal, ...
    gpu_offload: bool  # llama_supports_gpu_offload()
    devices: list[DeviceInfo]
    cpu_features: list[str]  # the CPU backend's flags that are on (AVX2, AVX512, NEON, ...)
    system_info: dict[str, dict[str, str]]  # llama_print_system_info(), by section
    config_file: PathInfo
    models_dir: PathInfo
    models_configured: int | None  # None: the config file cannot be read (config_error says why)
    models_with_images: list[str]  # configured models with a projector (mmproj): they read images or audio
    config_error: str | None
    default_model: str | None  # the embedded SmolLM2 GGUF, when fireside[default-model] is installed
    port: PortInfo
    hints: list[str]
    kv_cache: list[KvUse] = []  # of the server on the port, when one answers there (its /metrics)
    rpc: bool = False  # the llama.cpp build has the RPC backend (`fireside worker`, `--rpc`)
    rpc_workers: list[WorkerInfo] = []  # --rpc's and the config's, with their devices
    # the desktop's GPUs (nvidia-smi, rocminfo, vulkaninfo, Apple Silicon), each with the build it wants
    gpus_found: list[gpu_detect.GpuFound] = []
    model_plan: doctor_plan.ModelPlan | None = None  # `--model FILE`: where its tensors would go
    draft_pairs: list[str] = []  # configured models with a draft model: "id: draft file"
    cpu_repack: CpuRepackInfo | None = None


def add_command(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    doctor = commands.add_parser("doctor", help="print what this install can use (backends, GPUs, folders, port)")
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.add_argument("--host", default=DEFAULT_HOST, help="the address `fireside serve` would bind")
    doctor.add_argument("--port", type=int, default=DEFAULT_PORT, help="the port `fireside serve` would bind")
    doctor_plan.add_options(doctor)  # --model FILE and serve's placement options, --rpc among them
    return doctor


def _gpu_memory(args: argparse.Namespace) -> int | None:
    """`--gpu-memory`, else the config's (as serve takes it)."""
    from app.settings.config import ConfigError, load_config

    if args.gpu_memory is not None:
        return args.gpu_memory
    try:
        return load_config().gpu_memory
    except ConfigError:
        return None  # reported with the config


def run(args: argparse.Namespace) -> int:
    report = collect(args.host, args.port, ",".join(map(str, args.rpc)) or None)
    report.cpu_repack = cpu_repack_info(args.model or report.default_model)
    report.hints = hints(report)
    if args.model is not None:
        report.model_plan = doctor_plan.model_plan(args, _gpu_memory(args))
    if args.json:
        print(msgspec.json.format(msgspec.json.encode(report), indent=2).decode())
    else:
        print(render_text(report))
    return 0


# --- gathering ---------------------------------------------------------------------------------

def parse_system_info(text: str) -> dict[str, dict[str, str]]:
    """`llama_print_system_info()` by section: "CUDA : ARCHS = 890 | USE_GRAPHS = 1 | CPU : SSE3
    = 1 | AVX2 = 1 | ..." gives {"CUDA": {"ARCHS": "890", ...}, "CPU": {"SSE3": "1", ...}}."""
    sections: dict[str, dict[str, str]] = {}
    current = ""
    for piece in text.split("|"):
        piece = piece.strip()
        if not piece:
            continue
        if " : " in piece:
            current, piece = (part.strip() for part in piece.split(" : ", 1))
            sections.setdefault(current, {})
        key, _, value = piece.partition("=")
        if key.strip():
            sections.setdefault(current, {})[key.strip()] = value.strip()
    return sections


def cpu_features(system_info: dict[str, dict[str, str]]) -> list[str]:
    return [flag for flag, value in system_info.get("CPU", {}).items() if value == "1"]


def _version(distribution: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _llama_build() -> tuple[str, list[str], bool, list[DeviceInfo]]:
    """The system info text, backends, offload support and devices of the llama.cpp build."""
    import llama_cpp

    from backends import ggml_native
    from backends.llama_model import init_backend

    init_backend()  # routes llama.cpp's log lines to logging, off the terminal
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    offload = bool(llama_cpp.llama_supports_gpu_offload())  # also loads dynamic backends, if any
    try:
        names = ggml_native.backend_names()
        found = [_device_info(d) for d in ggml_native.devices()]
    except ggml_native.NativeFunctionMissing:
        names, found = [], []
    return info, names, offload, found


def _device_info(d: Any) -> DeviceInfo:
    return DeviceInfo(d.name, d.description, d.type, d.backend, d.free, d.total)


def port_status(host: str, port: int) -> PortInfo:
    """Whether `fireside serve` could bind host:port now. SO_REUSEADDR as uvicorn sets it on
    POSIX (a port in TIME_WAIT is free to it); never on Windows, where it would steal the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        if sys.platform != "win32":
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return PortInfo(host, port, False, error.strerror or str(error))
    return PortInfo(host, port, True)


def serving_kv(host: str, port: int) -> list[KvUse]:
    """The KV cache of each model a Fireside server on host:port has loaded (nothing when none
    answers, or it wants a key)."""
    import httpx

    try:
        response = httpx.get(f"http://{host}:{port}/metrics", timeout=2)
    except httpx.HTTPError:
        return []
    if response.status_code != 200:
        return []
    values: dict[str, dict[str, int]] = {}
    for line in response.text.splitlines():
        for name in ("fireside_kv_cache_used_bytes", "fireside_kv_cache_bytes"):
            prefix = f'{name}{{model="'
            if line.startswith(prefix):
                model, _, value = line[len(prefix):].partition('"} ')
                values.setdefault(model, {})[name] = int(float(value))
    return [KvUse(model, found.get("fireside_kv_cache_used_bytes", 0), found.get("fireside_kv_cache_bytes", 0))
            for model, found in values.items()]


def _config() -> tuple[PathInfo, PathInfo, int | None, list[str], str | None]:
    from app.settings.config import ConfigError, load_config
    from app.settings.locations import config_file, models_dir

    path, models = config_file(), models_dir()
    try:
        entries = load_config(path).models
        count, readers, error = len(entries), [entry.id for entry in entries if entry.mmproj is not None], None
    except ConfigError as failure:
        count, readers, error = None, [], str(failure)
    return PathInfo(str(path), path.is_file()), PathInfo(str(models), models.is_dir()), count, readers, error


def _default_model() -> str | None:
    from backends.llama_model import ModelLoadError
    from backends.registry import default_model_path

    try:
        return str(default_model_path())
    except ModelLoadError:
        return None


def hints(report: DoctorReport) -> list[str]:
    """What to do about what the report shows."""
    found = gpu_detect.reinstall_hints(report.gpus_found, report.backends, report.platform,
                                       report.llama_cpp_python_version)
    wanted = {gpu.backend for gpu in report.gpus_found}  # their hints name the exact build
    install = "reinstall with packaging/install.sh, which builds llama-cpp-python for this machine"
    if shutil.which("nvidia-smi") and "CUDA" not in report.backends and "cuda" not in wanted:
        found.append(f"an NVIDIA GPU driver is present but this llama.cpp build has no CUDA backend: {install}")
    if (report.platform == "Darwin-arm64" and "Metal" not in report.backends and "MTL" not in report.backends
            and "metal" not in wanted):
        found.append(f"this Mac has Apple Silicon but this llama.cpp build has no Metal backend: {install}")
    if not report.port.free:
        found.append(f"port {report.port.port} is taken ({report.port.error}): stop what uses it, "
                     f"or run `fireside serve --port N` with another")
    if report.config_error:
        found.append(f"the config file cannot be read: {report.config_error}")
    if report.rpc_workers and not report.rpc:
        found.append("RPC workers are configured but this llama.cpp build has no RPC backend: reinstall "
                     "llama-cpp-python with CMAKE_ARGS=\"-DGGML_RPC=ON\" (packaging/install.sh does)")
    repack = report.cpu_repack
    if repack is not None and repack.canary_serves is False and repack.enabled:
        found.append(f"llama.cpp's extra CPU buffers crash on this CPU ({repack.canary_result}): `fireside serve` "
                     "finds this per model and loads without them; `--no-repack` (config cpu_repack = false) "
                     "skips the check for every model")
    if report.default_model is None and not report.models_configured:
        found.append("no models: install fireside[default-model] or pass `fireside serve --model PATH.gguf`")
    return found


def _workers(given: str | None) -> list[WorkerInfo]:
    """Each RPC worker named by `--rpc` or by a configured model: whether it answers, its devices."""
    from app.settings.config import ConfigError, load_config
    from backends import rpc
    from backends.ggml_native import describe_device
    from backends.rpc_endpoint import Endpoint, parse_endpoints

    users: dict[Endpoint, list[str]] = {}
    try:
        for endpoint in parse_endpoints(given) if given else ():
            users.setdefault(endpoint, []).append("--rpc")
    except ValueError as error:
        return [WorkerInfo(given or "", ["--rpc"], False, str(error))]
    try:
        for entry in load_config().models:
            for endpoint in entry.rpc:
                users.setdefault(endpoint, []).append(entry.id)
    except ConfigError:
        pass  # reported with the config
    found = []
    for endpoint, used_by in users.items():
        try:
            version = ".".join(map(str, rpc.hello(endpoint)))
            devices = [_device_info(describe_device(dev)) for dev in rpc.CONNECTIONS.devices((endpoint,))]
        except (rpc.WorkerUnreachable, rpc.RpcUnsupported) as error:
            found.append(WorkerInfo(str(endpoint), used_by, False, str(error)))
            continue
        found.append(WorkerInfo(str(endpoint), used_by, True, None, version, devices))
    return found


def collect(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, rpc_workers: str | None = None) -> DoctorReport:
    info, names, offload, found = _llama_build()
    sections = parse_system_info(info)
    config, models, count, readers, error = _config()
    report = DoctorReport(
        fireside_version=_version("fireside"),
        python_version=platform.python_version(),
        python_executable=sys.executable,
        platform=f"{platform.system()}-{platform.machine()}",
        llama_cpp_python_version=_version("llama-cpp-python"),
        backends=names, gpu_offload=offload, devices=found,
        cpu_features=cpu_features(sections), system_info=sections,
        config_file=config, models_dir=models, models_configured=count, models_with_images=readers,
        config_error=error,
        default_model=_default_model(), port=port_status(host, port), hints=[],
    )
    if not report.port.free:
        report.kv_cache = serving_kv(host, port)
    from backends import rpc

    report.rpc = rpc.supported()
    report.rpc_workers = _workers(rpc_workers)
    report.gpus_found = gpu_detect.detect()
    report.draft_pairs = _draft_pairs()
    report.hints = hints(report)
    return report


def cpu_repack_info(model: str | Path | None) -> CpuRepackInfo:
    """Whether llama.cpp's extra CPU buffers serve here: a one-batch canary decode of `model` with
    them, in a child process (a native fault there ends only the child), and what the server
    remembers of crashes."""
    from app.settings.config import ConfigError, load_config
    from app.settings.locations import data_dir
    from backends import cpu_repack

    try:
        enabled = load_config().cpu_repack
    except ConfigError:
        enabled = True  # reported with the config
    info = CpuRepackInfo(cpu_repack.host_has_amx(), cpu_repack.build_has_amx(), enabled,
                         None if model is None else str(model), None, None)
    if model is not None and Path(model).is_file():
        result = cpu_repack.run_canary(Path(model))
        info.canary_serves, info.canary_result, info.canary_buffers = result.serves, result.reason, list(
            result.extra_buffers)
    verdicts = cpu_repack.RepackVerdicts(data_dir() / cpu_repack.REPACK_VERDICTS)
    info.crashed_before = [f"{path} ({reason})" for path, reason in verdicts.crashing()]
    return info


def _draft_pairs() -> list[str]:
    from app.settings.config import ConfigError, load_config

    try:
        return [f"{entry.id}: {entry.draft_model}" for entry in load_config().models if entry.draft_model is not None]
    except ConfigError:
        return []  # reported with the config


# --- printing ----------------------------------------------------------------------------------

def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def _path_line(label: str, info: PathInfo, missing: str) -> str:
    return f"{label}: {info.path} ({'exists' if info.exists else missing})"


def _repack_lines(info: CpuRepackInfo | None) -> list[str]:
    if info is None:
        return []
    amx = f"AMX: CPU {'yes' if info.host_amx else 'no'}, build {'yes' if info.build_amx else 'no'}"
    setting = "on" if info.enabled else "off (config cpu_repack = false)"
    lines = [f"llama.cpp's extra CPU buffers (repacked weights): {setting}; {amx}"]
    if info.canary_serves is not None:
        used = f" (using {', '.join(info.canary_buffers)})" if info.canary_buffers else ""
        verdict = "decoded" if info.canary_serves else f"crashed: {info.canary_result}; serve loads it without them"
        lines.append(f"  canary decode of {Path(info.canary_model or '').name} with them{used}: {verdict}")
    elif info.canary_model is not None:
        lines.append(f"  canary decode: {info.canary_model} not found")
    lines += [f"  remembered as crashing with them: {entry}" for entry in info.crashed_before]
    return lines


def render_text(report: DoctorReport) -> str:
    lines = [
        f"fireside {report.fireside_version} on Python {report.python_version} ({report.python_executable}), "
        f"{report.platform}",
        f"llama-cpp-python {report.llama_cpp_python_version}",
        f"  backends: {', '.join(report.backends) or 'unknown'}",
        f"  GPU offload: {'yes' if report.gpu_offload else 'no (this build runs on the CPU)'}",
        "  devices:" if report.devices else "  devices: none reported",
    ]
    for device in report.devices:
        memory = f"{_size(device.free_bytes)} free of {_size(device.total_bytes)}" if device.total_bytes else "memory unknown"
        lines.append(f"    {device.name}: {device.description} ({device.type}, {device.backend} backend), {memory}")
    lines.append(f"  CPU features: {' '.join(report.cpu_features) or 'none reported'}")
    for section, flags in report.system_info.items():
        if section != "CPU":
            lines.append(f"  {section}: {' '.join(f'{k}={v}' for k, v in flags.items())}")
    lines.append("GPUs on this desktop:" if report.gpus_found else
                 "GPUs on this desktop: none found (nvidia-smi, rocminfo, vulkaninfo)")
    lines += [f"  {line}" for line in gpu_detect.describe(report.gpus_found, report.backends)]
    lines += [
        _path_line("config file", report.config_file, "not written yet"),
        _path_line("models folder", report.models_dir, "not created yet"),
        f"models configured: {report.models_configured if report.models_configured is not None else 'unknown'}",
        f"models with an mmproj projector (they read images or audio): {', '.join(report.models_with_images) or 'none'}",
        f"models with a draft model: {'; '.join(report.draft_pairs) or 'none'}",
        f"default model: {report.default_model or 'not installed'}",
        f"port {report.port.port} on {report.port.host}: "
        + ("free" if report.port.free else f"in use ({report.port.error})"),
    ]
    lines.append(f"RPC (split a model over machines): {'yes' if report.rpc else 'no (build without -DGGML_RPC=ON)'}")
    for worker in report.rpc_workers:
        state = f"protocol {worker.protocol}" if worker.reachable else f"not usable: {worker.error}"
        lines.append(f"  RPC worker {worker.endpoint} (for {', '.join(worker.used_by)}): {state}")
        for device in worker.devices:
            lines.append(f"    {device.name}: {device.description} ({device.type}), "
                         f"{_size(device.free_bytes)} free of {_size(device.total_bytes)}")
    for use in report.kv_cache:
        lines.append(f"  KV cache of {use.model}: {use.used_bytes / (1 << 20):.1f} MiB held of "
                     f"{use.total_bytes / (1 << 20):.1f} MiB")
    lines += _repack_lines(report.cpu_repack)
    if report.model_plan is not None:
        lines += doctor_plan.render(report.model_plan)
    lines += [f"hint: {hint}" for hint in report.hints]
    return "\n".join(lines)
