<#
.SYNOPSIS
Install Fireside with pipx and build llama-cpp-python for this Windows machine.

.DESCRIPTION
CUDA when nvidia-smi is found (CMAKE_ARGS=-DGGML_CUDA=on; needs the CUDA toolkit and Visual
Studio's C++ build tools), the CPU build otherwise (CMAKE_ARGS=-DGGML_NATIVE=on), each with
-DGGML_RPC=on (fireside worker, fireside serve --rpc). These are the CMAKE_ARGS llama-cpp-python's
README documents. pip is told to build llama-cpp-python from source
(--no-binary), without its wheel cache (a CPU wheel built earlier would otherwise be reused), and
to reinstall it even when pipx's environment already has one. Extra CMake options: set
$env:CMAKE_ARGS; they are appended to the backend's.

.EXAMPLE
powershell -ExecutionPolicy Bypass -File packaging\install.ps1 -WithDefaultModel
.EXAMPLE
packaging\install.ps1 -Backend cpu -DryRun
#>
[CmdletBinding()]
param(
    [ValidateSet("auto", "cuda", "cpu")]
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

function Get-Backend {
    if ($Backend -ne "auto") { return $Backend }
    if (Get-Command nvidia-smi -ErrorAction SilentlyContinue) { return "cuda" }
    return "cpu"
}

function Get-CMakeArgs([string]$Which) {
    $args_ = switch ($Which) {
        "cuda" { "-DGGML_CUDA=on -DGGML_RPC=on" }
        default { "-DGGML_NATIVE=on -DGGML_RPC=on" }
    }
    if ($env:CMAKE_ARGS) { $args_ = "$args_ $env:CMAKE_ARGS" }
    return $args_
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
$py = Get-Python
Test-Python $py
$pipx = Get-Pipx $py
$target = Get-PackageSpec
$pythonForPipx = if ($Python) { $Python } else { "" }

Write-Note "installing $target with CMAKE_ARGS=`"$cmakeArgs`""
if ($DryRun) { Write-Output "+ `$env:CMAKE_ARGS = '$cmakeArgs'; `$env:FORCE_CMAKE = '1'" }
$saved = $env:CMAKE_ARGS
$env:CMAKE_ARGS = $cmakeArgs
$env:FORCE_CMAKE = "1"
try {
    $install = $pipx + @("install", "--force")
    if ($pythonForPipx) { $install += @("--python", $pythonForPipx) }
    $install += @("--pip-args=--no-cache-dir --force-reinstall --no-binary=llama-cpp-python", $target)
    Invoke-Step $install
} finally {
    $env:CMAKE_ARGS = $saved
    Remove-Item Env:FORCE_CMAKE -ErrorAction SilentlyContinue
}

if ($DryRun) {
    Invoke-Step @("fireside", "doctor")
} else {
    $bin = (Invoke-Words ($pipx + @("environment", "--value", "PIPX_BIN_DIR")) | Select-Object -Last 1).Trim()
    & (Join-Path $bin "fireside.exe") doctor
}
