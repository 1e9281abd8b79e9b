"""Anthropic's `system` and `messages` as the OpenAI-shaped message dicts chat templates read.

- text blocks are joined with newlines (as the chat endpoint joins text parts);
- image blocks (base64 or URL source) become `IMAGE_MARKER` and an `ImageRef`, as chat's image parts;
- an assistant's `tool_use` blocks become its `tool_calls`, its `thinking` blocks (when their
  signature is ours) its `reasoning_content`;
- a user's `tool_result` blocks become `tool` messages, before the rest of that user turn;
- the per-request billing line Claude Code puts at the head of `system` is dropped (see below).
"""

from __future__ import annotations

import json
from typing import Any

from app.api.anthropic.wire import (
    Base64Source,
    ContentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Unsupported,
    UrlSource,
)
from app.api.common.signing import sign, verify
from app.api.common.turns import Turns, joined, tool_call
from app.pipeline.errors import BadRequest
from app.pipeline.plan import ImageRef, nests_deeper

THINKING_KIND = "anthropic.thinking"  # what `app.api.common.signing` signs a thinking block's text as
# Claude Code (2.1.36 and later) opens `system` with a block such as
# `x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch=fa690;` whose `cch`
# changes on every request. At the very head of the prompt it would make every request miss the
# prefix cache (the whole system prompt and tool list re-prefilled each turn); it is telemetry for
# Anthropic's billing and says nothing to the model, so it is dropped before rendering, as vLLM
# (#36829) and llama.cpp (#20623) do.
BILLING_HEADER = "x-anthropic-billing-header:"
# Deeper JSON (a tool's input or schema) is refused: rendering and grammar building walk it
# recursively, and no real schema or call comes near this.
MAX_JSON_DEPTH = 64


def check_depth(value: Any, where: str, param: str = "messages") -> None:
    """400 when `value` nests dicts and lists deeper than MAX_JSON_DEPTH."""
    if nests_deeper(value, MAX_JSON_DEPTH):
        raise BadRequest(f"{where} is nested more than {MAX_JSON_DEPTH} levels deep", param=param)


def sign_thinking(text: str) -> str:
    return sign(THINKING_KIND, text)


def _is_billing_line(text: str) -> bool:
    return text.lstrip().startswith(BILLING_HEADER)


def system_text(system: str | list[TextBlock] | None) -> str | None:
    """The system prompt as one text, without Claude Code's per-request billing line."""
    if system is None:
        return None
    if isinstance(system, str):
        lines = system.splitlines(keepends=True)
        return "".join(line for line in lines if not _is_billing_line(line))
    texts = []
    for i, block in enumerate(system):
        _check_text(block, f"system[{i}]")
        if not _is_billing_line(block.text):
            texts.append(block.text)
    return "\n".join(texts)


def _refuse(block: Any, where: str) -> BadRequest:
    kind = type(block).__struct_config__.tag
    return BadRequest(f"{where}: content blocks of type {kind!r} are not supported by this server "
                      "(they need Anthropic's own files, search or server tools)", param="messages")


def _check_text(block: TextBlock, where: str) -> None:
    if block.citations:
        raise BadRequest(f"{where}.citations: citations refer to documents, which this server does not support",
                         param="messages")


def image_ref(block: ImageBlock, where: str) -> ImageRef:
    """An image block's source as the URL the image path reads (base64 data as a data: URI)."""
    if block.transformations is not None:
        raise BadRequest(f"{where}.transformations is not supported by this server", param="messages")
    source = block.source
    if isinstance(source, Base64Source):
        return ImageRef(f"data:{source.media_type};base64,{source.data}", where)
    if isinstance(source, UrlSource):
        return ImageRef(source.url, where)
    raise BadRequest(f"{where}.source: file sources need Anthropic's Files API; send the image as base64 or a URL",
                     param="messages")


def _user_parts(blocks: list[tuple[str, Any]], turns: Turns) -> str:
    """Text and image blocks (each with where it sits) as one text, an image as its marker."""
    texts = []
    for at, block in blocks:
        if isinstance(block, TextBlock):
            _check_text(block, at)
            texts.append(block.text)
        elif isinstance(block, ImageBlock):
            texts.append(turns.image(image_ref(block, at)))
        else:
            raise _refuse(block, at)
    return joined(texts)


