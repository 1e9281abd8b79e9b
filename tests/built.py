"""Models the tests generate (GGUFs with another template, vocabulary-only GGUFs, projectors),
built once and cached by content.

`built(name, make, *inputs)` runs `make(folder)` into a fresh folder unless a folder built from the
same inputs is already in the test cache. The key is a hash of the maker's source file, the
`gguf` package's version and every input: files by their bytes (hashed once per process), other
values by their text. A build goes to a temporary folder renamed into place when it is complete,
so another test process (pytest-xdist) never reads a half-written file, and two processes that
build the same key at once both end with the same complete folder.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import cache
from importlib.metadata import version
from pathlib import Path

CACHE = Path(os.environ.get("FIRESIDE_TEST_CACHE", Path.home() / ".cache" / "fireside-tests"))


@cache
def file_digest(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _key(make: Callable, inputs: tuple[object, ...]) -> str:
    digest = hashlib.sha256(Path(inspect.getfile(make)).read_bytes())
    digest.update(version("gguf").encode())
    for value in inputs:
        digest.update(b"\0")
        digest.update(file_digest(Path(value)).encode() if isinstance(value, Path) else repr(value).encode())
    return digest.hexdigest()[:20]


def built(name: str, make: Callable[[Path], object], *inputs: object) -> Path:
    """The folder `make` wrote for these inputs (files are `Path`s; everything `make` reads must
    be among `inputs`, or be its own source file)."""
    folder = CACHE / f"{name}-{_key(make, inputs)}"
    if folder.is_dir():
        return folder
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=CACHE))
    try:
        make(partial)
        try:
            partial.rename(folder)
        except OSError:  # another process finished the same build first: its folder is as good
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


# ---- the generated models the tests share ----------------------------------------------------------

def tiny_vlm() -> tuple[Path, Path]:
    """SmolLM2 and the tiny gemma3-type projector (tests/fixtures/make_tiny_vlm.py)."""
    from backends.registry import default_model_path
    from tests.fixtures.make_tiny_vlm import make_tiny_vlm

    return default_model_path(), built("tiny-vlm", make_tiny_vlm) / "mmproj.gguf"


def tiny_audio() -> tuple[Path, Path]:
    """SmolLM2 and the tiny ultravox-type audio projector (tests/fixtures/make_tiny_audio.py)."""
    from backends.registry import default_model_path
    from tests.fixtures.make_tiny_audio import make_tiny_audio

    return default_model_path(), built("tiny-audio", make_tiny_audio) / "mmproj-audio.gguf"


def tiny_qwen2vl() -> tuple[Path, Path]:
    """The tiny Qwen2-VL text model and its projector (tests/fixtures/make_tiny_qwen2vl.py)."""
    from backends.registry import default_model_path
    from tests.fixtures.make_tiny_qwen2vl import make_tiny_qwen2vl

    folder = built("tiny-qwen2vl", make_tiny_qwen2vl, default_model_path())
    return folder / "qwen2vl-tiny.gguf", folder / "mmproj-qwen2vl-tiny.gguf"


def with_template(model: Path, template: Path) -> Path:
    """A copy of `model` whose GGUF carries `template` as its chat template."""
    import subprocess
    import sys

    def make(folder: Path) -> None:
        subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(model), str(folder / model.name),
                        "--chat-template-file", str(template), "--force"], check=True, capture_output=True, timeout=120)

    return built(f"{model.stem}-{template.stem}"[:80], make, model, template) / model.name


def tiny_hybrid() -> Path:
    """The tiny LFM2-type hybrid model with SmolLM2's vocabulary (tests/fixtures/make_tiny_hybrid.py)."""
    from backends.registry import default_model_path
    from tests.fixtures.make_tiny_hybrid import make_tiny_hybrid

    return built("tiny-hybrid", make_tiny_hybrid, default_model_path()) / "tiny-hybrid.gguf"
