"""Chat messages as llama-server's `/apply-template` and vLLM's `/v1/tokenize` take them
(OpenAI's, text only), rendered with the model's chat template as a chat answer would read them."""

from __future__ import annotations

import asyncio

from app.api.common.turns import Turns, joined
from app.api.llamacpp.wire import TemplateMessage
from app.pipeline.chat_formats import chat_format
from app.pipeline.errors import BadRequest
from app.pipeline.plan import Conversation
from app.pipeline.prepare import require_generative
from app.pipeline.prompts import Prompt, chat_prompt
from backends.registry import ServedModel
from templates.reasoning import ReasoningRequest


def template_turns(messages: list[TemplateMessage]) -> Turns:
    turns = Turns(roles=("system", "developer", "user", "assistant", "tool"))
    for i, message in enumerate(messages):
        content = message.content
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise BadRequest(f"messages[{i}].content[{j}]: only text parts can be rendered here",
                                     param="messages")
                texts.append(part["text"])
            content = joined(texts)
        turns.add(turns.role(message.role, i), content or "", reasoning=message.reasoning_content,
                  tool_calls=message.tool_calls, name=message.name, tool_call_id=message.tool_call_id)
    return turns



async def rendered_prompt(served: ServedModel, conversation: Conversation) -> Prompt:
    """The conversation rendered (with the generation prompt) and tokenized, as a chat reads it."""
    require_generative(served, "it has no chat template")
    return await asyncio.to_thread(chat_prompt, served.model, chat_format(served), conversation, ReasoningRequest())
