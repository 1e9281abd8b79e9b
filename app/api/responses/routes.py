"""The Responses API's routes: create, retrieve, delete, and list a response's input items."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from litestar import Request, Router, delete, get, post
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Response, Stream

from app.api.common.context import request_context, settings
from app.api.common.errors import OpenAIShape, error_handlers
from app.api.responses.create import NotStored, create_response
from app.api.responses.objects import DeletedResponse, InputItemList
from app.api.responses.store import response_store
from app.pipeline.errors import BadRequest

MAX_LIST = 100


def _missing(response_id: str) -> NotStored:
    return NotStored(f"Response with id '{response_id}' not found.", param="response_id")


@post("/v1/responses", status_code=200)
async def create(request: Request) -> Response | Stream:
    return await create_response(request_context(request), settings(request), await request.body())


@get("/v1/responses/{response_id:str}")
async def retrieve(response_id: FromPath[str], stream: FromQuery[bool] = False) -> Response:
    if stream:
        raise BadRequest("stream: a stored response cannot be streamed again here; GET it whole", param="stream")
    found = await asyncio.to_thread(response_store().get, response_id)
    if found is None:
        raise _missing(response_id)
    return Response(found)


@delete("/v1/responses/{response_id:str}", status_code=200)
async def remove(response_id: FromPath[str]) -> DeletedResponse:
    if not await asyncio.to_thread(response_store().delete, response_id):
        raise _missing(response_id)
    return DeletedResponse(response_id)


@get("/v1/responses/{response_id:str}/input_items")
async def input_items(response_id: FromPath[str],
                      limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIST)] = 20,
                      order: FromQuery[Literal["asc", "desc"]] = "desc",
                      after: FromQuery[str | None] = None) -> InputItemList:
    items = await asyncio.to_thread(response_store().input_items, response_id)
    if items is None:
        raise _missing(response_id)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise BadRequest(f"after: no input item {after!r} in this response", param="after")
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    return InputItemList(page, page[0]["id"] if page else None, page[-1]["id"] if page else None,
                         len(items) > limit)


# OpenAI's error body on these paths, schema errors included (a 400 naming the parameter)
ROUTES = [Router("", route_handlers=[create, retrieve, remove, input_items],
                 exception_handlers=error_handlers(OpenAIShape()))]
