#!/usr/bin/env bash
# Install Fireside with pipx and build llama-cpp-python for this machine (Linux and macOS):
#   CUDA   where nvidia-smi is present         CMAKE_ARGS=-DGGML_CUDA=on
#   Metal  on Apple Silicon (arm64 Darwin)     CMAKE_ARGS=-DCMAKE_OSX_ARCHITECTURES=arm64 ... -DGGML_METAL=on
#   HIP    an AMD GPU with ROCm (rocminfo lists a gfx agent, or hipconfig without rocminfo)
#                                              CMAKE_ARGS=-DGGML_HIP=on -DGPU_TARGETS=gfx1100 (rocminfo's),
#                                              HIPCXX="$(hipconfig -l)/clang" HIP_PATH="$(hipconfig -R)"
#   Vulkan any other GPU `vulkaninfo --summary` lists (AMD without ROCm, Intel Arc or integrated, ...)
#                                              CMAKE_ARGS=-DGGML_VULKAN=on (needs glslc and the Vulkan headers)
#   CPU    otherwise                           CMAKE_ARGS=-DGGML_NATIVE=on (tuned for this CPU)
# These are the CMAKE_ARGS llama-cpp-python's README and llama.cpp's docs/build.md document, each
# with -DGGML_RPC=on (llama.cpp's RPC backend: `fireside worker` and `fireside serve --rpc`).
# Precedence is that order: one build serves one kind of GPU. pip is told to build
# llama-cpp-python from source (--no-binary), without its wheel cache (a CPU wheel built earlier
# would otherwise be reused) and to reinstall it even when pipx's environment already has one.
#
# Usage: packaging/install.sh [options]
#   --backend auto|cuda|metal|hip|vulkan|cpu
#                                   what to build for (default: auto, detected as above)
#   --spec SPEC                     what pipx installs (default: this checkout; or a PyPI name,
#                                   a path, a git+https:// URL)
#   --with-default-model            also install the embedded default model (fireside[default-model])
#   --python PYTHON                 the Python (3.11+) for Fireside's environment (default: python3)
#   --service                       then run `fireside serve` at login (systemd user unit / launchd agent)
#   --dry-run                       print the commands instead of running them
# Extra CMake options: set CMAKE_ARGS; they are appended to the backend's.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
checkout="$(dirname "$here")"

backend=auto
spec=""
with_default_model=0
python=python3
service=0
dry_run=0

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

die() {
    printf 'install.sh: %s\n' "$*" >&2
    exit 1
}

note() {
    printf '==> %s\n' "$*"
}

warn() {
    printf 'install.sh: warning: %s\n' "$*" >&2
}

# One argument as the shell would need it typed: bare when safe, else in single quotes (only
# the value of a NAME=value word, so that `env CMAKE_ARGS='...'` reads as typed).
quote() {
    local word="$1" name=""
    if [[ "$word" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
        name="${BASH_REMATCH[0]}"
        word="${word#"$name"}"
    fi
    case "$word" in
        '' | *[!A-Za-z0-9_./=:@%+,-]*) printf "%s'%s'" "$name" "$(printf '%s' "$word" | sed "s/'/'\\\\''/g")" ;;
        *) printf '%s%s' "$name" "$word" ;;
    esac
}

# Run a command, or with --dry-run print it (prefixed with "+ ").
run() {
    if [ "$dry_run" = 1 ]; then
        local line="+" arg
        for arg in "$@"; do
            line="$line $(quote "$arg")"
        done
        printf '%s\n' "$line"
    else
        "$@"
    fi
}

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --backend) [ $# -ge 2 ] || die "--backend needs a value"; backend="$2"; shift 2 ;;
            --backend=*) backend="${1#*=}"; shift ;;
            --spec) [ $# -ge 2 ] || die "--spec needs a value"; spec="$2"; shift 2 ;;
            --spec=*) spec="${1#*=}"; shift ;;
            --python) [ $# -ge 2 ] || die "--python needs a value"; python="$2"; shift 2 ;;
            --python=*) python="${1#*=}"; shift ;;
            --with-default-model) with_default_model=1; shift ;;
            --service) service=1; shift ;;
            --dry-run) dry_run=1; shift ;;
            -h | --help) usage; exit 0 ;;
            *) die "unknown option: $1 (see --help)" ;;
        esac
    done
    case "$backend" in
        auto | cuda | metal | hip | vulkan | cpu) ;;
        *) die "--backend is auto, cuda, metal, hip, vulkan or cpu, not $backend" ;;
    esac
}

