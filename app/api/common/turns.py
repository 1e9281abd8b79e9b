"""Turn building for every door: a conversation as the plain message dicts that chat templates
read (the plan's `Conversation.messages`), and the images its parts carry.

A message is `{"role", "content"}` (content always text), with `reasoning_content` (an earlier
answer's reasoning), `tool_calls` (OpenAI-shaped: `{"id", "type": "function", "function":
{"name", "arguments"}}`, arguments as JSON text), `name` and `tool_call_id` (a tool's result)
where they apply. An image part becomes `IMAGE_MARKER` in its message's text and an `ImageRef`
in `images`, in the order the markers appear (app/pipeline/images.py puts the image there).
Each door turns its own messages, blocks or items into these through one `Turns`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.media.audio import AUDIO_FORMATS
from app.pipeline.errors import BadRequest
from app.pipeline.plan import IMAGE_MARKER, Conversation, ImageRef, ToolPlan

# `detail`: the long side an image is scaled down to before the projector's own preprocessing
# (OpenAI's "low" is a 512-pixel image; "high" and "auto" leave it to the projector)
DETAIL_SIDES: dict[str, int | None] = {"low": 512, "high": None, "auto": None}
MERGED_ROLES = ("user", "assistant")  # consecutive turns of these roles may be one turn


def long_side(at: str, detail: str | None, detail_sides: dict[str, int | None],
              caps: dict[str, int | None], param: str = "messages") -> int | None:
    """The long side a part's image (or each frame) is scaled down to: the smallest of what its
    `detail` and its pixel caps ask for; None: as sent."""
    if detail is not None and detail not in detail_sides:
        raise BadRequest(f"{at}.detail is one of {', '.join(detail_sides)}, got {detail!r}", param=param)
    limits = [detail_sides[detail]] if detail is not None else []
    for name, value in caps.items():
        if value is not None and value < 1:
            raise BadRequest(f"{at}.{name} must be 1 or more, got {value}", param=param)
        limits.append(value)
    given = [limit for limit in limits if limit is not None]
    return min(given) if given else None


def audio_ref(data: str, audio_format: str, at: str, where: str, param: str = "messages") -> ImageRef:
    """A sound sent as base64 `data` in `audio_format` (OpenAI's `input_audio`), as an `ImageRef`
    the projector's audio encoder reads; 400 for a format the server does not read. The format
    is checked, not trusted: the decoders read the data's own header."""
    if audio_format.lower() not in AUDIO_FORMATS:
        raise BadRequest(f"{at}.format is one of {', '.join(sorted(AUDIO_FORMATS))}, got {audio_format!r}",
                         param=param)
    if not data:
        raise BadRequest(f"{at}.data is empty", param=param)
    return ImageRef(f"data:audio/{audio_format.lower()};base64,{data}", where, audio=True)


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A call of an earlier answer, as `tool_calls` holds it."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def joined(texts: list[str]) -> str:
    """A message's text parts as one text (joined as vLLM joins them for string-content templates)."""
    return "\n".join(texts)


@dataclass
class Turns:
    """A conversation being built, message by message, with the images its parts carry."""

    roles: tuple[str, ...] | None = None  # the roles a door's messages may have (None: its types say)
    messages: list[dict[str, Any]] = field(default_factory=list)
    images: list[ImageRef] = field(default_factory=list)

    def role(self, role: str, index: int) -> str:
        """`messages[index]`'s role as templates know it (OpenAI's newer `developer` is `system`);
        400 for one the door does not have."""
        if self.roles is not None and role not in self.roles:
            raise BadRequest(f"messages[{index}].role {role!r} is not one of {', '.join(self.roles)}",
                             param="messages")
        return "system" if role == "developer" else role

    def image(self, ref: ImageRef) -> str:
        """The marker that stands for the image in its message's text."""
        self.images.append(ref)
        return IMAGE_MARKER

    def add(self, role: str, content: str, *, reasoning: str | None = None,
            tool_calls: list[Any] | None = None, name: str | None = None, tool_call_id: str | None = None,
            merge: bool = False) -> None:
        """A message after the others. `merge`: a user (or assistant) message right after one of
        the same role joins it (its text after a newline, its reasoning and calls after the
        earlier's), for APIs that combine consecutive turns, as many chat templates need roles
        to alternate."""
        last = self.messages[-1] if self.messages else None
        if merge and last is not None and last["role"] == role and role in MERGED_ROLES:
            last["content"] = joined([text for text in (last["content"], content) if text])
            if reasoning is not None:
                last["reasoning_content"] = joined([text for text in (last.get("reasoning_content"), reasoning)
                                                    if text])
            if tool_calls:
                last["tool_calls"] = [*last.get("tool_calls", []), *tool_calls]
            return
        message: dict[str, Any] = {"role": role, "content": content}
        for key, value in (("reasoning_content", reasoning), ("tool_calls", tool_calls), ("name", name),
                           ("tool_call_id", tool_call_id)):
            if value is not None:
                message[key] = value
        self.messages.append(message)

    def conversation(self, tools: ToolPlan | None = None) -> Conversation:
        return Conversation(messages=self.messages, tools=tools, images=tuple(self.images))
