"""`fireside pull REPO[/FILE]`: download a GGUF model from the Hugging Face Hub and add it to the config.

    fireside pull bartowski/Qwen2.5-7B-Instruct-GGUF --quant Q4_K_M
    fireside pull Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf --id qwen-small
    fireside pull https://huggingface.co/owner/repo/blob/main/folder/model.gguf

The models folder (`app.settings.locations.models_dir()`) mirrors the Hub, one folder per repo:

    <models>/<owner>/<repo>/<path in the repo>   the GGUF files, named as in the repo (split parts
                                                 and a multimodal projector sit beside the model)
    <models>/<owner>/<repo>/<path>.part          a download not finished yet (see below)
    <models>/<owner>/<repo>/.cache/fireside/     a lock per file, so two pulls never write one part

so the config's `file` is the short relative path `<owner>/<repo>/<file>`, two pulls of one repo
share its folder, and pulling a file that is already there checks it against the Hub's checksum
instead of downloading it again.

Each file comes over HTTP from the Hub's `resolve` URL, pinned to the commit of the listing, into
`<file>.part` (`app.cli.resumable`): a dropped connection, a killed or interrupted pull, or a full
disk leaves the part, and the next pull continues it with a Range request. The Hub's LFS sha256 (or
git blob id for small files) from the repo's file listing is then checked against the whole part,
which only then is renamed to the file's name: a mismatch removes it and registers nothing, and
nothing is added to the config before every file is in place. (Not Xet: huggingface_hub's Xet
downloads cannot continue across processes; files stored in Xet download over HTTP all the same.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from app.cli import resumable
from app.cli.resumable import PullError, human_size
from app.settings.config import ConfigError, ModelEntry, add_model, load_config
from app.settings.locations import models_dir

_SPLIT = re.compile(r"^(?P<base>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)
# The quantization type at the end of a file stem: Q4_K_M, IQ2_XXS, Q8_0, TQ1_0, BF16, F16, MXFP4_MOE...
_QUANT = re.compile(r"(?:^|[-_.])((?:I?Q|TQ)\d+(?:_[A-Z0-9]+)*|BF16|F16|F32|FP16|MXFP4(?:_MOE)?)$", re.IGNORECASE)
_HUB_URL = re.compile(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/", re.IGNORECASE)
_PROJECTOR_PREFERENCE = ("f16", "bf16", "f32")
_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class Target:
    """What the user asked for: a repo, maybe a file or folder inside it, maybe a revision."""

    repo_id: str
    path: str | None = None
    revision: str | None = None


@dataclass(frozen=True)
class RemoteFile:
    """One file of the repo as the Hub lists it, with the checksum the download must match."""

    path: str
    size: int | None = None
    sha256: str | None = None  # LFS files (every GGUF of any size)
    git_sha1: str | None = None  # files small enough to live in git itself

    @property
    def folder(self) -> str:
        return str(PurePosixPath(self.path).parent)

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name


@dataclass(frozen=True)
class Model:
    """One loadable model: a single GGUF, or all parts of a split one (first part first)."""

    parts: tuple[RemoteFile, ...]

    @property
    def first(self) -> RemoteFile:
        return self.parts[0]

    @property
    def stem(self) -> str:
        """The file name without `.gguf` and without the `-00001-of-00003` of a split."""
        match = _SPLIT.match(self.first.name)
        return match.group("base") if match else PurePosixPath(self.first.name).stem

    @property
    def label(self) -> str:
        """How this model is named in messages: its path in the repo, split suffix left out."""
        folder = self.first.folder
        return self.stem if folder == "." else f"{folder}/{self.stem}"

    @property
    def quant(self) -> str | None:
        match = _QUANT.search(self.stem)
        return match.group(1).upper() if match else None

    @property
    def size(self) -> int | None:
        sizes = [part.size for part in self.parts]
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


# --- what to fetch --------------------------------------------------------------------------------


def parse_target(text: str, revision: str | None = None) -> Target:
    """`owner/repo`, `owner/repo/path/in/repo[.gguf]` or a huggingface.co URL (whose `blob/REV`,
    `resolve/REV` or `tree/REV` gives the revision unless --revision does)."""
    stripped = text.strip().split("?", 1)[0]
    is_url = bool(_HUB_URL.match(stripped))
    segments = [s for s in _HUB_URL.sub("", stripped).split("/") if s]
    if len(segments) < 2:
        raise PullError(f"expected REPO[/FILE] with REPO as owner/name (e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF), got {text!r}")
    repo_id, rest = "/".join(segments[:2]), segments[2:]
    if is_url and len(rest) >= 2 and rest[0] in ("blob", "resolve", "tree"):
        revision = revision or rest[1]
        rest = rest[2:]
    return Target(repo_id, "/".join(rest) or None, revision)


def remote_files(siblings: list[Any]) -> list[RemoteFile]:
    """The repo's GGUF files from `model_info(..., files_metadata=True).siblings`."""
    files = []
    for sibling in siblings:
        if not sibling.rfilename.lower().endswith(".gguf"):
            continue
        lfs = sibling.lfs
        files.append(RemoteFile(
            path=sibling.rfilename,
            size=lfs.size if lfs else sibling.size,
            sha256=lfs.sha256 if lfs else None,
            git_sha1=None if lfs else sibling.blob_id,
        ))
    return files


