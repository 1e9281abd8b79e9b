"""`/api/chat` and `/api/generate` bodies as the one request plan.

Chat messages become the OpenAI-shaped dicts chat templates read (Ollama's `thinking` is the
templates' `reasoning_content`, its tool calls carry argument objects that go in as JSON text,
its `tool_name` names the tool a result answers). Images (base64) go through the image path as
`data:` URIs. `/api/generate` renders `system` + `prompt` as one chat turn; `raw` uses the prompt
as written; `suffix` is fill-in-the-middle with the model's own FIM tokens; `context` (the token
ids an earlier answer returned) is prepended to the newly rendered turn.
"""

from __future__ import annotations

import asyncio
import json

from app.api.common.fim import fim_prompt, fim_tokens
from app.api.common.tools import function_tool, plan_tools
from app.api.common.turns import Turns, joined, tool_call
from app.api.ollama.options import Options, reasoning, response_format
from app.api.ollama.wire import (
    OllamaChatRequest,
    OllamaGenerateRequest,
    OllamaGenerationBase,
    OllamaMessage,
)
from app.pipeline.chat_formats import chat_format
from app.pipeline.errors import BadRequest
from app.pipeline.plan import (
    IMAGE_PLACEHOLDER,
    Conversation,
    ImageRef,
    Prompts,
    RequestPlan,
    StreamPlan,
    ToolPlan,
)
from app.pipeline.prompts import chat_prompt
from backends.registry import ServedModel
from templates.reasoning import ReasoningRequest

ROLES = ("system", "user", "assistant", "tool")


def image_ref(data: str, where: str) -> ImageRef:
    """A base64 image as the image path reads it (it sniffs the format from the bytes)."""
    return ImageRef(f"data:application/octet-stream;base64,{data}", where)


def _with_images(text: str, images: list[str] | None, where: str, turns: Turns) -> str:
    """The images' markers before the text, as Ollama puts a message's images before its words."""
    if not images:
        return text
    markers = [turns.image(image_ref(data, f"{where}[{j}]")) for j, data in enumerate(images)]
    return joined(markers + ([text] if text else []))


def chat_turns(messages: list[OllamaMessage]) -> Turns:
    turns = Turns(ROLES)
    call_ids: dict[str, str] = {}  # a tool's name -> the id of its latest call, for the result that answers it
    for i, message in enumerate(messages):
        role = turns.role(message.role, i)
        calls = None
        if message.tool_calls:
            calls = []
            for j, call in enumerate(message.tool_calls):
                call_id = call.id or f"call_{i}_{j}"
                call_ids[call.function.name] = call_id
                calls.append(tool_call(call_id, call.function.name, json.dumps(call.function.arguments)))
        name = call_id = None
        if role == "tool":
            name = message.tool_name or None
            call_id = message.tool_call_id or call_ids.get(message.tool_name or "") or None
        turns.add(role, _with_images(message.content or "", message.images, f"messages[{i}].images", turns),
                  reasoning=message.thinking or None, tool_calls=calls, name=name, tool_call_id=call_id)
    return turns


def _tools(request: OllamaChatRequest) -> ToolPlan | None:
    tools = []
    for i, tool in enumerate(request.tools or []):
        if tool.type != "function":
            raise BadRequest(f"tools[{i}].type is {tool.type!r}; only function tools exist", param="tools")
        tools.append(function_tool({"name": tool.function.name,
                                    "parameters": tool.function.parameters or {"type": "object"},
                                    "description": tool.function.description}))
    return plan_tools(tools, "auto", True)  # Ollama has no tool_choice: the model decides


def _refuse_unsupported(request: OllamaGenerationBase) -> None:
    if request.logprobs or request.top_logprobs:
        raise BadRequest("logprobs are not offered on Ollama's API here; /v1/chat/completions returns them",
                         param="logprobs")


def _plan(request: OllamaGenerationBase, model: str, prompt: Conversation | Prompts, options: Options,
          reasoning_request: ReasoningRequest | None) -> RequestPlan:
    return RequestPlan(
        model=model,
        input=prompt,
        max_tokens=options.max_tokens,
        sampling=options.sampling,
        stop=options.stop,
        response_format=response_format(request.format),
        reasoning=reasoning_request,
        stream=StreamPlan(include_usage=False) if request.stream else None,
    )


