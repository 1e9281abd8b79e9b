"""`fireside pull REPO[/FILE]`: download a GGUF model from the Hugging Face Hub and add it to the config.

    fireside pull bartowski/Qwen2.5-7B-Instruct-GGUF --quant Q4_K_M
    fireside pull Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf --id qwen-small
    fireside pull https://huggingface.co/owner/repo/blob/main/folder/model.gguf
    fireside pull me/support-lora/support-lora-f16.gguf --base qwen2.5-7b --id support-bot

With `--base ID` the file is a LoRA adapter GGUF (convert_lora_to_gguf.py's) and becomes an adapter
entry (`base`, `lora`) on the config's model ID; without it an adapter is refused.

The command's arguments and what it prints; the pull itself (where files go, resuming, checking)
is `app.hub`'s, which Ollama's `POST /api/pull` shares.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.hub import (
    Choice,
    PullError,
    RemoteFile,
    check_kind,
    check_space,
    choose_pull,
    download,
    first_line,
    hub_errors,
    human_size,
    parse_target,
    register,
    repo_folder,
    still_needed,
)
from app.settings.locations import models_dir


def describe(choice: Choice) -> str:
    """The line printed before downloading: what, from which commit, how big."""
    model, projector = choice.model, choice.projector
    parts = f", {len(model.parts)} parts" if len(model.parts) > 1 else ""
    extra = f"; projector {projector.path}, {human_size(projector.size)}" if projector else ""
    if choice.base is not None:
        extra = f"; LoRA adapter on {choice.base}"
    return f"pulling {choice.target.repo_id}@{choice.commit[:12]}: {model.label} ({human_size(model.size)}{parts}{extra})"


def fetch(repo_id: str, file: RemoteFile, commit: str, token: str | None) -> Path:
    """Download one file, checked (see `app.hub.download`), and say how it was checked."""
    path = download(repo_id, file, commit, token)
    if file.sha256 or file.git_sha1:
        print(f"verified {file.path}", file=sys.stderr)
    else:
        print(f"note: the Hub lists no checksum for {file.path}; size checked only", file=sys.stderr)
    return path


def pull(args: argparse.Namespace) -> int:
    """List, choose, download, verify, check it is what was asked for (a model, or an adapter with
    --base), register: each step can fail with a PullError."""
    target = parse_target(args.target, args.revision)
    token = args.token or None
    with hub_errors(target):
        choice = choose_pull(target, args.quant, args.model_id, token, args.base)
        print(describe(choice), file=sys.stderr)
        folder = repo_folder(target.repo_id)
        check_space(folder, sum(still_needed(folder / f.path, f.size) for f in choice.files))
        paths = [fetch(target.repo_id, file, choice.commit, token) for file in choice.files]
    check_kind(choice, paths[0])
    config_path = register(choice, paths)
    more = len(choice.model.parts) - 1
    print(f"saved to {paths[0]}" + (f" (and {more} more part{'s' * (more > 1)} beside it)" if more else ""))
    if choice.projector:
        print(f"projector: {paths[-1]}")
    verb = "updated" if choice.replaced else "added"
    if choice.base is not None:
        print(f"{verb} LoRA adapter {choice.model_id!r} on {choice.base} in {config_path}")
    else:
        print(f"{verb} model {choice.model_id!r} in {config_path}")
    print(f'use it with "model": "{choice.model_id}"')
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
        print(f"fireside: {first_line(error)}", file=sys.stderr)
    return 1


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `fireside pull` on the CLI's sub-commands."""
    command = subparsers.add_parser(
        "pull", help="download a GGUF model (or, with --base, a LoRA adapter) from the Hugging Face Hub and add "
                     "it to the config",
        description="Download a GGUF model from the Hugging Face Hub (split parts and a multimodal "
                    "projector beside it included), check it against the Hub's sha256 and add it to the "
                    "config under a model id; with --base, a LoRA adapter GGUF added as an adapter on a model of "
                    "the config. A pull that stopped midway (killed, interrupted, out of disk space) "
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
    command.add_argument("--base", metavar="ID",
                         help="the file is a LoRA adapter GGUF: add it as an adapter on the config's model ID "
                              "(the model it was trained on)")