is_apple_silicon() {
    [ "$(uname -s)" = Darwin ] || return 1
    [ "$(uname -m)" = arm64 ] && return 0
    # A shell under Rosetta reports x86_64 on Apple Silicon hardware.
    [ "$(sysctl -n hw.optional.arm64 2>/dev/null || true)" = 1 ]
}

# The gfx targets (gfx1100, ...) of the GPU agents rocminfo lists, separated by ";" as CMake's
# lists are; empty without rocminfo, or when it cannot open /dev/kfd (not in the render group).
rocm_gpu_targets() {
    command -v rocminfo >/dev/null 2>&1 || return 0
    # A GPU agent's "Name:" is its target; its ISA's name (amdgcn-amd-amdhsa--gfx1100) is skipped.
    { rocminfo 2>/dev/null || true; } \
        | sed -n 's/^[[:space:]]*Name:[[:space:]]*\(gfx[0-9a-f]*\)[[:space:]]*$/\1/p' \
        | sort -u | paste -sd ';' -
}

has_rocm_gpu() {
    [ -n "$(rocm_gpu_targets)" ] && return 0
    # ROCm without rocminfo: the HIP build finds the GPUs itself.
    ! command -v rocminfo >/dev/null 2>&1 && command -v hipconfig >/dev/null 2>&1
}

# Whether vulkaninfo lists a discrete or integrated GPU; llvmpipe and other CPU devices do not count.
has_vulkan_gpu() {
    command -v vulkaninfo >/dev/null 2>&1 || return 1
    { vulkaninfo --summary 2>/dev/null || true; } \
        | grep -Eq 'deviceType[[:space:]]*=[[:space:]]*(PHYSICAL_DEVICE_TYPE_)?(DISCRETE|INTEGRATED)_GPU'
}

detect_backend() {
    if command -v nvidia-smi >/dev/null 2>&1; then
        echo cuda
    elif is_apple_silicon; then
        echo metal
    elif has_rocm_gpu; then
        echo hip
    elif has_vulkan_gpu; then
        echo vulkan
    else
        echo cpu
    fi
}

cmake_args_for() {
    case "$1" in
        cuda) echo "-DGGML_CUDA=on -DGGML_RPC=on" ;;
        metal) echo "-DCMAKE_OSX_ARCHITECTURES=arm64 -DCMAKE_APPLE_SILICON_PROCESSOR=arm64 -DGGML_METAL=on -DGGML_RPC=on" ;;
        hip)
            local targets
            targets="$(rocm_gpu_targets)"
            # Without GPU_TARGETS the build is for the GPUs of this machine (llama.cpp's docs/build.md).
            echo "-DGGML_HIP=on${targets:+ -DGPU_TARGETS=$targets} -DGGML_RPC=on"
            ;;
        vulkan) echo "-DGGML_VULKAN=on -DGGML_RPC=on" ;;
        cpu) echo "-DGGML_NATIVE=on -DGGML_RPC=on" ;;
    esac
}

# Warnings about what the build will need, so that a failure half an hour in is not a surprise.
check_toolchain() {
    if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1 && ! command -v clang++ >/dev/null 2>&1; then
        warn "no C++ compiler found: llama-cpp-python is compiled during the install (Debian/Ubuntu: apt install build-essential; macOS: xcode-select --install)"
    fi
    case "$1" in
        cuda)
            if ! nvidia-smi -L >/dev/null 2>&1; then
                warn "nvidia-smi is present but lists no GPU; the CUDA build may not find one at run time"
            fi
            if ! command -v nvcc >/dev/null 2>&1; then
                if [ -x /usr/local/cuda/bin/nvcc ]; then
                    export CUDACXX=/usr/local/cuda/bin/nvcc
                    note "using the CUDA compiler at $CUDACXX"
                else
                    warn "nvcc (the CUDA toolkit) is not on PATH: the CUDA build needs it (https://developer.nvidia.com/cuda-downloads)"
                fi
            fi
            ;;
        metal)
            if [ "$(uname -m)" != arm64 ]; then
                warn "this shell runs under Rosetta (x86_64): use an arm64 Python (--python) or the Metal build will not load"
            fi
            ;;
        hip) check_hip ;;
        vulkan)
            # llama.cpp's CMake stops at once without glslc, which compiles the Vulkan shaders.
            if ! command -v glslc >/dev/null 2>&1 && ! [ -x "${VULKAN_SDK:-/nonexistent}/bin/glslc" ]; then
                die "the Vulkan build needs glslc and the Vulkan headers: install them (Debian/Ubuntu: sudo apt install glslc libvulkan-dev spirv-headers; elsewhere the LunarG Vulkan SDK, https://vulkan.lunarg.com/sdk/home) or pass --backend cpu"
            fi
            ;;
    esac
}

