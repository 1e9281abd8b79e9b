"""The Messages API's routes, `/v1/messages` and `/v1/messages/count_tokens` (also without the
`/v1` prefix, which some clients use with a base URL that already ends in `/v1`), on a Router
whose exception handlers answer in Anthropic's error shape. The `anthropic-version` and
`anthropic-beta` headers are accepted whatever they say: there is one version of this API here."""

from __future__ import annotations

from litestar import Request, Router, post
from litestar.response import Response, Stream

from app.api.anthropic.errors import EXCEPTION_HANDLERS
from app.api.anthropic.plan import count_plan, messages_plan
from app.api.anthropic.responses import CountTokensResponse
from app.api.anthropic.shaper import MessageShaper
from app.api.anthropic.wire import CountTokensRequest, MessagesRequest
from app.api.common.context import request_context
from app.api.common.decode import decode_body
from app.api.common.streams import ANTHROPIC_SSE
from app.pipeline.prepare import count_chat_tokens
from app.pipeline.run import acquire_model, answer


@post(["/v1/messages", "/messages"], status_code=200)
async def create_message(request: Request) -> Response | Stream:
    body = decode_body(await request.body(), MessagesRequest)
    plan = messages_plan(body)
    return await answer(request_context(request), plan,
                        lambda prepared, clock: MessageShaper(prepared, clock, body.model), ANTHROPIC_SSE)


@post(["/v1/messages/count_tokens", "/messages/count_tokens"], status_code=200)
async def count_tokens(request: Request) -> CountTokensResponse:
    """The prompt a create with these fields would read, rendered and tokenized only: no image is
    encoded, no grammar compiled (`app.pipeline.prepare.count_chat_tokens`)."""
    body = decode_body(await request.body(), CountTokensRequest)
    plan = count_plan(body)
    context = request_context(request)
    lease = await acquire_model(context.registry, plan.model, "counting tokens")
    try:
        return CountTokensResponse(await count_chat_tokens(plan, lease.served, context.media))
    finally:
        lease.release()


ROUTES = [Router("/", route_handlers=[create_message, count_tokens], exception_handlers=EXCEPTION_HANDLERS)]
