"""Input items: normalized for keeping (ids given, string contents as parts), and turned into the
conversation's turns (`app.api.common.turns`) that templates read.

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
from app.api.common.turns import DETAIL_SIDES, Turns, audio_ref, joined, tool_call
from app.api.responses.requests import (
    FunctionCall,
    FunctionCallOutput,
    InputAudio,
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
from app.pipeline.plan import ImageRef

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


# ---- items to turns ---------------------------------------------------------------------------

def _part_text(part: Any, where: str, turns: Turns) -> str:
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
        return turns.image(ImageRef(part.image_url, where, IMAGE_SIDES[part.detail or "auto"]))
    if isinstance(part, InputAudio):
        sound = part.input_audio
        return turns.image(audio_ref(sound.data, sound.format, f"{where}.input_audio", where, param=where))
    assert isinstance(part, InputFile)
    raise BadRequest(f"{where} is an input_file; this server reads text, images and audio only", param=where)


def _text(content: str | list[Any], where: str, turns: Turns) -> str:
    if isinstance(content, str):
        return content
    return joined([_part_text(part, f"{where}.content[{j}]", turns) for j, part in enumerate(content)])


def _output_text(output: str | list[Any], where: str) -> str:
    if isinstance(output, str):
        return output
    texts = []
    for j, part in enumerate(output):
        if not isinstance(part, InputText):
            raise BadRequest(f"{where}.output[{j}]: a function_call_output takes text parts only here",
                             param=f"{where}.output")
        texts.append(part.text)
    return joined(texts)


def conversation_turns(items: list[InputItem], instructions: str | None, first_new: int = 0) -> Turns:
    """The items (earlier turns first) as the conversation's turns, after `instructions` as the
    system message; a reasoning item's text becomes the reasoning of the assistant message after
    it, and the calls of one turn are one assistant message. `first_new`: where this request's own
    items start (errors name `input[i]` from there)."""
    turns = Turns()
    if instructions:
        turns.add("system", instructions)
    reasoning: str | None = None
    for i, item in enumerate(items):
        where = f"input[{i - first_new}]" if i >= first_new else f"previous input[{i}]"
        if isinstance(item, InputMessage):
            text = _text(item.content, where, turns)
            if item.role == "assistant":
                turns.add("assistant", text, reasoning=reasoning)
                reasoning = None
            else:
                turns.add(turns.role(item.role, i), text)
        elif isinstance(item, FunctionCall):
            # a call joins the assistant message before it, unless reasoning came between them
            turns.add("assistant", "", reasoning=reasoning, tool_calls=[tool_call(item.call_id, item.name, item.arguments)],
                      merge=reasoning is None)
            reasoning = None
        elif isinstance(item, FunctionCallOutput):
            turns.add("tool", _output_text(item.output, where), tool_call_id=item.call_id)
        elif isinstance(item, ReasoningInput):
            text = _reasoning_text(item, where)
            reasoning = f"{reasoning}\n\n{text}" if reasoning else text
        else:
            raise TypeError(f"unresolved {item!r}")  # item references are resolved before this
    if not any(message["role"] != "system" for message in turns.messages):
        raise BadRequest("input holds no message to answer", param="input")
    return turns
