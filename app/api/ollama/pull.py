"""`POST /api/pull` through the pull library that `fireside pull` uses too (`app.hub`): the model
comes from the Hugging Face Hub (Ollama's own library is not a source Fireside reads), is checked
against the Hub's sha256, added to the config and served at once, under its `fireside pull` id and under the name it was pulled as.

Names: `owner/repo`, `owner/repo/file.gguf`, `hf.co/owner/repo` or a huggingface.co URL, with an
optional `:QUANT` tag as Ollama writes Hub models (`hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M`);
`:latest` means no tag. Progress streams as Ollama's does: `pulling manifest`, then per file
`pulling <digest>` objects with `digest`, `total` and `completed` (bytes), then `verifying sha256
digest`, `writing manifest`, `success`; a failure midway is an `{"error": ...}` object. A LoRA adapter
GGUF is refused after its download (nothing is registered): a pull names no base model for it, and
`fireside pull --base` adds it (finding the file already in place).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tqdm.std import tqdm

from app import hub
from app.api.ollama.wire import OllamaErrorResponse, OllamaProgressResponse
from app.pipeline.errors import ApiError, BadRequest
from app.settings.config import ConfigError, load_config, served_spec
from backends.llama_model import ModelLoadError
from backends.model_file import gguf_parts
from backends.registry import ModelRegistry, ModelSpec

Report = Callable[[OllamaProgressResponse], None]


def parse_name(name: str) -> tuple[hub.Target, str | None]:
    """The Hub target and quant an Ollama-style name means (400 for an Ollama library name)."""
    text, quant = name.strip(), None
    last = text.rsplit("/", 1)[-1]
    if ":" in last and not text.lower().startswith(("http://", "https://")):
        text, quant = text.rsplit(":", 1)
        quant = None if quant == "latest" else quant
    try:
        target = hub.parse_target(text)
    except hub.PullError:
        raise BadRequest(f"{name!r} is not a Hugging Face repo: Fireside pulls GGUF models from the Hub, named as "
                         "owner/repo[:QUANT], owner/repo/file.gguf or hf.co/owner/repo:QUANT", param="model") from None
    return target, quant


def _progress_bar(report: Report, label: str, digest: str) -> type[tqdm]:
    """A tqdm class that draws nothing and reports each update as an Ollama progress object."""

    class Progress(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self.done = int(kwargs.get("initial") or 0)
            self._report()

        def _report(self) -> None:
            report(OllamaProgressResponse(f"pulling {label}", digest=digest, total=int(self.total or 0),
                                    completed=self.done))

        def update(self, n: float | None = 1) -> bool | None:
            self.done += int(n or 0)
            self._report()
            return None

    return Progress


def _spec(model_id: str) -> ModelSpec:
    """The config's new entry as the registry serves it (as `fireside serve` reads config models)."""
    entry = load_config().find(model_id)
    assert entry is not None
    return served_spec(entry)


def run_pull(name: str, target: hub.Target, quant: str | None, report: Report) -> ModelSpec:
    """List, choose, download with progress, verify, register in the config (blocking: a thread)."""
    report(OllamaProgressResponse("pulling manifest"))
    with hub.hub_errors(target):
        choice = hub.choose_pull(target, quant, None, None)
        paths = []
        for file in choice.files:
            digest = f"sha256:{file.sha256}" if file.sha256 else file.path
            label = file.sha256[:12] if file.sha256 else file.name
            paths.append(hub.download(target.repo_id, file, choice.commit, None, _progress_bar(report, label, digest)))
        report(OllamaProgressResponse("verifying sha256 digest"))  # done by `download`, before the rename
    # a LoRA adapter needs the id of its base model, which a pull request has no field for
    hub.check_kind(choice, paths[0], needs_base="/api/pull cannot name the model it applies to; add it with "
                   f"`fireside pull {target.repo_id}/{choice.model.first.path} --base ID`")
    report(OllamaProgressResponse("writing manifest"))
    # clients go on to use the name they pulled
    aliases = () if name in (choice.model_id, f"{choice.model_id}:latest") else (name,)
    hub.register(choice, paths, aliases)
    return _spec(choice.model_id)


def _register(registry: ModelRegistry, spec: ModelSpec) -> None:
    try:
        registry.add(spec)
    except ModelLoadError as error:
        raise BadRequest(f"pulled, but not served yet: {error}; restart the server to serve it",
                         param="model") from None


class PullFailed(ApiError):
    """The Hub, the disk or the download refused (the message says which)."""


def _failure(error: BaseException) -> ApiError:
    if isinstance(error, ApiError):
        return error
    if isinstance(error, hub.PullError | ConfigError):
        return PullFailed(str(error), param="model")
    if isinstance(error, OSError):
        return PullFailed(f"pull failed: {error}", param="model")
    raise error


async def pull_whole(registry: ModelRegistry, name: str) -> OllamaProgressResponse:
    target, quant = parse_name(name)
    try:
        spec = await asyncio.to_thread(run_pull, name, target, quant, lambda _: None)
    except (hub.PullError, OSError) as error:
        raise _failure(error) from None
    _register(registry, spec)
    return OllamaProgressResponse("success")


async def pull_stream(registry: ModelRegistry, name: str) -> AsyncIterator[OllamaProgressResponse | OllamaErrorResponse]:
    """Progress objects as the pull goes (the name was checked by `parse_name` before streaming)."""
    target, quant = parse_name(name)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[OllamaProgressResponse] = asyncio.Queue()

    def report(progress: OllamaProgressResponse) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, progress)

    task = asyncio.ensure_future(asyncio.to_thread(run_pull, name, target, quant, report))
    last: OllamaProgressResponse | None = None
    while not (task.done() and queue.empty()):
        getter = asyncio.ensure_future(queue.get())
        await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():
            getter.cancel()
            continue
        progress = getter.result()
        if progress != last:  # tqdm reports the same position more than once
            yield progress
        last = progress
    try:
        spec = task.result()
        _register(registry, spec)
    except (hub.PullError, OSError, ApiError) as error:
        yield OllamaErrorResponse(_failure(error).message)
        return
    yield OllamaProgressResponse("success")


def downloaded_files(spec: ModelSpec) -> list[Path]:
    return [*gguf_parts(spec.path), *([spec.mmproj] if spec.mmproj is not None and spec.mmproj.exists() else [])]
