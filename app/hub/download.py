"""Fetching a chosen model's files into the models folder, each checked against the Hub's checksum
before it takes its name (see `app.hub`), huggingface_hub's errors as one line each, and adding
the result to the config: a model, or a LoRA adapter on a model of the config (`base`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.hub import resumable
from app.hub.repo import Model, RemoteFile, Target, choose, default_id, list_files
from app.hub.resumable import PullError
from app.settings.config import Config, ConfigError, ModelEntry, add_model, load_config
from app.settings.locations import models_dir

_CHUNK = 8 * 1024 * 1024


def repo_folder(repo_id: str) -> Path:
    """Where a repo's files go: `<models>/<owner>/<repo>`, as `hf_hub_download(local_dir=...)` lays them out."""
    return models_dir() / repo_id


def download(repo_id: str, file: RemoteFile, commit: str, token: str | None, progress: Any = None) -> Path:
    """One file, pinned to the commit the listing came from (so that all parts of a split model
    come from the same commit), checked against the listing's checksum and only then put under its
    name; a file already there that passes the check is kept. `progress`: a tqdm class for the bar."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import WeakFileLock, build_hf_headers

    # Not a resolved path: the config should keep the short path relative to the models folder.
    path = repo_folder(repo_id) / file.path
    lock = repo_folder(repo_id) / ".cache" / "fireside" / f"{file.path}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(lock):  # a second pull of the file waits, then finds it in place
        if path.is_file() and _is_current(path, file):
            return path
        part = resumable.part_path(path)
        url = hf_hub_url(repo_id, file.path, revision=commit)
        # The HEAD fails early (gated, gone) and knows the size where the listing did not; the GETs
        # go to the `resolve` URL itself, so that each retry follows a freshly signed redirect (the
        # HTTP client drops the token when the redirect leaves the Hub's origin).
        metadata = get_hf_file_metadata(url, token=token)
        size = file.size if file.size is not None else metadata.size
        headers = build_hf_headers(token=token)
        kept = resumable.fetch(url, headers, part, size, progress)
        try:
            verify(part, file)
        except PullError:
            if not kept:
                raise
            # The bytes kept from an earlier pull were not this file's (the repo changed it since,
            # or the disk lost writes): verify removed them; one whole download more.
            resumable.fetch(url, headers, part, size, progress)
            verify(part, file)
        os.replace(part, path)
    return path


def file_digest(path: Path, digest: Any) -> str:
    """Hex digest of a file of any size, read in chunks."""
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _checksum(path: Path, file: RemoteFile) -> tuple[str, str, str] | None:
    """(kind, what the Hub lists, what the file has), None when the Hub gave no checksum."""
    if file.sha256:
        return "sha256", file.sha256.lower(), file_digest(path, hashlib.sha256())
    if file.git_sha1:
        header = b"blob %d\0" % path.stat().st_size
        return "git blob id", file.git_sha1.lower(), file_digest(path, hashlib.sha1(header, usedforsecurity=False))
    return None


def _is_current(path: Path, file: RemoteFile) -> bool:
    if file.size is not None and path.stat().st_size != file.size:
        return False
    found = _checksum(path, file)
    return found is None or found[1] == found[2]


def verify(path: Path, file: RemoteFile) -> bool:
    """Check the download against the Hub's checksum; remove it on a mismatch (so a new pull
    downloads it again). False when the Hub gave no checksum to check against."""
    found = _checksum(path, file)
    if found is None:
        return False
    kind, expected, actual = found
    if actual != expected:
        path.unlink(missing_ok=True)
        raise PullError(f"checksum mismatch for {file.path}: the Hub lists {kind} {expected}, the download has "
                        f"{actual}; removed it and registered nothing (pull again to retry)")
    return True


# --- errors ---------------------------------------------------------------------------------------


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def first_line(error: BaseException | str) -> str:
    """huggingface_hub's messages run over several lines; a CLI error is one."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if lines:
        return lines[0]
    return type(error).__name__ if isinstance(error, BaseException) else "no details"


