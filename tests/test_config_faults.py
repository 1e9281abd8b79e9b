"""Faults of the config file: a syntax error or an unknown key stops start-up naming the line and the
key; an edit made while the server runs applies at the model's next load and shows in `fireside
models` at once, and a config broken mid-edit is never half-read; every write the project makes to
the config replaces it at once. Real `fireside serve` processes, real HTTP, the real SmolLM2 GGUF; servers
of their own, since the tests edit their config files under them. The commands that serve nothing
(`models`, `rm`, a refused `serve`) run in this process (tests/cli_runner.py)."""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import atomic_file
from app.settings.config import add_model, load_config, remove_model
from tests.cli_runner import CliResult, run_cli
from tests.conftest import (
    OutputReader,
    RunningServer,
    default_model_path,
    free_port,
    start_server,
    stop_server,
)

MODEL = default_model_path()


def fireside(*args: str, config_dir: Path) -> CliResult:
    """The `fireside` command with `config_dir` as its config folder, in this process."""
    return run_cli(*args, env={"FIRESIDE_CONFIG_DIR": str(config_dir), "FIRESIDE_MODELS_DIR": str(config_dir / "models")})


def model(model_id: str, *lines: str) -> str:
    return "\n".join(["[[models]]", f'id = "{model_id}"', f'file = "{MODEL}"', *lines]) + "\n"


# ---- start-up -----------------------------------------------------------------------------------------


def test_a_syntax_error_stops_start_up_naming_the_line(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('max_loaded = 2\n\n[[models]]\nid = "a"\nfile =\nkeep_alive = "5m"\n')
    result = fireside("serve", "--config", str(config), "--port", str(free_port()), config_dir=tmp_path)
    assert result.returncode == 1
    assert f"fireside: {config}:5: invalid TOML" in result.stderr
    assert "5 | file =" in result.stderr  # the line itself, as it is in the file


@pytest.mark.parametrize(("text", "line", "complaint"), [
    ("max_loaded = 1\nmax_load = 2\n", 2, "unknown key 'max_load' (did you mean 'max_loaded'?"),
    ("[server]\nport = 1\n", 1, "unknown key 'server' ("),
    (model("a") + "\n" + model("b", "contxt_size = 512"), 8,
     "models[1]: unknown key 'contxt_size' (did you mean 'context_size'?"),
    (model("a", "[models.sampling]", "temperature = 0.5", "temprature = 1"), 6,
     "models[0].sampling: unknown key 'temprature' (did you mean 'temperature'?"),
    (model("a", 'gpu_layers = "lots"'), 4, "models[0].gpu_layers: gpu_layers is a number of layers"),
    (model("a", "id = \"again\""), 4, "invalid TOML: models[0].id is set twice"),
])
def test_a_wrong_key_stops_start_up_and_fireside_models_naming_the_line_and_the_key(
        tmp_path: Path, text: str, line: int, complaint: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text)
    result = fireside("serve", "--config", str(config), "--port", str(free_port()), config_dir=tmp_path)
    assert result.returncode == 1
    assert f"fireside: {config}:{line}: {complaint}" in result.stderr
    listing = fireside("models", "--port", "1", config_dir=tmp_path)  # the default config path is this one
    assert listing.returncode == 1 and f"{config}:{line}: {complaint}" in listing.stderr


# ---- edits while the server runs ------------------------------------------------------------------------


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[RunningServer, OutputReader, Path]]:
    """A server on a config with `a` (unloaded as soon as it is idle, 3 tokens by default) and `b`."""
    config = tmp_path / "config.toml"
    config.write_text(model("a", 'keep_alive = "0"', "[models.sampling]", "max_tokens = 3") + "\n" + model("b"))
    server = start_server("--config", str(config), "--parallel", "1", "--ctx-size", "512")
    output = server.output
    try:
        yield server, output, config
    finally:
        stop_server(server)


def tokens_of_a(client: httpx.Client) -> int:
    """`a`'s answer to a request that leaves max_tokens out, once `a` has unloaded again."""
    response = client.post("/v1/completions", json={"model": "a", "prompt": "Once upon a time", "ignore_eos": True})
    assert response.status_code == 200, response.text
    deadline = time.monotonic() + 60  # keep_alive 0: it unloads once the answer is done
    while loaded(client)["a"] and time.monotonic() < deadline:
        time.sleep(0.1)
    return response.json()["usage"]["completion_tokens"]


def loaded(client: httpx.Client) -> dict[str, bool]:
    return {card["id"]: card["loaded"] for card in client.get("/v1/models").json()["data"]}


