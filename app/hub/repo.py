"""What a pull fetches from a Hugging Face repo: the target the user named, the repo's GGUF files as
the Hub lists them (with their checksums), grouped into models (split parts as one) and
projectors, and the one model (with its projector) a target and a quant mean."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from app.hub.resumable import PullError

_SPLIT = re.compile(r"^(?P<base>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)
# The quantization type at the end of a file stem: Q4_K_M, IQ2_XXS, Q8_0, TQ1_0, BF16, F16, MXFP4_MOE...
_QUANT = re.compile(r"(?:^|[-_.])((?:I?Q|TQ)\d+(?:_[A-Z0-9]+)*|BF16|F16|F32|FP16|MXFP4(?:_MOE)?)$", re.IGNORECASE)
_HUB_URL = re.compile(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/", re.IGNORECASE)
_PROJECTOR_PREFERENCE = ("f16", "bf16", "f32")


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


def list_files(target: Target, token: str | None) -> tuple[list[RemoteFile], str]:
    """The repo's GGUF files with sizes and checksums, and the commit they belong to."""
    from huggingface_hub import HfApi

    info = HfApi().model_info(target.repo_id, revision=target.revision, files_metadata=True, token=token)
    return remote_files(info.siblings or []), info.sha or target.revision or "main"


def default_id(model: Model) -> str:
    """The file's stem in lower case (`qwen2.5-7b-instruct-q4_k_m`), split suffix left out."""
    return model.stem.lower()