def _tool_result(block: ToolResultBlock, where: str, turns: Turns) -> None:
    if block.toolset_name is not None:
        raise BadRequest(f"{where}.toolset_name: MCP toolsets are not supported by this server", param="messages")
    content = block.content
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = _user_parts([(f"{where}.content[{k}]", part) for k, part in enumerate(content)], turns)
    if block.is_error:
        # Chat templates have no field for a failed call: the model reads it in the result itself.
        text = f"Error: {text}" if text else "Error"
    turns.add("tool", text, tool_call_id=block.tool_use_id)


def _user_turn(message: Message, index: int, turns: Turns) -> None:
    role = message.role
    if isinstance(message.content, str):
        turns.add(role, message.content, merge=True)
        return
    results = 0
    rest: list[tuple[str, ContentBlock]] = []
    for j, block in enumerate(message.content):
        at = f"messages[{index}].content[{j}]"
        if isinstance(block, ToolResultBlock) and role == "user":
            _tool_result(block, at, turns)
            results += 1
        elif isinstance(block, (TextBlock, ImageBlock)):
            rest.append((at, block))
        elif isinstance(block, Unsupported):
            raise _refuse(block, at)
        else:
            kind = type(block).__struct_config__.tag
            raise BadRequest(f"{at}: a {role} message cannot hold a {kind!r} block", param="messages")
    if rest or not results:
        turns.add(role, _user_parts(rest, turns), merge=True)


def _thinking(block: ThinkingBlock, where: str) -> str:
    if not verify(THINKING_KIND, block.thinking, block.signature):
        raise BadRequest(f"{where}: the thinking block's signature is not valid; send thinking blocks back "
                         "exactly as this server returned them", param="messages")
    return block.thinking


def _assistant_turn(message: Message, index: int, turns: Turns) -> None:
    if isinstance(message.content, str):
        turns.add("assistant", message.content, merge=True)
        return
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(message.content):
        at = f"messages[{index}].content[{j}]"
        if isinstance(block, TextBlock):
            _check_text(block, at)
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            if block.toolset_name is not None or (block.caller is not None and block.caller.get("type") != "direct"):
                raise BadRequest(f"{at}: tool calls made by server tools or MCP toolsets are not supported",
                                 param="messages")
            check_depth(block.input, f"{at}.input")
            calls.append(tool_call(block.id, block.name, json.dumps(block.input, ensure_ascii=False)))
        elif isinstance(block, ThinkingBlock):
            reasoning.append(_thinking(block, at))
        elif isinstance(block, RedactedThinkingBlock):
            # Never issued here (nothing is redacted): it can only come from another server, whose
            # encrypted reasoning cannot be read; refused rather than dropped without a word.
            raise BadRequest(f"{at}: redacted_thinking blocks come from another server and cannot be read here; "
                             "remove them", param="messages")
        elif isinstance(block, ImageBlock):
            texts.append(turns.image(image_ref(block, at)))
        elif isinstance(block, Unsupported):
            raise _refuse(block, at)
        else:
            raise BadRequest(f"{at}: an assistant message cannot hold a 'tool_result' block", param="messages")
    turns.add("assistant", joined(texts), reasoning=joined(reasoning) if reasoning else None,
              tool_calls=calls or None, merge=True)


def conversation_turns(system: str | list[TextBlock] | None, messages: list[Message]) -> Turns:
    """The conversation as chat templates read it, with the images its blocks carry. Consecutive
    user (or assistant) turns are one turn, as Anthropic combines them (many chat templates insist
    that roles alternate)."""
    if not messages:
        raise BadRequest("messages: at least one message is required", param="messages")
    if messages[-1].role == "assistant":
        # Anthropic continues a last assistant message ("prefill"); chat templates close every
        # turn they render, so the continuation cannot be honoured.
        raise BadRequest(f"messages[{len(messages) - 1}]: a final assistant message (prefill) is not supported "
                         "by this server; end with a user message", param="messages")
    turns = Turns()
    text = system_text(system)
    if text:
        turns.add("system", text)
    for i, message in enumerate(messages):
        if message.role == "assistant":
            _assistant_turn(message, i, turns)
        else:
            _user_turn(message, i, turns)
    return turns
