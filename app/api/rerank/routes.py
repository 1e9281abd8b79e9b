"""`POST /v1/rerank`: the spec's `RerankRequestBody`, scored by the model's own method.

A cross-encoder (a GGUF with rank pooling, bge-reranker style) reads each (query, document) pair
in the engine's embedding batches and scores it (backends/cross_encoder.py). Any other generative
model scores as Qwen3-Reranker does. Each document is put to the model in its own chat template: a system message saying the answer
can only be "yes" or "no", then `<Instruct>` (the request's `task`), `<Query>` and `<Document>`,
with reasoning switched off where the template can. The relevance score is the probability of
"yes" against "no" at the answer's first position: P(yes) / (P(yes) + P(no)), read from the
engine's prompt scoring (each document's prompt with "yes", then with "no"; the second shares
the first's cached prefix). Any chat model ranks this way; a Qwen3-Reranker GGUF ranks well.
Results come sorted by `relevance_score`, each with its document's original `index`.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import msgspec
from litestar import Request, post
from litestar.response import Response
from litestar.types import Receive
from msgspec import UNSET, UnsetType

from app.api.common.context import request_context
from app.api.common.decode import decode_body
from app.api.common.paths import API_PREFIXES
from app.pipeline.chat_formats import chat_format
from app.pipeline.errors import BadRequest
from app.pipeline.plan import Conversation
from app.pipeline.prepare import require_generative
from app.pipeline.prompts import Prompt, chat_prompt
from app.pipeline.rank import cross_encoder_scores
from app.pipeline.record import track
from app.pipeline.run import acquire_model, job_events, submit
from app.pipeline.usage import RequestClock, UsageCounter
from backends.embedder import Pooling, declared_pooling
from backends.jobs import (
    GenerationJob,
    LogprobOptions,
    PromptLogprobs,
    PromptSpec,
    SamplingParams,
)
from backends.llama_model import LlamaModel
from backends.registry import ServedModel
from templates.chat_format import ChatFormat
from templates.reasoning import ReasoningRequest

SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
          'Note that the answer can only be "yes" or "no".')
DEFAULT_TASK = "Given a web search query, retrieve relevant passages that answer the query"


class RerankRequestBody(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """The spec's `RerankRequestBody`, field by field."""

    query: str
    documents: list[str]
    model: str | None = None
    top_n: int | None = None
    return_documents: bool = True
    task: str | None = None


class RerankResult(msgspec.Struct, omit_defaults=True):
    index: int
    relevance_score: float
    document: str | UnsetType = UNSET


class RerankUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class RerankResponse(msgspec.Struct):
    data: list[RerankResult]
    model: str
    usage: RerankUsage
    object: str = "list"


@dataclass(frozen=True)
class RerankPlan:
    model: str
    query: str
    documents: tuple[str, ...]
    top_n: int
    return_documents: bool
    task: str


def rerank_plan(request: RerankRequestBody, default_model: str) -> RerankPlan:
    if not request.documents:
        raise BadRequest("documents must hold at least one document", param="documents")
    if request.top_n is not None and request.top_n < 1:
        raise BadRequest(f"top_n must be 1 or more, got {request.top_n}", param="top_n")
    top_n = min(request.top_n or len(request.documents), len(request.documents))
    return RerankPlan(request.model or default_model, request.query, tuple(request.documents), top_n,
                      request.return_documents, request.task or DEFAULT_TASK)


def _answer_token(model: LlamaModel, word: str) -> int:
    """The single token the model writes for `word` at the start of its answer."""
    tokens = model.tokenize(word, add_special=False, parse_special=False)
    if len(tokens) != 1:
        raise BadRequest(f"this model writes {word!r} as {len(tokens)} tokens; it cannot rank documents",
                         param="model")
    return tokens[0]