def test_an_edit_applies_at_the_next_load_and_fireside_models_shows_it(live, tmp_path: Path) -> None:
    server, _, config = live
    port = server.base_url.rsplit(":", 1)[1]
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        assert tokens_of_a(client) == 3
        config.write_text(config.read_text().replace("max_tokens = 3", "max_tokens = 5"))  # as an editor saves it
        assert tokens_of_a(client) == 5
        add_model({"id": "c", "file": MODEL}, config)  # what `fireside pull` does, here while serving
        assert client.post("/v1/completions", json={"model": "b", "prompt": "Hi", "max_tokens": 1}).status_code == 200
    listing = fireside("models", "--port", port, config_dir=tmp_path)
    assert listing.returncode == 0, listing.stderr
    loaded_column = {line.split()[0]: line.split()[-2] for line in listing.stdout.splitlines()[2:]}  # ... LOADED FILE
    assert loaded_column == {"a": "no", "b": "yes", "c": "no"}


def test_a_config_broken_mid_edit_keeps_the_settings_the_model_had(live, tmp_path: Path) -> None:
    server, output, config = live
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        assert tokens_of_a(client) == 3
        good = config.read_text()
        config.write_text(good.replace("max_tokens = 3", "max_tokens = 5").replace('keep_alive = "0"', 'keep_alive ='))
        assert tokens_of_a(client) == 3  # neither the edit's max_tokens nor anything else of a half-read file
        warning = output.wait_for(lambda line: "keeping the settings it had" in line)
        assert warning is not None and f"{config}:4: invalid TOML" in warning
        listing = fireside("models", "--port", "1", config_dir=tmp_path)
        assert listing.returncode == 1 and f"{config}:4: invalid TOML" in listing.stderr
        config.write_text(good.replace("max_tokens = 3", "max_tokens = 4"))  # the edit, saved whole
        assert tokens_of_a(client) == 4


def test_a_model_removed_from_the_config_while_serving_is_a_503_and_the_others_serve(live) -> None:
    server, _, config = live
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        assert remove_model("a", config)
        response = client.post("/v1/completions", json={"model": "a", "prompt": "Hi", "max_tokens": 1})
        assert response.status_code == 503
        assert f"a is no longer in the config file {config}" in response.json()["error"]["message"]
        assert client.post("/v1/completions", json={"model": "b", "prompt": "Hi", "max_tokens": 1}).status_code == 200


# ---- every write replaces the file at once ----------------------------------------------------------------


def test_config_edits_replace_the_file_at_once(tmp_path: Path) -> None:
    """A reader that opened the config before an edit reads the old config whole; an edit in place
    would have emptied it under the reader (open with O_TRUNC) and then filled it with the new."""
    path = tmp_path / "config.toml"
    path.write_text("# my models\nmax_loaded = 1\n" + model("x"))
    for edit in (lambda: add_model({"id": "y", "file": MODEL}, path), lambda: remove_model("x", path)):
        before = path.read_text()
        with path.open() as reader:
            inode = path.stat().st_ino
            edit()
            assert reader.read() == before
        assert path.stat().st_ino != inode
        assert os.listdir(tmp_path) == ["config.toml"]  # no temporary file left beside it
    assert [m.id for m in load_config(path).models] == ["y"] and path.read_text().startswith("# my models\n")


def test_fireside_rm_replaces_the_config_at_once(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(model("x") + "\n" + model("y"))
    before = path.read_text()
    with path.open() as reader:
        result = fireside("rm", "x", "--keep-files", config_dir=tmp_path)
        assert result.returncode == 0, result.stderr
        assert reader.read() == before
    assert [m.id for m in load_config(path).models] == ["y"]
    assert sorted(os.listdir(tmp_path)) == ["config.toml"]


def test_a_write_that_fails_midway_leaves_the_config_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.toml"
    path.write_text(model("x"))

    def disk_full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_file.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        add_model({"id": "y", "file": MODEL}, path)
    assert path.read_text() == model("x") and os.listdir(tmp_path) == ["config.toml"]


def test_a_config_behind_a_symlink_stays_a_link_with_its_permissions(tmp_path: Path) -> None:
    """Dotfiles folders link the config into place: the edit replaces the file the link points to."""
    real = tmp_path / "dotfiles" / "fireside.toml"
    real.parent.mkdir()
    real.write_text(model("x"))
    real.chmod(0o640)
    link = tmp_path / "config" / "config.toml"
    link.parent.mkdir()
    link.symlink_to(real)
    add_model({"id": "y", "file": MODEL}, link)
    assert link.is_symlink() and link.resolve() == real
    assert [m.id for m in load_config(link).models] == ["x", "y"]
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(os.listdir(real.parent)) == ["fireside.toml"]
