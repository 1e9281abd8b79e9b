<#
.SYNOPSIS
Install Fireside with pipx and build llama-cpp-python for this Windows machine.

.DESCRIPTION
CUDA when nvidia-smi is found (CMAKE_ARGS=-DGGML_CUDA=on; needs the CUDA toolkit and Visual
Studio's C++ build tools); else HIP when AMD's HIP SDK is installed (hipconfig or $env:HIP_PATH:
CMAKE_ARGS=-DGGML_HIP=on with the GPUs' gfx targets from hipInfo, built with the SDK's clang under
Ninja as llama.cpp's docs/build.md does); else Vulkan when `vulkaninfo --summary` lists a discrete
or integrated GPU (CMAKE_ARGS=-DGGML_VULKAN=on; needs the LunarG Vulkan SDK); the CPU build
otherwise (CMAKE_ARGS=-DGGML_NATIVE=on). Each has -DGGML_RPC=on (fireside worker, fireside serve
--rpc). These are the CMAKE_ARGS llama-cpp-python's README documents. pip is told to build
llama-cpp-python from source (--no-binary), without its wheel cache (a CPU wheel built earlier
would otherwise be reused), and to reinstall it even when pipx's environment already has one.
Extra CMake options: set $env:CMAKE_ARGS; they are appended to the backend's.

.EXAMPLE
powershell -ExecutionPolicy Bypass -File packaging\install.ps1 -WithDefaultModel
.EXAMPLE
packaging\install.ps1 -Backend cpu -DryRun
.EXAMPLE
packaging\install.ps1 -Backend vulkan
#>
[CmdletBinding()]
param(
    [ValidateSet("auto", "cuda", "hip", "vulkan", "cpu")]
    [string]$Backend = "auto",
    # What pipx installs (default: this checkout; or a PyPI name, a path, a git+https:// URL).
    [string]$Spec = "",
    # Also install the embedded default model (fireside[default-model]).
    [switch]$WithDefaultModel,
    # The Python (3.11+) for Fireside's environment (default: the py launcher's 3, else python).
    [string]$Python = "",
    # Print the commands instead of running them.
    [switch]$DryRun
)

Set-StrictMode -Version Latest
$ErrorActionPreference = "Stop"

$Here = $PSScriptRoot
$Checkout = Split-Path -Parent $Here

function Write-Note([string]$Text) { Write-Host "==> $Text" }

# Run a command given as words (the executable, then its arguments).
function Invoke-Words([string[]]$Words) {
    $exe = $Words[0]
    $rest = @($Words | Select-Object -Skip 1)
    & $exe @rest
}

# Run a command given as words, or with -DryRun print it; a failure stops the install.
function Invoke-Step([string[]]$Command) {
    $line = ($Command | ForEach-Object { if ($_ -match '[\s"]') { "'" + $_ + "'" } else { $_ } }) -join " "
    if ($DryRun) {
        Write-Output "+ $line"
        return
    }
    Invoke-Words $Command
    if ($LASTEXITCODE -ne 0) { throw "failed ($LASTEXITCODE): $line" }
}

# Where AMD's HIP SDK is: $env:HIP_PATH (its installer sets it), else what hipconfig says; "" if neither.
function Get-HipPath {
    if ($env:HIP_PATH) { return $env:HIP_PATH }
    if (-not (Get-Command hipconfig -ErrorAction SilentlyContinue)) { return "" }
    try { return "$(& hipconfig -R 2> $null | Select-Object -Last 1)".Trim() } catch { return "" }
}

# The gfx targets (gfx1100, ...) the HIP SDK's hipInfo reports, ";"-separated; "" when it cannot
# say, and the build then compiles for the GPUs it finds itself.
function Get-HipTargets {
    $hipPath = Get-HipPath
    if (-not $hipPath) { return "" }
    $hipInfo = Join-Path $hipPath "bin\hipInfo.exe"
    if (-not (Test-Path $hipInfo)) { return "" }
    # Windows PowerShell turns redirected stderr into errors under "Stop": catch them.
    try { $text = & $hipInfo 2> $null | Out-String } catch { return "" }
    $targets = [regex]::Matches($text, 'gcnArchName:\s*(gfx[0-9a-f]+)') | ForEach-Object { $_.Groups[1].Value } |
        Sort-Object -Unique
    return ($targets -join ";")
}

# Whether vulkaninfo lists a discrete or integrated GPU; llvmpipe and other CPU devices do not count.
function Test-VulkanGpu {
    if (-not (Get-Command vulkaninfo -ErrorAction SilentlyContinue)) { return $false }
    try { $summary = & vulkaninfo --summary 2> $null | Out-String } catch { return $false }
    return $summary -match 'deviceType\s*=\s*(PHYSICAL_DEVICE_TYPE_)?(DISCRETE|INTEGRATED)_GPU'
}

function Get-Backend {
    if ($Backend -ne "auto") { return $Backend }
    if (Get-Command nvidia-smi -ErrorAction SilentlyContinue) { return "cuda" }
    if (Get-HipPath) { return "hip" }
    if (Test-VulkanGpu) { return "vulkan" }
    return "cpu"
}

function Get-CMakeArgs([string]$Which) {
    $args_ = switch ($Which) {
        "cuda" { "-DGGML_CUDA=on -DGGML_RPC=on" }
        "hip" {
            $targets = Get-HipTargets
            $gpuTargets = if ($targets) { " -DGPU_TARGETS=$targets" } else { "" }
            "-DGGML_HIP=on$gpuTargets -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DGGML_RPC=on"
        }
        "vulkan" { "-DGGML_VULKAN=on -DGGML_RPC=on" }
        default { "-DGGML_NATIVE=on -DGGML_RPC=on" }
    }
    if ($env:CMAKE_ARGS) { $args_ = "$args_ $env:CMAKE_ARGS" }
    return $args_
}

# The build's environment: CMAKE_ARGS, and for HIP the SDK's clang under Ninja with the SDK's bin
# folder first on PATH (the value under PATH is what goes in front of it).
function Get-BuildEnvironment([string]$Which, [string]$CMakeArgs) {
    $vars = [ordered]@{ CMAKE_ARGS = $CMakeArgs; FORCE_CMAKE = "1" }
    $hipPath = if ($Which -eq "hip") { Get-HipPath } else { "" }
    if ($hipPath) {
        $bin = Join-Path $hipPath "bin"
        $vars["HIPCXX"] = Join-Path $bin "clang.exe"
        $vars["HIP_PATH"] = $hipPath
        $vars["CMAKE_GENERATOR"] = "Ninja"
        $vars["PATH"] = "$bin;"
    }
    return $vars
}

# The Python command as words: -Python, else the py launcher's Python 3, else python.
function Get-Python {
    if ($Python) { return ,@($Python) }
    if (Get-Command py -ErrorAction SilentlyContinue) { return ,@("py", "-3") }
    if (Get-Command python -ErrorAction SilentlyContinue) { return ,@("python") }
    throw "Python not found: install Python 3.11 or newer from python.org, or pass -Python"
}

function Test-Python([string[]]$Py) {
    Invoke-Words ($Py + @("-c", "import sys; sys.exit(sys.version_info < (3, 11))"))
    if ($LASTEXITCODE -ne 0) { throw "$($Py -join ' ') is older than 3.11; Fireside needs 3.11 or newer" }
}

# The pipx command as words; installs pipx for the user when missing.
function Get-Pipx([string[]]$Py) {
    if (Get-Command pipx -ErrorAction SilentlyContinue) { return ,@("pipx") }
    # Windows PowerShell turns redirected stderr into errors under "Stop": catch them.
    try { Invoke-Words ($Py + @("-m", "pipx", "--version")) *> $null; $found = ($LASTEXITCODE -eq 0) }
    catch { $found = $false }
    if (-not $found) {
        Write-Note "installing pipx for this user"
        Invoke-Step ($Py + @("-m", "pip", "install", "--user", "pipx"))
    }
    return ,($Py + @("-m", "pipx"))
}

function Get-PackageSpec {
    $base = $Spec
    if (-not $base) {
        $base = if (Test-Path (Join-Path $Checkout "pyproject.toml")) { $Checkout } else { "fireside" }
    }
    if ($WithDefaultModel -and -not $base.EndsWith("]")) {
        if ($base -match "://" -or $base.StartsWith("git+")) { $base = "fireside[default-model] @ $base" }
        else { $base = "$base[default-model]" }
    }
    return $base
}

$which = Get-Backend
$cmakeArgs = Get-CMakeArgs $which
Write-Note "building llama-cpp-python for: $which"
if ($which -eq "cuda" -and -not (Get-Command nvcc -ErrorAction SilentlyContinue) -and -not $env:CUDA_PATH) {
    Write-Warning "nvcc (the CUDA toolkit) is not found: the CUDA build needs it (https://developer.nvidia.com/cuda-downloads)"
}
if ($which -eq "hip" -and -not (Get-HipPath)) {
    Write-Warning "AMD's HIP SDK is not found (no HIP_PATH, no hipconfig): the HIP build needs it (https://www.amd.com/en/developer/resources/rocm-hub/hip-sdk.html), or use -Backend vulkan"
}
# llama.cpp's CMake stops at once without glslc, which compiles the Vulkan shaders.
if ($which -eq "vulkan" -and -not (Get-Command glslc -ErrorAction SilentlyContinue) -and
        -not ($env:VULKAN_SDK -and (Test-Path (Join-Path $env:VULKAN_SDK "Bin\glslc.exe")))) {
    throw "the Vulkan build needs glslc and the Vulkan headers: install the LunarG Vulkan SDK (https://vulkan.lunarg.com/sdk/home#windows), or pass -Backend cpu"
}
$py = Get-Python
Test-Python $py
$pipx = Get-Pipx $py
$target = Get-PackageSpec
$pythonForPipx = if ($Python) { $Python } else { "" }

$buildEnv = Get-BuildEnvironment $which $cmakeArgs
Write-Note "installing $target with CMAKE_ARGS=`"$cmakeArgs`""
if ($DryRun) {
    $shown = foreach ($name in $buildEnv.Keys) {
        if ($name -eq "PATH") { "`$env:PATH = '$($buildEnv[$name])' + `$env:PATH" }
        else { "`$env:$name = '$($buildEnv[$name])'" }
    }
    Write-Output ("+ " + ($shown -join "; "))
}
$saved = @{}
foreach ($name in $buildEnv.Keys) {
    $saved[$name] = [Environment]::GetEnvironmentVariable($name)
    $value = if ($name -eq "PATH") { $buildEnv[$name] + $env:PATH } else { $buildEnv[$name] }
    Set-Item "Env:$name" $value
}
try {
    $install = $pipx + @("install", "--force")
    if ($pythonForPipx) { $install += @("--python", $pythonForPipx) }
    $install += @("--pip-args=--no-cache-dir --force-reinstall --no-binary=llama-cpp-python", $target)
    Invoke-Step $install
} finally {
    foreach ($name in $saved.Keys) {
        if ($null -eq $saved[$name]) { Remove-Item "Env:$name" -ErrorAction SilentlyContinue }
        else { Set-Item "Env:$name" $saved[$name] }
    }
}

if ($DryRun) {
    Invoke-Step @("fireside", "doctor")
} else {
    $bin = (Invoke-Words ($pipx + @("environment", "--value", "PIPX_BIN_DIR")) | Select-Object -Last 1).Trim()
    & (Join-Path $bin "fireside.exe") doctor
}