def is_projector(file: RemoteFile) -> bool:
    """A multimodal projector (`mmproj-model-f16.gguf`, `gemma-3-mmproj-f16.gguf`): beside a model,
    never a model of its own."""
    return "mmproj" in file.name.lower()


def group_models(files: list[RemoteFile]) -> tuple[list[Model], list[RemoteFile]]:
    """The models (split parts grouped into one) and the projectors among the repo's GGUF files."""
    models: list[Model] = []
    splits: dict[tuple[str, str], list[tuple[int, int, RemoteFile]]] = {}
    projectors = []
    for file in sorted(files, key=lambda f: f.path):
        if is_projector(file):
            projectors.append(file)
            continue
        match = _SPLIT.match(file.name)
        if match:
            key = (file.folder, match.group("base"))
            splits.setdefault(key, []).append((int(match.group("part")), int(match.group("total")), file))
        else:
            models.append(Model((file,)))
    for parts in splits.values():
        parts.sort(key=lambda p: p[0])
        models.append(Model(tuple(file for _, _, file in parts)))
    models.sort(key=lambda m: m.first.path)
    return models, projectors


def check_complete(model: Model) -> None:
    """A split model must list every part 1..N, or llama.cpp would fail to load it much later."""
    match = _SPLIT.match(model.first.name)
    if not match:
        return
    total = int(match.group("total"))
    numbers = [int(_SPLIT.match(part.name).group("part")) for part in model.parts]  # type: ignore[union-attr]
    if numbers != list(range(1, total + 1)):
        raise PullError(f"{model.label} is split in {total} parts but the repo lists parts {numbers}")


def _labels(models: list[Model]) -> list[str]:
    """Quant names where they tell the models apart, their paths otherwise."""
    quants = [m.quant for m in models]
    if None not in quants and len(set(quants)) == len(quants):
        return quants  # type: ignore[return-value]
    return [m.label for m in models]


def match_quant(models: list[Model], quant: str) -> list[Model]:
    """The models whose name carries `quant`, case-insensitively: the quant type itself first
    (`Q4_K` is not `Q4_K_M`), then the quant as a word of the path, then any substring."""
    wanted = quant.lower()
    exact = [m for m in models if (m.quant or "").lower() == wanted]
    if exact:
        return exact
    word = re.compile(rf"(?<![a-z0-9_]){re.escape(wanted)}(?![a-z0-9_])")
    words = [m for m in models if word.search(m.label.lower())]
    return words or [m for m in models if wanted in m.label.lower()]


def pick_model(models: list[Model], quant: str | None, where: str) -> Model:
    """The one model the user meant, or an error listing what there is to choose from."""
    if not models:
        raise PullError(f"no GGUF model in {where}")
    choices = ", ".join(_labels(models))
    if quant:
        matches = match_quant(models, quant)
        if not matches:
            raise PullError(f"no {quant} model in {where}; available: {choices}")
        if len(matches) > 1:
            raise PullError(f"--quant {quant} matches several models in {where}: {', '.join(_labels(matches))}; "
                            "name the file as REPO/FILE")
        return matches[0]
    if len(models) > 1:
        raise PullError(f"{where} holds {len(models)} models: {choices}; pick one with --quant "
                        f"(e.g. --quant {_labels(models)[0]}) or name the file as REPO/FILE")
    return models[0]


