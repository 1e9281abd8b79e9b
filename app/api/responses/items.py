"""Input items: normalized for keeping (ids given, string contents as parts), and turned into the
chat messages that templates read.

An answer's output items are valid input items too (OpenAI's design: a client sends them back to
continue by hand), so one conversion serves new input, stored history and sent-back output.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from typing import Any

import msgspec

from app.api.common.signing import sign, verify
from app.api.fireworks.plan import DETAIL_SIDES, template_messages
from app.api.fireworks.requests import ChatMessage, ToolCall, ToolCallFunction
from app.api.responses.requests import (
    FunctionCall,
    FunctionCallOutput,
    InputFile,
    InputImage,
    InputItem,
    InputMessage,
    InputText,
    ItemReference,
    OutputText,
    ReasoningInput,
    Refusal,
)
from app.pipeline.errors import BadRequest
from app.pipeline.plan import IMAGE_MARKER, ImageRef

REASONING_KIND = "responses.reasoning"  # what `encrypted_content` signs
ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
IMAGE_SIDES = {**DETAIL_SIDES, "original": None}


def new_item_id(kind: str) -> str:
    return f"{ID_PREFIXES[kind]}_{uuid.uuid4().hex}"


def as_items(given: str | list[InputItem]) -> list[InputItem]:
    """`input` as a list of items (a string is one user message)."""
    if isinstance(given, str):
        return [InputMessage(role="user", content=given)]
    return list(given)


def item_from_store(data: dict[str, Any]) -> InputItem:
    return msgspec.convert(data, InputItem)


def stored_item(item: InputItem) -> dict[str, Any]:
    """An item as it is kept and listed: with an id, a message's content as parts, a status."""
    assert not isinstance(item, ItemReference)  # resolved before this
    data = msgspec.to_builtins(item)
    kind = data["type"]
    data.setdefault("id", new_item_id(kind))
    data.setdefault("status", "completed")
    if isinstance(item, InputMessage):
        assistant = item.role == "assistant"
        if isinstance(item.content, str):
            part = {"type": "output_text", "text": item.content} if assistant else \
                {"type": "input_text", "text": item.content}
            data["content"] = [part]
        for part in data["content"]:
            if part["type"] == "output_text":
                part.setdefault("annotations", [])
    return data


# ---- reasoning sent back -----------------------------------------------------------------------

def seal_reasoning(text: str) -> str:
    """`encrypted_content` for a reasoning item: its text, readable, with this server's signature
    (so a client that keeps nothing but the item can send it back; a forged one is refused)."""
    encoded = base64.urlsafe_b64encode(text.encode()).decode()
    return f"{encoded}.{sign(REASONING_KIND, text)}"


def _unseal(sealed: str, where: str) -> str:
    encoded, _, signature = sealed.partition(".")
    try:
        text = base64.urlsafe_b64decode(encoded.encode()).decode()
    except (binascii.Error, UnicodeDecodeError):
        text = None
    if text is None or not signature or not verify(REASONING_KIND, text, signature):
        raise BadRequest(f"{where}.encrypted_content was not made by this server (or was changed)",
                         param=f"{where}.encrypted_content")
    return text


def _reasoning_text(item: ReasoningInput, where: str) -> str:
    if item.encrypted_content is not None:
        return _unseal(item.encrypted_content, where)
    if item.content:
        return "".join(part.text for part in item.content)
    return "\n\n".join(part.text for part in item.summary)


# ---- items to chat messages --------------------------------------------------------------------

def _part_text(part: Any, where: str, images: list[ImageRef]) -> str:
    if isinstance(part, (InputText, OutputText)):
        return part.text
    if isinstance(part, Refusal):
        return part.refusal
    if isinstance(part, InputImage):
        if part.file_id is not None:
            raise BadRequest(f"{where}.file_id: this server has no Files API; send the image as image_url "
                             "(a URL or a data: URL)", param=f"{where}.file_id")
        if part.image_url is None:
            raise BadRequest(f"{where} is an input_image without image_url", param=where)
        images.append(ImageRef(part.image_url, where, IMAGE_SIDES[part.detail or "auto"]))
        return IMAGE_MARKER
    assert isinstance(part, InputFile)
    raise BadRequest(f"{where} is an input_file; this server reads text and images only", param=where)


def _text(content: str | list[Any], where: str, images: list[ImageRef]) -> str:
    if isinstance(content, str):
        return content
    # parts joined as chat's text parts are (app.api.fireworks.plan)
    return "\n".join(_part_text(part, f"{where}.content[{j}]", images) for j, part in enumerate(content))


def _output_text(output: str | list[Any], where: str) -> str:
    if isinstance(output, str):
        return output
    texts = []
    for j, part in enumerate(output):
        if not isinstance(part, InputText):
            raise BadRequest(f"{where}.output[{j}]: a function_call_output takes text parts only here",
                             param=f"{where}.output")
        texts.append(part.text)
    return "\n".join(texts)


def template_conversation(items: list[InputItem], instructions: str | None,
                          first_new: int = 0) -> tuple[list[dict[str, Any]], list[ImageRef]]:
    """The items (earlier turns first) as chat messages, after `instructions` as the system
    message; a reasoning item's text becomes the reasoning of the assistant message after it.
    `first_new`: where this request's own items start (errors name `input[i]` from there)."""
    messages: list[ChatMessage] = []
    images: list[ImageRef] = []
    if instructions:
        messages.append(ChatMessage(role="system", content=instructions))
    reasoning: str | None = None
    for i, item in enumerate(items):
        where = f"input[{i - first_new}]" if i >= first_new else f"previous input[{i}]"
        if isinstance(item, InputMessage):
            text = _text(item.content, where, images)
            if item.role == "assistant":
                messages.append(ChatMessage(role="assistant", content=text, reasoning_content=reasoning))
                reasoning = None
            else:
                messages.append(ChatMessage(role=item.role, content=text))
        elif isinstance(item, FunctionCall):
            call = ToolCall(function=ToolCallFunction(item.name, item.arguments), id=item.call_id)
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and reasoning is None:
                last.tool_calls = [*(last.tool_calls or []), call]  # calls of one turn, in one message
            else:
                messages.append(ChatMessage(role="assistant", content="", tool_calls=[call],
                                            reasoning_content=reasoning))
                reasoning = None
        elif isinstance(item, FunctionCallOutput):
            messages.append(ChatMessage(role="tool", content=_output_text(item.output, where),
                                        tool_call_id=item.call_id))
        elif isinstance(item, ReasoningInput):
            text = _reasoning_text(item, where)
            reasoning = f"{reasoning}\n\n{text}" if reasoning else text
        else:
            raise TypeError(f"unresolved {item!r}")  # item references are resolved before this
    if not any(message.role != "system" for message in messages):
        raise BadRequest("input holds no message to answer", param="input")
    return template_messages(messages), images