@contextmanager
def hub_errors(target: Target) -> Iterator[None]:
    """Turn huggingface_hub's exceptions (multi-line, with URLs) into one line saying what to do."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo = target.repo_id
    try:
        yield
    except GatedRepoError:
        raise PullError(f"{repo} is gated: accept its terms at {_endpoint()}/{repo}, then pass --token or set "
                        "HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise PullError(f"repository {repo} not found on the Hub (a private or gated repo needs --token or "
                        "HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise PullError(f"revision {target.revision!r} not found in {repo}") from None
    except RemoteEntryNotFoundError as error:
        raise PullError(f"a file of {repo} is missing on the Hub: {first_line(error)}") from None
    except LocalEntryNotFoundError:
        raise PullError(f"cannot reach the Hub at {_endpoint()}: check the connection (or HF_ENDPOINT)") from None
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else None
        if status == 401:
            raise PullError("the Hub refused the token (401 Unauthorized): check --token or HF_TOKEN") from None
        raise PullError(f"the Hub answered {status} for {repo}: {first_line(error.server_message or error)}") from None
    except HFValidationError as error:
        raise PullError(f"{repo!r} is not a Hub repo id: {first_line(error)}") from None
    except Exception as error:
        if resumable.is_network_error(error):
            raise PullError(f"cannot reach the Hub at {_endpoint()}: {first_line(error)}") from None
        raise


# --- one pull, start to end -----------------------------------------------------------------------


def _config() -> Config:
    try:
        return load_config()
    except ConfigError as error:
        raise PullError(str(error)) from None


def _kind(entry: ModelEntry) -> str:
    if entry.base is not None:
        return f"a LoRA adapter on {entry.base!r}"
    return f"a model that runs upstream at {entry.upstream.url}" if entry.upstream is not None else "a model"


def check_id(model_id: str, adapter: bool = False) -> ModelEntry | None:
    """Refuse, before any download, an id that the config already uses as another model's alias,
    or for another kind of entry (a model pulled over an adapter's entry, or either over an
    upstream one, would leave it holding keys of both); return the entry a pull under the same id
    replaces."""
    existing = _config().find(model_id)
    if existing is None:
        return None
    if existing.id != model_id:
        raise PullError(f"{model_id!r} is an alias of the model {existing.id!r} in the config; pick another id with --id")
    if (existing.base is not None) != adapter or existing.upstream is not None:
        wanted = "a LoRA adapter" if adapter else "a model"
        raise PullError(f"{model_id!r} is {_kind(existing)} in the config, and this pull adds {wanted}; pick another "
                        f"id with --id (or remove the entry first: fireside rm {model_id} --keep-files)")
    return existing


def check_base(base: str) -> str:
    """Before any download: the id (or alias) of the model an adapter applies to must name a model
    of the config that is loaded here, neither an adapter nor an upstream model; its id. A model
    given only on `fireside serve`'s command line is not known here, so it is refused too."""
    config = _config()
    entry = config.find(base)
    if entry is not None and entry.base is None and entry.upstream is None:
        return entry.id
    models = [m.id for m in config.models if m.base is None and m.upstream is None]
    known = f"the config's models: {', '.join(models)}" if models else "the config has no models"
    if entry is None:
        raise PullError(f"--base {base!r} is not a model in the config {config.path} ({known}); pull or add the base "
                        "model first (a model given only on the serve command line cannot be checked here)")
    raise PullError(f"--base {base!r} is {_kind(entry)}; a LoRA adapter applies to a model loaded here ({known})")


ADAPTER = "adapter"  # `general.type` of a LoRA adapter GGUF, as convert_lora_to_gguf.py writes it


