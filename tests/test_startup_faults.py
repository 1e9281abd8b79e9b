"""`fireside serve` that cannot start: a port already taken, a data folder it cannot write. Each
is one `fireside: ...` line on stderr and exit code 1, before any model loads (no traceback, no
"listening on" line for a server that never listens). Both refusals come before anything loads, so
`fireside serve` runs in this process (tests/cli_runner.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.cli_runner import CliResult, run_cli
from tests.conftest import free_port


def serve(*args: str, env: dict[str, str] | None = None) -> CliResult:
    """`fireside serve ARGS` to its end, in this process."""
    return run_cli("serve", *args, env=env)


def one_line(result: CliResult) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fireside: "), result.stderr
    assert "listening on" not in result.stdout and "serving " not in result.stdout, result.stdout
    return lines[0]


def test_a_port_already_taken_is_one_line_and_exit_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(serve("--port", str(port), "--prompt-cache-disk", "0"))
    assert f"port {port} on 127.0.0.1 is already in use" in line and "--port" in line


@pytest.mark.parametrize("prompt_cache", [[], ["--prompt-cache-disk", "0"]], ids=["prompt-cache", "no-prompt-cache"])
def test_a_data_folder_that_cannot_be_written_is_one_line_and_exit_1(tmp_path: Path, prompt_cache: list[str]):
    # Under a regular file no one can make a folder, root included (chmod would not stop root).
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    data = blocker / "data"
    line = one_line(serve("--port", str(free_port()), *prompt_cache, env={"FIRESIDE_DATA_DIR": str(data)}))
    assert f"cannot write the data folder {data}" in line and "FIRESIDE_DATA_DIR" in line