def chat_plan(request: OllamaChatRequest, model: str, options: Options) -> RequestPlan:
    _refuse_unsupported(request)
    conversation = chat_turns(request.messages or []).conversation(_tools(request))
    return _plan(request, model, conversation, options, reasoning(request.think))


async def generate_plan(request: OllamaGenerateRequest, model: str, options: Options,
                        served: ServedModel | None) -> RequestPlan:
    """Needs the model for `suffix` (its FIM tokens) and `context` (the new turn's tokens): a
    model that runs upstream (`served` None) refuses them."""
    _refuse_unsupported(request)
    for name in ("width", "height", "steps"):
        if getattr(request, name) is not None:
            raise BadRequest(f"{name} is for image-generation models; {model} generates text", param=name)
    if request.template is not None:
        raise BadRequest("template cannot apply: Fireside renders the model's own chat template (or the one the "
                         "server was given with --chat-template); send raw: true with a prompt you templated",
                         param="template")
    prompt = request.prompt or ""
    if served is None:
        for name, given in (("suffix", request.suffix is not None), ("context", bool(request.context))):
            if given:
                raise BadRequest(f"{name} cannot be forwarded to {model}, which runs on an upstream server: it needs "
                                 "this server's own model (its tokens)", param=name)
    if request.suffix is not None:
        assert served is not None
        return _plan(request, model, _fill_in_the_middle(request, served), options, None)
    if request.raw:
        for name in ("system", "context", "think"):
            if getattr(request, name) is not None:
                raise BadRequest(f"{name} cannot apply to a raw prompt, which is used as written", param=name)
        return _plan(request, model, Prompts((prompt,), (_placeholder_images(prompt, request.images),)), options, None)
    turns = Turns()
    if request.system is not None:
        turns.add("system", request.system)
    turns.add("user", _with_images(prompt, request.images, "images", turns))
    reasoning_request = reasoning(request.think)
    conversation = turns.conversation()
    if request.context:
        assert served is not None
        if turns.images:
            raise BadRequest("context is token ids; it cannot go with images (send the conversation to /api/chat)",
                             param="context")
        vocab = served.model.n_vocab
        outside = next((token for token in request.context if not 0 <= token < vocab), None)
        if outside is not None:
            raise BadRequest(f"context holds token id {outside}, outside the vocabulary (0..{vocab - 1})",
                             param="context")
        turn = await asyncio.to_thread(chat_prompt, served.model, chat_format(served), conversation,
                                       reasoning_request or ReasoningRequest())
        conversation = Conversation(messages=None, token_ids=(*request.context, *turn.tokens))
    return _plan(request, model, conversation, options, reasoning_request)


def _placeholder_images(prompt: str, images: list[str] | None) -> tuple[ImageRef, ...]:
    if not images:
        return ()
    if prompt.count(IMAGE_PLACEHOLDER) != len(images):
        raise BadRequest(f"a raw prompt places its images itself: it has {prompt.count(IMAGE_PLACEHOLDER)} "
                         f"{IMAGE_PLACEHOLDER} placeholders for {len(images)} images", param="images")
    return tuple(image_ref(data, f"images[{j}]") for j, data in enumerate(images))


def _fill_in_the_middle(request: OllamaGenerateRequest, served: ServedModel) -> Prompts:
    """prefix-suffix-middle with the vocabulary's FIM tokens, as llama.cpp's /infill builds it."""
    for name in ("system", "context", "think", "images"):
        if getattr(request, name) is not None:
            raise BadRequest(f"{name} cannot go with suffix (a fill-in-the-middle prompt)", param=name)
    fim = fim_tokens(served, "suffix")
    model = served.model
    prefix = model.tokenize(request.prompt or "", add_special=False, parse_special=False)
    suffix = model.tokenize(request.suffix or "", add_special=False, parse_special=False)
    return Prompts((fim_prompt(served, fim, prefix, suffix),))
