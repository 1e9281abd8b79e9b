"""`fireside template render|parse`: the server's own chat-format code, for people debugging a
model's template. `--template` takes a Jinja file or a GGUF (its embedded template); a GGUF's
vocabulary (or `--vocab GGUF`'s, for a Jinja file) feeds the same recognition as the server's."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when the command runs: its parser loads neither templates nor llama.cpp
    from templates.chat_format import ChatFormat

DEFAULT_MESSAGES = [{"role": "user", "content": "Hello"}]


def add_commands(commands: argparse._SubParsersAction) -> None:
    template = commands.add_parser("template", help="render a chat template or parse a model's raw output")
    actions = template.add_subparsers(dest="template_command", required=True)
    render = actions.add_parser("render", help="print the prompt a conversation renders to")
    parse = actions.add_parser("parse", help="print, as JSON, the message the server returns for a raw output")
    for command in (render, parse):
        command.add_argument("--template", type=Path, required=True, metavar="FILE",
                             help="a Jinja chat template, or a GGUF file (its embedded template)")
        command.add_argument("--messages", type=Path, metavar="FILE.json",
                             help="a JSON array of messages, as in a chat request" +
                                  (" (default: one user message)" if command is parse else ""),
                             required=command is render)
        command.add_argument("--tools", type=Path, metavar="FILE.json", help="a JSON array of tools")
        command.add_argument("--reasoning-effort", metavar="X",
                             help="none, low, medium, high, xhigh, max, adaptive, true, false or a token budget")
        command.add_argument("--reasoning-history", choices=("disabled", "interleaved", "preserved"))
        command.add_argument("--vocab", type=Path, metavar="GGUF",
                             help="a GGUF whose vocabulary (special tokens, bos and eos) goes with a Jinja file")
        command.add_argument("--bos-token", default="", help="bos_token for a Jinja file (a GGUF has its own)")
        command.add_argument("--eos-token", default="", help="eos_token for a Jinja file (a GGUF has its own)")
    parse.add_argument("--completion", type=Path, required=True, metavar="FILE.txt", help="the model's raw output")


def _effort(value: str | None) -> str | int | bool | None:
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return int(value) if value.lstrip("-").isdigit() else value


def _is_gguf(path: Path) -> bool:
    return path.suffix.lower() == ".gguf"


def _chat_format(path: Path, vocab: Path | None, bos: str, eos: str) -> ChatFormat:
    from backends.llama_model import LlamaModel, ModelOptions
    from backends.vocab import marker_texts
    from templates.chat_format import ChatFormat
    from templates.chat_template import CHATML_TEMPLATE

    if vocab is not None and _is_gguf(path):
        raise ValueError("--vocab goes with a Jinja file; a GGUF given to --template has its own vocabulary")
    source = None if _is_gguf(path) else path.read_text(encoding="utf-8")
    if vocab is None and source is not None:
        return ChatFormat(source, bos_token=bos, eos_token=eos)
    model = LlamaModel(vocab or path, ModelOptions(vocab_only=True))
    try:
        if source is None:
            source = model.chat_template() or CHATML_TEMPLATE
        bos = model.token_text(model.bos_token_id) if model.bos_token_id >= 0 else bos
        eos = model.token_text(model.eos_token_id) if model.eos_token_id >= 0 else eos
        tokens, control = marker_texts(model)
        return ChatFormat(source, bos_token=bos, eos_token=eos, special_tokens=tokens, control_tokens=control)
    finally:
        model.close()


def _json_list(path: Path | None, what: str) -> list[Any] | None:
    if path is None:
        return None
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, list):
        raise ValueError(f"{what} must hold a JSON array")
    return value


def run(args: argparse.Namespace) -> int:
    from backends.llama_model import ModelLoadError
    from templates.chat_template import TemplateRenderError
    from templates.reasoning import ReasoningError, normalize_reasoning

    try:
        chat = _chat_format(args.template, args.vocab, args.bos_token, args.eos_token)
        reasoning = normalize_reasoning(_effort(args.reasoning_effort), None, args.reasoning_history)
        messages = _json_list(args.messages, "--messages") or DEFAULT_MESSAGES
        tools = _json_list(args.tools, "--tools")
        prompt = chat.render(messages, reasoning, tools=tools)
        if args.template_command == "render":
            sys.stdout.write(prompt)
            return 0
        completion = args.completion.read_text(encoding="utf-8")
        names = {tool["function"]["name"] for tool in tools or [] if isinstance(tool.get("function"), dict)}
        print(json.dumps(chat.parse(prompt, completion, names or None), ensure_ascii=False, indent=2))
        return 0
    except (OSError, ValueError, ModelLoadError, ReasoningError, TemplateRenderError) as error:
        print(f"fireside template: {error}", file=sys.stderr)
        return 1
