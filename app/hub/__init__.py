"""GGUF models from the Hugging Face Hub, as a library: `fireside pull` (app/cli/pull.py) and Ollama's
`POST /api/pull` (app/api/ollama/pull.py) both call it, each with its own way of telling the user.

A pull lists the repo's files (`app.hub.repo`), chooses the model a target and a quant mean, checks
its id against the config, downloads each file and registers the model (`app.hub.download`). A
LoRA adapter GGUF (`general.type = "adapter"`) is registered only as an adapter on a base model
the config has (`fireside pull --base ID`: an entry with `base` and `lora`); the file's own
`general.type`, read after the download, decides which it is.

The models folder (`app.settings.locations.models_dir()`) mirrors the Hub, one folder per repo:

    <models>/<owner>/<repo>/<path in the repo>   the GGUF files, named as in the repo (split parts
                                                 and a multimodal projector sit beside the model)
    <models>/<owner>/<repo>/<path>.part          a download not finished yet (see below)
    <models>/<owner>/<repo>/.cache/fireside/     a lock per file, so two pulls never write one part

so the config's `file` is the short relative path `<owner>/<repo>/<file>`, two pulls of one repo
share its folder, and pulling a file that is already there checks it against the Hub's checksum
instead of downloading it again.

Each file comes over HTTP from the Hub's `resolve` URL, pinned to the commit of the listing, into
`<file>.part` (`app.hub.resumable`): a dropped connection, a killed or interrupted pull, or a full
disk leaves the part, and the next pull continues it with a Range request. The Hub's LFS sha256 (or
git blob id for small files) from the repo's file listing is then checked against the whole part,
which only then is renamed to the file's name: a mismatch removes it and registers nothing, and
nothing is added to the config before every file is in place. (Not Xet: huggingface_hub's Xet
downloads cannot continue across processes; files stored in Xet download over HTTP all the same.)

huggingface_hub is imported only when a pull runs, so importing this package costs nothing.
"""

from __future__ import annotations

from app.hub.download import (
    ADAPTER,
    Choice,
    check_base,
    check_id,
    check_kind,
    choose_pull,
    download,
    first_line,
    gguf_type,
    hub_errors,
    register,
    repo_folder,
    verify,
)
from app.hub.repo import (
    Model,
    RemoteFile,
    Target,
    choose,
    default_id,
    list_files,
    parse_target,
)
from app.hub.resumable import PullError, check_space, human_size, still_needed

__all__ = [
    "ADAPTER",
    "Choice",
    "Model",
    "PullError",
    "RemoteFile",
    "Target",
    "check_base",
    "check_id",
    "check_kind",
    "check_space",
    "choose",
    "choose_pull",
    "default_id",
    "download",
    "first_line",
    "gguf_type",
    "hub_errors",
    "human_size",
    "list_files",
    "parse_target",
    "register",
    "repo_folder",
    "still_needed",
    "verify",
]