def _judge_prompt(model: LlamaModel, chat: ChatFormat, question: str, reasoning: ReasoningRequest) -> Prompt:
    """The judging instruction as a system message, or at the head of the user message where the
    template refuses a system role (Gemma)."""
    try:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        return chat_prompt(model, chat, Conversation(messages), reasoning)
    except BadRequest as error:
        if error.code != "chat_template_error":
            raise
    return chat_prompt(model, chat, Conversation([{"role": "user", "content": f"{SYSTEM}\n\n{question}"}]), reasoning)


async def create_rerank(request: Request) -> Response:
    context = request_context(request)
    wire = decode_body(await request.body(), RerankRequestBody)
    default_model = next((spec.id for spec, _, _ in context.registry.specs()), "")
    plan = rerank_plan(wire, default_model)
    clock = RequestClock()
    lease = await acquire_model(context.registry, plan.model, "reranking")
    try:
        served = lease.served
        pooling = declared_pooling(served.model)
        if pooling == Pooling.rank:
            if wire.task is not None:
                raise BadRequest(f"{served.id} is a cross-encoder: it reads the query and document alone and "
                                 "takes no task", param="task")
            scores, prompt_tokens = await cross_encoder_scores(served, plan.query, plan.documents, context.receive)
        else:
            require_generative(served, "it does not rank documents (it embeds them; a cross-encoder or a chat "
                                       "model ranks)")
            scores, prompt_tokens = await _llm_scores(served, plan, context.receive)
    finally:
        lease.release()
    clock.finish()
    track(UsageCounter(1, prompt_tokens=prompt_tokens), clock)  # the request log line's token counts
    results = [RerankResult(index, score, document if plan.return_documents else UNSET)
               for index, (document, score) in enumerate(zip(plan.documents, scores, strict=True))]
    results.sort(key=lambda result: (-result.relevance_score, result.index))
    body = RerankResponse(results[:plan.top_n], wire.model or plan.model, RerankUsage(prompt_tokens, prompt_tokens))
    return Response(msgspec.json.encode(body), media_type="application/json")


async def _llm_scores(served: ServedModel, plan: RerankPlan, receive: Receive) -> tuple[list[float], int]:
    """Each document judged by a chat model: P(yes) / (P(yes) + P(no)) at the answer's start."""
    model, chat = served.model, chat_format(served)
    yes, no = _answer_token(model, "yes"), _answer_token(model, "no")
    reasoning = ReasoningRequest(effort="none") if chat.family.reasons else ReasoningRequest()
    limit = served.engine.request_limit
    prompts = []
    for index, document in enumerate(plan.documents):
        question = f"<Instruct>: {plan.task}\n<Query>: {plan.query}\n<Document>: {document}"
        prompt = await asyncio.to_thread(_judge_prompt, model, chat, question, reasoning)
        if len(prompt.tokens) + 1 > limit:  # the judging prompt and its answer token
            raise BadRequest(f"documents[{index}]: judging this document takes {len(prompt.tokens) + 1} tokens "
                             f"(the query, the task and the document in the model's chat template); this model's "
                             f"maximum context length is {limit} tokens", param="documents",
                             code="context_length_exceeded")
        prompts += [PromptSpec((*prompt.tokens, yes), 0), PromptSpec((*prompt.tokens, no), 0)]
    job = GenerationJob(tuple(prompts), 1, SamplingParams(temperature=0), stream=False,
                        logprobs=LogprobOptions(prompt_last=1), adapters=served.adapters)
    answer_logprob: dict[int, float] = {}
    async for event in job_events(submit(served, job), receive):
        if isinstance(event, PromptLogprobs):
            last = event.entries[-1]
            assert last is not None
            answer_logprob[event.choice] = last.logprob
    scores = []
    for index in range(len(plan.documents)):
        p_yes, p_no = math.exp(answer_logprob[2 * index]), math.exp(answer_logprob[2 * index + 1])
        scores.append(p_yes / (p_yes + p_no) if p_yes + p_no > 0 else 0.0)
    return scores, sum(len(spec.tokens) for spec in prompts[::2])


@post([prefix + "/rerank" for prefix in API_PREFIXES], status_code=200)
async def rerank(request: Request) -> Response:
    return await create_rerank(request)


ROUTES = [rerank]