# The compiler and ROCm folder llama.cpp's docs/build.md give a HIP build, from hipconfig (unless
# HIPCXX and HIP_PATH are set already).
check_hip() {
    if ! command -v hipconfig >/dev/null 2>&1; then
        if [ -z "${HIPCXX:-}" ]; then
            warn "hipconfig (ROCm's HIP SDK) is not on PATH: the HIP build needs ROCm (https://rocm.docs.amd.com/projects/install-on-linux/en/latest/), or use --backend vulkan"
        fi
        return 0
    fi
    local clang_dir root
    clang_dir="$(hipconfig -l 2>/dev/null || true)"
    root="$(hipconfig -R 2>/dev/null || true)"
    if [ -z "${HIPCXX:-}" ] && [ -n "$clang_dir" ]; then
        export HIPCXX="$clang_dir/clang"
    fi
    if [ -z "${HIP_PATH:-}" ] && [ -n "$root" ]; then
        export HIP_PATH="$root"
    fi
    note "using the HIP compiler at ${HIPCXX:-unknown} (ROCm at ${HIP_PATH:-unknown})"
}

check_python() {
    command -v "$python" >/dev/null 2>&1 || die "$python not found: install Python 3.11 or newer, or pass --python"
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$python is $("$python" -c 'import platform; print(platform.python_version())'); Fireside needs 3.11 or newer"
}

# The pipx command, as words in the global array `pipx`; installs pipx for the user when missing.
find_pipx() {
    if command -v pipx >/dev/null 2>&1; then
        pipx=(pipx)
    elif "$python" -m pipx --version >/dev/null 2>&1; then
        pipx=("$python" -m pipx)
    else
        note "installing pipx for this user"
        run "$python" -m pip install --user pipx
        pipx=("$python" -m pipx)
    fi
}

# What pipx installs: the spec given, with the default-model extra when asked for.
package_spec() {
    local base="$spec"
    if [ -z "$base" ]; then
        if [ -f "$checkout/pyproject.toml" ]; then
            base="$checkout"
        else
            base=fireside
        fi
    fi
    if [ "$with_default_model" = 1 ]; then
        case "$base" in
            *\]) ;;  # already names its extras
            *://* | git+*) base="fireside[default-model] @ $base" ;;
            *) base="${base}[default-model]" ;;
        esac
    fi
    printf '%s\n' "$base"
}

install_fireside() {
    local cmake_args="$1" target="$2"
    note "installing $target with CMAKE_ARGS=\"$cmake_args\""
    local environment=(CMAKE_ARGS="$cmake_args" FORCE_CMAKE=1)
    if [ -n "${CUDACXX:-}" ]; then
        environment+=(CUDACXX="$CUDACXX")
    fi
    if [ "$backend" = hip ]; then
        [ -z "${HIPCXX:-}" ] || environment+=(HIPCXX="$HIPCXX")
        [ -z "${HIP_PATH:-}" ] || environment+=(HIP_PATH="$HIP_PATH")
    fi
    run env "${environment[@]}" "${pipx[@]}" install --force --python "$python" \
        "--pip-args=--no-cache-dir --force-reinstall --no-binary=llama-cpp-python" "$target"
}

install_service() {
    if [ "$(uname -s)" = Darwin ]; then
        local agents="$HOME/Library/LaunchAgents" plist=dev.fireside.serve.plist
        run mkdir -p "$agents" "$HOME/Library/Logs"
        run cp "$here/launchd/$plist" "$agents/$plist"
        run launchctl bootout "gui/$(id -u)/dev.fireside.serve" || true
        run launchctl bootstrap "gui/$(id -u)" "$agents/$plist"
        note "fireside serve runs at login; logs: ~/Library/Logs/fireside.log"
    else
        local units="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
        run mkdir -p "$units"
        run cp "$here/systemd/fireside.service" "$units/fireside.service"
        run systemctl --user daemon-reload
        run systemctl --user enable --now fireside
        note "fireside serve runs at login; logs: journalctl --user -u fireside"
    fi
}

main() {
    parse_args "$@"
    if [ "$backend" = auto ]; then
        backend="$(detect_backend)"
    fi
    local cmake_args
    cmake_args="$(cmake_args_for "$backend")${CMAKE_ARGS:+ $CMAKE_ARGS}"
    note "building llama-cpp-python for: $backend"
    check_python
    check_toolchain "$backend"
    find_pipx
    install_fireside "$cmake_args" "$(package_spec)"
    if [ "$service" = 1 ]; then
        install_service
    fi
    if [ "$dry_run" = 1 ]; then
        run fireside doctor
    else
        "$("${pipx[@]}" environment --value PIPX_BIN_DIR)/fireside" doctor
    fi
}

main "$@"
