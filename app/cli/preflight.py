"""What `fireside serve` checks before loading any model: that it can listen where it was told to,
and that it can write its data folder. Either failing is one line and exit code 1 at once, rather
than a minute later once the models have loaded (uvicorn's own message for a taken port comes
only then, after "listening on ..."), or a traceback, or a 500 on the first request that stores
something."""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from pathlib import Path

from app.settings.locations import data_dir


def startup_problem(host: str, port: int) -> str | None:
    """What stops the server from starting, in one line; None when nothing does."""
    return listen_problem(host, port) or _data_dir_problem(data_dir())


def listen_problem(host: str, port: int) -> str | None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn picks it
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            if os.name == "posix":  # as asyncio binds: a port left in TIME_WAIT is free (on Windows
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # it would take a used one)
            sock.bind((host, port))
    except socket.gaierror as error:
        return f"cannot listen on {host}:{port}: no such address ({error.strerror}); check --host"
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            return (f"port {port} on {host} is already in use (another fireside, or another program); "
                    "stop it or pick another --port")
        return f"cannot listen on {host}:{port}: {error.strerror or error}; check --host and --port"
    return None


def _data_dir_problem(folder: Path) -> str | None:
    """The folder made if missing, and a file created and removed in it: the stored responses,
    the signing key and the prompt caches go there."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return (f"cannot write the data folder {folder} ({error.strerror or error}); "
                "set FIRESIDE_DATA_DIR to a folder this user can write")
    return None
