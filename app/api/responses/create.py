"""`POST /v1/responses`: the body, after the stored turns of its `previous_response_id`, as a
plan; answered through `app.pipeline.run.answer` with the `ResponsesShaper`; the finished response
kept (unless `store: false`) through `answer`'s final-answer hook, before the client sees it end,
so a next turn can continue from it."""

from __future__ import annotations

import asyncio
import uuid

import msgspec
from litestar.response import Response as HttpResponse
from litestar.response import Stream

from app.api.common.streams import RESPONSES_SSE
from app.api.responses.items import as_items, item_from_store, stored_item
from app.api.responses.objects import ReasoningEcho, Response
from app.api.responses.plan import check_request, responses_plan
from app.api.responses.requests import (
    InputItem,
    ItemReference,
    ResponsesRequest,
    decode_request,
)
from app.api.responses.shaper import ItemBuilder, ResponsesShaper
from app.api.responses.store import ResponseStore, response_store
from app.pipeline.errors import ApiError
from app.pipeline.record import note_response_id
from app.pipeline.run import AnswerHooks, RequestContext, Shaper, answer, now
from app.settings.api import ApiSettings


class NotStored(ApiError):
    """A response or item id that the store does not hold (404, as OpenAI answers it)."""

    status_code = 404
    error_type = "invalid_request_error"


def echo(request: ResponsesRequest, response_id: str) -> Response:
    """The response before its output: the request's settings as OpenAI echoes them."""
    text_format = request.text.format if request.text is not None else None
    reasoning = request.reasoning
    choice = request.tool_choice or "auto"
    return Response(
        id=response_id, created_at=now(), status="in_progress", instructions=request.instructions,
        max_output_tokens=request.max_output_tokens, max_tool_calls=request.max_tool_calls, model=request.model,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        previous_response_id=request.previous_response_id, prompt_cache_key=request.prompt_cache_key,
        prompt_cache_retention=request.prompt_cache_retention,
        reasoning=ReasoningEcho(reasoning.effort if reasoning else None,
                                (reasoning.summary or reasoning.generate_summary) if reasoning else None),
        safety_identifier=request.safety_identifier,
        service_tier="priority" if request.service_tier == "priority" else "default",
        store=request.store is not False, temperature=request.temperature,
        text={"format": msgspec.to_builtins(text_format) if text_format is not None else {"type": "text"},
              "verbosity": "medium"},
        tool_choice=choice if isinstance(choice, str) else msgspec.to_builtins(choice),
        tools=[msgspec.to_builtins(tool) for tool in request.tools or []], top_logprobs=request.top_logprobs,
        top_p=request.top_p, user=request.user, metadata=request.metadata or {},
    )


async def _history(store: ResponseStore, previous: str | None) -> list[InputItem]:
    if previous is None:
        return []
    stored = await asyncio.to_thread(store.conversation, previous)
    if stored is None:
        raise NotStored(f"Previous response with id '{previous}' not found.", param="previous_response_id",
                        code="previous_response_not_found")
    return [item_from_store(item) for item in stored]


async def _resolved(store: ResponseStore, items: list[InputItem]) -> list[InputItem]:
    """Item references replaced by the stored items they name."""
    wanted = [item.id for item in items if isinstance(item, ItemReference)]
    if not wanted:
        return items
    found = await asyncio.to_thread(store.items, wanted)
    resolved = []
    for i, item in enumerate(items):
        if isinstance(item, ItemReference):
            if item.id not in found:
                raise NotStored(f"Item with id '{item.id}' not found.", param=f"input[{i}].id")
            item = item_from_store(found[item.id])
        resolved.append(item)
    return resolved


async def create_response(context: RequestContext, settings: ApiSettings, body: bytes) -> HttpResponse | Stream:
    request = decode_request(body)
    check_request(request, settings.max_logprobs)
    store = response_store()
    history = await _history(store, request.previous_response_id)
    items = await _resolved(store, as_items(request.input))
    plan = responses_plan(request, history + items, len(history))
    response_id = f"resp_{uuid.uuid4().hex}"
    note_response_id(response_id)
    base = echo(request, response_id)
    seal = "reasoning.encrypted_content" in (request.include or [])
    hooks = None
    if request.store is not False:
        inputs = [stored_item(item) for item in items]

        async def keep(shaper: Shaper) -> None:
            assert isinstance(shaper, ResponsesShaper) and shaper.final is not None
            await asyncio.to_thread(store.save, msgspec.to_builtins(shaper.final), inputs)

        hooks = AnswerHooks(on_final=keep)
    return await answer(context, plan, lambda prepared, clock: ResponsesShaper(prepared, base, ItemBuilder(seal)),
                        RESPONSES_SSE, hooks)
