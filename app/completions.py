"""`POST /v1/completions`: prompts as text or token ids, answered whole or as an SSE stream."""

from __future__ import annotations

from dataclasses import dataclass

from msgspec import UNSET, UnsetType
from litestar.response import Response, Stream
from litestar.types import Receive

from app.errors import BadRequest
from app.generation import collect, new_id, now, resolve_model, sse_response, submit
from app.normalize import (
    cache_keys,
    check_meaning,
    check_token_ids,
    decode_request,
    fit_max_tokens,
    include_usage,
    output_grammar,
    reject_unsupported,
    requested_max_tokens,
    sampling_params,
    stop_sequences,
)
from app.request_types import CompletionRequest
from app.response_types import (
    CompletionChoice,
    CompletionResponse,
    CompletionStreamResponse,
    UsageInfo,
)
from backends.jobs import GenerationJob, PromptSpec
from backends.llama_model import LlamaModel
from backends.registry import ModelRegistry

# OpenAI's (and Fireworks') default for the legacy completions endpoint.
DEFAULT_MAX_TOKENS = 16


def prompt_tokens(prompt: str | list, model: LlamaModel) -> list[tuple[list[int], str | None]]:
    """Each prompt's tokens, with its text when it came as text (echo returns it verbatim)."""
    if isinstance(prompt, str):
        items: list = [prompt]
    elif isinstance(prompt[0], int):
        items = [prompt]
    else:
        items = prompt
    prompts = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            tokens = model.tokenize(item, add_special=True, parse_special=True)
            text: str | None = item
        else:
            check_token_ids(item, model.n_vocab, "prompt")
            tokens, text = list(item), None
        if not tokens:
            if model.bos_token_id < 0:
                raise BadRequest(f"prompt {i} is empty", param="prompt")
            tokens = [model.bos_token_id]  # an empty prompt starts from the beginning of text
        prompts.append((tokens, text))
    return prompts


@dataclass
class CompletionStreamShape:
    id: str
    created: int
    model: str
    echoes: list[str] | None

    def _chunk(self, choices: list[CompletionChoice], usage: UsageInfo | UnsetType = UNSET) -> CompletionStreamResponse:
        return CompletionStreamResponse(self.id, self.created, self.model, choices, usage)

    def opening(self) -> list[CompletionStreamResponse]:
        if not self.echoes:
            return []
        return [self._chunk([CompletionChoice(i, text, None, None)]) for i, text in enumerate(self.echoes) if text]

    def text(self, choice: int, text: str) -> list[CompletionStreamResponse]:
        return [self._chunk([CompletionChoice(choice, text, None, None)])]

    def finished(self, choice: int, reason: str) -> list[CompletionStreamResponse]:
        return [self._chunk([CompletionChoice(choice, "", reason, None)])]  # type: ignore[arg-type]

    def usage(self, usage: UsageInfo) -> CompletionStreamResponse:
        return self._chunk([], usage)


async def create_completion(registry: ModelRegistry, body: bytes, receive: Receive) -> Response | Stream:
    request = decode_request(body, CompletionRequest)
    check_meaning(request)
    reject_unsupported(request)
    served = resolve_model(registry, request.model)
    model = served.model
    prompts = prompt_tokens(request.prompt, model)
    requested = requested_max_tokens(request)
    grammar = await output_grammar(request, served)
    job = GenerationJob(
        prompts=tuple(
            PromptSpec(
                tuple(tokens),
                fit_max_tokens(len(tokens), requested, DEFAULT_MAX_TOKENS, served.engine.ctx_size,
                               request.context_length_exceeded_behavior),
            )
            for tokens, _ in prompts
        ),
        n=request.n,
        sampling=sampling_params(request, model.n_vocab),
        stop=stop_sequences(request),
        cache=cache_keys(request),
        stream=bool(request.stream),
        grammar=grammar,
    )
    echoes = None
    if request.echo:
        texts = [text if text is not None else model.detokenize(tokens) for tokens, text in prompts]
        echoes = [texts[choice // request.n] for choice in range(job.choice_count)]
    handle = submit(served, job)
    response_id, created = new_id("cmpl"), now()
    if request.stream:
        shape = CompletionStreamShape(response_id, created, request.model, echoes)
        return sse_response(handle, shape, include_usage=include_usage(request))
    results, usage = await collect(handle, receive)
    choices = [
        CompletionChoice(i, (echoes[i] if echoes else "") + result.text, result.finish_reason, None)  # type: ignore[arg-type]
        for i, result in enumerate(results)
    ]
    return Response(CompletionResponse(response_id, created, request.model, choices, usage))