def gguf_type(path: Path) -> str | None:
    """The GGUF's `general.type` ("model" when it does not say, "adapter" for a LoRA adapter), read
    with ggml's own GGUF reader (metadata only); None when the file is not a GGUF ggml can read."""
    with path.open("rb") as handle:
        head = handle.read(8)
    # what ggml checks first, here so that a file that is not a GGUF fills no log with ggml's errors
    if len(head) < 8 or head[:4] != b"GGUF" or not 2 <= int.from_bytes(head[4:], "little") <= 3:
        return None
    from backends.ggml_native import GgufError, GgufFile, NativeFunctionMissing

    try:
        with GgufFile(path) as gguf:
            value = gguf.value("general.type")
    except (GgufError, NativeFunctionMissing):
        return None
    return value if isinstance(value, str) and value else "model"


def check_kind(choice: Choice, path: Path, needs_base: str | None = None) -> None:
    """After the download, before registering: a LoRA adapter is added only with its base, and a
    base (`--base`) only with an adapter. `needs_base`: how the user adds an adapter (default: the
    CLI's --base). The files stay downloaded, so the pull that fixes it does not fetch them again."""
    kind = gguf_type(path)
    if choice.base is None and kind == ADAPTER:
        how = needs_base or ("pass --base ID, the config's id of the model it was trained on, to add it as an "
                             "adapter (it stays downloaded, and is not fetched again)")
        raise PullError(f"{choice.model.label} is a LoRA adapter, not a model; nothing was added to the config: {how}")
    if choice.base is not None and kind != ADAPTER:
        found = f"its general.type is {kind!r}" if kind else "ggml cannot read it as a GGUF"
        raise PullError(f"{choice.model.label} is not a LoRA adapter GGUF ({found}, not {ADAPTER!r}); nothing was "
                        "added to the config: pull it without --base to add it as a model")


@dataclass(frozen=True)
class Choice:
    """What a pull fetches: the model and its projector, from which commit, under which id."""

    target: Target
    commit: str
    model: Model
    projector: RemoteFile | None
    model_id: str
    replaced: ModelEntry | None  # the config's entry that the pull replaces (the same id pulled before)
    base: str | None = None  # a LoRA adapter on the config's model of this id (`model` is the adapter)

    @property
    def files(self) -> list[RemoteFile]:
        """The model's parts (first part first), then its projector."""
        return [*self.model.parts, *([self.projector] if self.projector else [])]


def choose_pull(target: Target, quant: str | None, model_id: str | None, token: str | None,
                base: str | None = None) -> Choice:
    """List the repo, choose the model (narrowed by `quant`) and check its id against the config,
    before anything is downloaded (run inside `hub_errors`). With `base`, the file is a LoRA
    adapter on the config's model of that id (checked first), and no projector comes along."""
    base_id = check_base(base) if base is not None else None
    files, commit = list_files(target, token)
    if not files:
        raise PullError(f"no GGUF files in {target.repo_id}")
    model, projector = choose(files, target, quant)
    if base_id is not None:
        if len(model.parts) > 1:
            raise PullError(f"{model.label} is split in {len(model.parts)} parts; a LoRA adapter is one GGUF file")
        projector = None
    model_id = model_id or default_id(model)
    if model_id == base_id:
        raise PullError(f"{model_id!r} is the id of the base model; pick another id for the adapter with --id")
    return Choice(target, commit, model, projector, model_id, check_id(model_id, base_id is not None), base_id)


def register(choice: Choice, paths: list[Path], aliases: tuple[str, ...] = ()) -> Path:
    """Add the downloaded model (`paths` in the order of `choice.files`) to the config, or the
    adapter (`id`, `base`, `lora`) of a pull with a base; the config file's path."""
    entry: dict[str, Any] = {"id": choice.model_id}
    if choice.base is not None:
        entry |= {"base": choice.base, "lora": paths[0]}
    else:
        entry["file"] = paths[0]
    if aliases:
        entry["aliases"] = list(aliases)
    if choice.projector:
        entry["mmproj"] = paths[-1]
    return add_model(entry)