def choose(files: list[RemoteFile], target: Target, quant: str | None) -> tuple[Model, RemoteFile | None]:
    """The model (and its projector) for REPO, REPO/FILE or REPO/FOLDER, narrowed by --quant."""
    models, projectors = group_models(files)
    path = (target.path or "").strip("/")
    if not path:
        model = pick_model(models, quant, target.repo_id)
    elif any(p.path == path for p in projectors):
        raise PullError(f"{path} is a multimodal projector; pull the model beside it and the projector comes along")
    elif chosen := [m for m in models if any(part.path == path for part in m.parts)]:
        model = chosen[0]
    elif inside := [m for m in models if m.first.path.startswith(path + "/")]:
        model = pick_model(inside, quant, f"{target.repo_id}/{path}")
    else:
        known = ", ".join(m.first.path for m in models) or "none"
        raise PullError(f"{path} is not a GGUF file or folder of {target.repo_id} (GGUF models there: {known})")
    check_complete(model)
    return model, pick_projector(projectors, model)


def pick_projector(projectors: list[RemoteFile], model: Model) -> RemoteFile | None:
    """The projector in the model's folder, else in the repo's top folder (where repos with one
    folder per quant keep it); of several, the F16 one, as llama.cpp's own examples use."""
    beside = [p for p in projectors if p.folder == model.first.folder] or [p for p in projectors if p.folder == "."]
    if len(beside) <= 1:
        return beside[0] if beside else None
    for precision in _PROJECTOR_PREFERENCE:
        for projector in beside:
            if re.search(rf"(?<![a-z0-9]){precision}(?![a-z0-9])", projector.name.lower()):
                return projector
    return beside[0]


# --- fetching and checking ------------------------------------------------------------------------


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


def fetch(repo_id: str, file: RemoteFile, commit: str, token: str | None) -> Path:
    """Download one file, checked (see `download`)."""
    path = download(repo_id, file, commit, token)
    if file.sha256 or file.git_sha1:
        print(f"verified {file.path}", file=sys.stderr)
    else:
        print(f"note: the Hub lists no checksum for {file.path}; size checked only", file=sys.stderr)
    return path


# --- errors ---------------------------------------------------------------------------------------


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _first_line(error: BaseException | str) -> str:
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
        raise PullError(f"a file of {repo} is missing on the Hub: {_first_line(error)}") from None
    except LocalEntryNotFoundError:
        raise PullError(f"cannot reach the Hub at {_endpoint()}: check the connection (or HF_ENDPOINT)") from None
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else None
        if status == 401:
            raise PullError("the Hub refused the token (401 Unauthorized): check --token or HF_TOKEN") from None
        raise PullError(f"the Hub answered {status} for {repo}: {_first_line(error.server_message or error)}") from None
    except HFValidationError as error:
        raise PullError(f"{repo!r} is not a Hub repo id: {_first_line(error)}") from None
    except Exception as error:
        if resumable.is_network_error(error):
            raise PullError(f"cannot reach the Hub at {_endpoint()}: {_first_line(error)}") from None
        raise


# --- the command ----------------------------------------------------------------------------------


def default_id(model: Model) -> str:
    """The file's stem in lower case (`qwen2.5-7b-instruct-q4_k_m`), split suffix left out."""
    return model.stem.lower()


def check_id(model_id: str) -> ModelEntry | None:
    """Refuse, before any download, an id that the config already uses as another model's alias;
    return the entry a pull under the same id replaces."""
    try:
        existing = load_config().find(model_id)
    except ConfigError as error:
        raise PullError(str(error)) from None
    if existing is not None and existing.id != model_id:
        raise PullError(f"{model_id!r} is an alias of the model {existing.id!r} in the config; pick another id with --id")
    return existing


