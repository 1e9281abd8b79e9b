"""Where Fireside keeps its config file and downloaded models: the platform's own folders
(XDG on Linux, ~/Library on macOS, %APPDATA% on Windows), or `FIRESIDE_CONFIG_DIR` /
`FIRESIDE_MODELS_DIR` / `FIRESIDE_DATA_DIR` when set (tests, portable installs)."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_config_path, user_data_path

APP_NAME = "fireside"


def config_dir() -> Path:
    override = os.environ.get("FIRESIDE_CONFIG_DIR")
    return Path(override) if override else user_config_path(APP_NAME, appauthor=False)


def config_file() -> Path:
    return config_dir() / "config.toml"


def models_dir() -> Path:
    override = os.environ.get("FIRESIDE_MODELS_DIR")
    return Path(override) if override else user_data_path(APP_NAME, appauthor=False) / "models"


def data_dir() -> Path:
    """What the server keeps between runs besides models: stored responses, its signing key."""
    override = os.environ.get("FIRESIDE_DATA_DIR")
    return Path(override) if override else user_data_path(APP_NAME, appauthor=False)
