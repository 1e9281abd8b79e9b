"""`fireside models`, `fireside rm` and `fireside config path`: the model registry from the
command line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.cli.defaults import DEFAULT_PORT
from app.settings.config import ConfigError, ModelEntry, load_config, remove_model
from app.settings.locations import config_file, models_dir
from backends.model_file import gguf_parts


def add_commands(commands: argparse._SubParsersAction) -> None:
    listing = commands.add_parser("models", help="list the configured and installed models, and what is loaded")
    listing.add_argument("--port", type=int, default=DEFAULT_PORT, help="the running server to ask what is loaded")
    listing.add_argument("--api-key", default=os.environ.get("FIRESIDE_API_KEY"), help=argparse.SUPPRESS)
    remove = commands.add_parser("rm", help="remove a model from the config and delete its downloaded files")
    remove.add_argument("model", help="the model's id or alias")
    remove.add_argument("--keep-files", action="store_true", help="only remove it from the config")
    config = commands.add_parser("config", help="the config file")
    config.add_argument("action", choices=["path"], help="path: print where the config file is")


def run(args: argparse.Namespace) -> int:
    try:
        if args.command == "models":
            return _list(args)
        if args.command == "rm":
            return _remove(args)
        print(config_file())
        return 0
    except ConfigError as error:
        print(f"fireside: {error}", file=sys.stderr)
        return 1


def _loaded(port: int, api_key: str | None) -> set[str] | None:
    """The ids the server on `port` has loaded; None when no server answers."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=headers, timeout=2, trust_env=False)
        response.raise_for_status()
    except httpx.HTTPError:
        return None
    return {card["id"] for card in response.json().get("data", []) if card.get("loaded")}


def _size(path: Path) -> str:
    if not path.exists():
        return "missing"
    size = float(path.stat().st_size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


def _list(args: argparse.Namespace) -> int:
    config = load_config()
    loaded = _loaded(args.port, args.api_key)
    print(f"config: {config.path}")
    if loaded is None:
        print(f"(no server answers on port {args.port}: loaded state unknown)")
    rows = [("ID", "ALIASES", "BASE", "SIZE", "LOADED", "FILE")]  # BASE: the model a LoRA adapter applies to
    for entry in config.models:
        state = "?" if loaded is None else ("yes" if entry.id in loaded else "no")
        aliases, base = ",".join(entry.aliases) or "-", entry.base or "-"
        if entry.upstream is not None:  # runs on another server: its URL instead of a file
            rows.append((entry.id, aliases, base, "remote", state, entry.upstream.url))
            continue
        rows.append((entry.id, aliases, base, _size(entry.file), state, str(entry.file)))
    configured = {entry.file.resolve() for entry in config.models if entry.upstream is None}
    folder = models_dir()
    unconfigured = sorted(p for p in folder.rglob("*.gguf") if p.resolve() not in configured) if folder.exists() else []
    for path in unconfigured:
        rows.append(("(not configured)", "-", "-", _size(path), "-", str(path)))
    if len(rows) == 1:
        print("no models configured; `fireside pull REPO` downloads one")
        return 0
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[5])
    return 0


def _files(entry: ModelEntry) -> list[Path]:
    """The entry's downloaded files under the models folder (never the user's own files elsewhere)."""
    folder = models_dir().resolve()
    paths = [*gguf_parts(entry.file), *([entry.mmproj] if entry.mmproj and entry.mmproj.exists() else [])]
    return [p for p in paths if p.resolve().is_relative_to(folder)]


def _remove(args: argparse.Namespace) -> int:
    config = load_config()
    entry = config.find(args.model)
    if entry is None:
        print(f"fireside: no model {args.model!r} in {config.path}", file=sys.stderr)
        return 1
    files = [] if args.keep_files else _files(entry)
    remove_model(entry.id)
    print(f"removed {entry.id} from {config.path}")
    for path in files:
        path.unlink()
        print(f"deleted {path}")
        _prune(path.parent)
    return 0


def _prune(folder: Path) -> None:
    """Remove folders the deletion left empty, up to the models folder."""
    root = models_dir().resolve()
    folder = folder.resolve()
    while folder != root and folder.is_relative_to(root) and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