def describe(repo_id: str, commit: str, model: Model, projector: RemoteFile | None) -> str:
    """The line printed before downloading: what, from which commit, how big."""
    parts = f", {len(model.parts)} parts" if len(model.parts) > 1 else ""
    extra = f"; projector {projector.path}, {human_size(projector.size)}" if projector else ""
    return f"pulling {repo_id}@{commit[:12]}: {model.label} ({human_size(model.size)}{parts}{extra})"


def list_files(target: Target, token: str | None) -> tuple[list[RemoteFile], str]:
    """The repo's GGUF files with sizes and checksums, and the commit they belong to."""
    from huggingface_hub import HfApi

    info = HfApi().model_info(target.repo_id, revision=target.revision, files_metadata=True, token=token)
    return remote_files(info.siblings or []), info.sha or target.revision or "main"


def pull(args: argparse.Namespace) -> int:
    """List, choose, download, verify, register: each step can fail with a PullError."""
    target = parse_target(args.target, args.revision)
    token = args.token or None
    with hub_errors(target):
        files, commit = list_files(target, token)
        if not files:
            raise PullError(f"no GGUF files in {target.repo_id}")
        model, projector = choose(files, target, args.quant)
        model_id = args.model_id or default_id(model)
        replaced = check_id(model_id)
        wanted = [*model.parts, *([projector] if projector else [])]
        print(describe(target.repo_id, commit, model, projector), file=sys.stderr)
        folder = repo_folder(target.repo_id)
        resumable.check_space(folder, sum(resumable.still_needed(folder / f.path, f.size) for f in wanted))
        paths = [fetch(target.repo_id, file, commit, token) for file in wanted]
    entry: dict[str, Any] = {"id": model_id, "file": paths[0]}
    if projector:
        entry["mmproj"] = paths[-1]
    config_path = add_model(entry)
    more = len(model.parts) - 1
    print(f"saved to {paths[0]}" + (f" (and {more} more part{'s' * (more > 1)} beside it)" if more else ""))
    if projector:
        print(f"projector: {paths[-1]}")
    print(f"{'updated' if replaced else 'added'} model {model_id!r} in {config_path}")
    print(f'use it with "model": "{model_id}"')
    return 0


def run(args: argparse.Namespace) -> int:
    """`fireside pull`: 0 on success; 1 with one line on stderr otherwise, never a traceback
    for what the user or the Hub got wrong."""
    try:
        return pull(args)
    except PullError as error:
        print(f"fireside: {error}", file=sys.stderr)
    except KeyboardInterrupt:
        print("fireside: pull interrupted; pull again to continue the download", file=sys.stderr)
        return 130
    except OSError as error:  # disk full, permission denied, a models folder that is a file...
        print(f"fireside: {_first_line(error)}", file=sys.stderr)
    return 1


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `fireside pull` on the CLI's sub-commands."""
    command = subparsers.add_parser(
        "pull", help="download a GGUF model from the Hugging Face Hub and add it to the config",
        description="Download a GGUF model from the Hugging Face Hub (split parts and a multimodal "
                    "projector beside it included), check it against the Hub's sha256 and add it to the "
                    "config under a model id. A pull that stopped midway (killed, interrupted, out of disk space) "
                    "continues where it stopped when run again.",
        epilog=f"Files go to {models_dir()}/<owner>/<repo>/<file> (FIRESIDE_MODELS_DIR moves it). "
               "HF_ENDPOINT points at a Hub mirror.",
    )
    command.add_argument("target", metavar="REPO[/FILE]",
                         help="owner/repo, owner/repo/path/to/model.gguf, a folder of the repo, or a huggingface.co URL")
    command.add_argument("--quant", metavar="TYPE",
                         help="the quantization to take when the repo holds several, e.g. Q4_K_M "
                              "(matched case-insensitively against the file names)")
    command.add_argument("--revision", metavar="REV", help="branch, tag or commit (default: main)")
    command.add_argument("--token", metavar="TOKEN",
                         help="Hugging Face token for gated or private repos (default: HF_TOKEN, or the "
                              "token `hf auth login` saved)")
    command.add_argument("--id", dest="model_id", metavar="NAME",
                         help="the model id requests use (default: the file name in lower case, without .gguf)")
