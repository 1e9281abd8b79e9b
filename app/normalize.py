"""From a decoded request Struct to what the engine runs (DESIGN step 2).

Also the checks of meaning that a schema cannot carry (400), and the refusal of spec fields that
a later part of Fireside will honour: they are decoded and validated now, and a request that
uses them gets `400 not supported yet: <field>` rather than a silent no-op.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from app.errors import BadRequest, NotSupportedYet, RequestValidationError, from_msgspec
from app.request_types import ChatCompletionRequest, CompletionRequest, GenerationFields, ResponseFormat
from backends.grammar import CompiledGrammar, GrammarError
from backends.jobs import CacheKeys, SamplingParams
from backends.registry import ServedModel
from grammars.gbnf import literal
from grammars.reasoning_prefix import ROOT as REASONING_ROOT
from grammars.reasoning_prefix import with_reasoning_first
from grammars.response_format import ResponseFormatError, response_format_grammar
from grammars.schema_errors import SchemaError

T = TypeVar("T")

MAX_STOP_SEQUENCES = 4
LOGIT_BIAS_RANGE = 100.0

_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def decode_request(body: bytes, request_type: type[T]) -> T:
    """Decode and validate a JSON body; any failure is a 422 naming the field."""
    decoder = _decoders.get(request_type)
    if decoder is None:
        decoder = _decoders[request_type] = msgspec.json.Decoder(request_type)
    try:
        return decoder.decode(body)
    except msgspec.MsgspecError as error:
        raise from_msgspec(error) from None


def _set(value: Any) -> bool:
    return value is not None and value is not False


# Fields that later work implements, with the test for "this request asks for it".
_NOT_YET_SHARED: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("raw_output", lambda r: _set(r.raw_output)),
    ("perf_metrics_in_response", lambda r: _set(r.perf_metrics_in_response)),
    ("stream_options.include_internal_content",
     lambda r: r.stream_options is not None and _set(r.stream_options.include_internal_content)),
    ("stream_options.buffer_tokens", lambda r: r.stream_options is not None and _set(r.stream_options.buffer_tokens)),
    ("stream_options.buffer_ms", lambda r: r.stream_options is not None and _set(r.stream_options.buffer_ms)),
    ("stream_options.buffer_mode", lambda r: r.stream_options is not None and _set(r.stream_options.buffer_mode)),
    ("logprobs", lambda r: _set(r.logprobs)),
    ("top_logprobs", lambda r: _set(r.top_logprobs) and r.top_logprobs != 0),
    ("sampling_mask", lambda r: _set(r.sampling_mask)),
    ("echo_last", lambda r: _set(r.echo_last)),
    ("speculation", lambda r: _set(r.speculation)),
    ("prediction", lambda r: _set(r.prediction)),
    ("return_token_ids", lambda r: _set(r.return_token_ids)),
)

_NOT_YET_COMPLETION: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("thinking", lambda r: _set(r.thinking)),
    ("reasoning_history", lambda r: _set(r.reasoning_history)),
    ("reasoning_effort", lambda r: r.reasoning_effort is not None),
    ("images", lambda r: bool(r.images)),
)

_NOT_YET_CHAT: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("echo", lambda r: _set(r.echo)),
    ("prompt_token_ids", lambda r: r.prompt_token_ids is not None),
    ("prompt_truncate_len", lambda r: _set(r.prompt_truncate_len)),
    ("safe_tokenization", lambda r: _set(r.safe_tokenization)),
)


def reject_unsupported(request: GenerationFields) -> None:
    table = _NOT_YET_SHARED + (
        _NOT_YET_CHAT if isinstance(request, ChatCompletionRequest) else _NOT_YET_COMPLETION
    )
    for field, asks_for in table:
        if asks_for(request):
            raise NotSupportedYet(field)


def check_meaning(request: GenerationFields) -> None:
    """Rules between fields and ranges that the spec states in prose (400)."""
    if request.max_tokens is not None and request.max_completion_tokens is not None:
        raise BadRequest(
            "max_tokens and max_completion_tokens are aliases; give one of them", param="max_tokens"
        )
    limit = requested_max_tokens(request)
    if limit is not None and limit < 0:
        raise BadRequest(f"max_tokens must be 0 or more, got {limit}", param="max_tokens")
    if isinstance(request.stop, list) and len(request.stop) > MAX_STOP_SEQUENCES:
        raise BadRequest(f"stop takes at most {MAX_STOP_SEQUENCES} sequences, got {len(request.stop)}", param="stop")
    if request.repetition_penalty is not None and request.repetition_penalty <= 0:
        # the penalty divides positive logits: 0 has no meaning (vLLM refuses it too)
        raise BadRequest("repetition_penalty must be greater than 0", param="repetition_penalty")
    if request.mirostat_target is not None and request.mirostat_target <= 0:
        raise BadRequest("mirostat_target must be greater than 0", param="mirostat_target")
    if request.mirostat_lr is not None and not 0 < request.mirostat_lr <= 1:
        raise BadRequest("mirostat_lr must be in (0, 1]", param="mirostat_lr")
    if request.stream_options is not None and not request.stream:
        raise BadRequest("stream_options is only valid with stream=true", param="stream_options")
    if request.thinking is not None and request.thinking.type != "enabled":
        extra = [f for f in ("budget_tokens", "keep", "budget_end_str", "effort") if getattr(request.thinking, f) is not None]
        if extra:
            raise RequestValidationError.at(["thinking", extra[0]], f"not allowed when thinking.type is {request.thinking.type!r}", "extra_forbidden")
    if isinstance(request, ChatCompletionRequest):
        _check_chat(request)
    elif isinstance(request, CompletionRequest):
        _check_prompt_shape(request.prompt)


def _check_chat(request: ChatCompletionRequest) -> None:
    if request.messages is not None and request.prompt_token_ids is not None:
        raise BadRequest("give messages or prompt_token_ids, not both", param="messages")
    if request.messages is None and request.prompt_token_ids is None:
        # the schema leaves both optional; a chat needs one of them
        raise BadRequest("messages is required (or prompt_token_ids)", param="messages")


def _check_prompt_shape(prompt: str | list[Any]) -> None:
    """`prompt` is a string, string[], int[] or int[][]: one kind of element throughout."""
    if isinstance(prompt, str):
        return
    if not prompt:
        raise RequestValidationError.at(["prompt"], "prompt must not be an empty list", "too_short")
    kind = type(prompt[0])
    for i, item in enumerate(prompt):
        if type(item) is not kind:
            raise RequestValidationError.at(
                ["prompt", i], "prompt must be a string, a list of strings, a list of token ids or a list of token-id lists", "type_error"
            )
        if kind is list and not item:
            raise RequestValidationError.at(["prompt", i], "a token-id prompt must not be empty", "too_short")


def include_usage(request: GenerationFields) -> bool:
    """Streams end with a usage chunk unless `stream_options.include_usage` is false (spec default)."""
    return request.stream_options is None or request.stream_options.include_usage is not False


def requested_max_tokens(request: GenerationFields) -> int | None:
    return request.max_tokens if request.max_tokens is not None else request.max_completion_tokens


def stop_sequences(request: GenerationFields) -> tuple[str, ...]:
    if request.stop is None:
        return ()
    stops = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop)
    return tuple(s for s in stops if s)


def cache_keys(request: GenerationFields) -> CacheKeys:
    """`prompt_cache_isolation_key` partitions reuse; `prompt_cache_key`, else `user`, steers."""
    affinity = request.prompt_cache_key if request.prompt_cache_key is not None else request.user
    return CacheKeys(isolation=request.prompt_cache_isolation_key, affinity=affinity)


def sampling_params(request: GenerationFields, n_vocab: int) -> SamplingParams:
    return SamplingParams(
        temperature=_or(request.temperature, 1.0),
        top_k=_or(request.top_k, 0),
        top_p=_or(request.top_p, 1.0),
        min_p=_or(request.min_p, 0.0),
        typical_p=_or(request.typical_p, 1.0),
        frequency_penalty=_or(request.frequency_penalty, 0.0),
        presence_penalty=_or(request.presence_penalty, 0.0),
        repetition_penalty=_or(request.repetition_penalty, 1.0),
        mirostat_target=request.mirostat_target,
        mirostat_lr=_or(request.mirostat_lr, 0.1),
        seed=request.seed,
        logit_bias=_logit_bias(request.logit_bias, n_vocab),
        ignore_eos=request.ignore_eos,
    )


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


def _logit_bias(bias: dict[str, float] | None, n_vocab: int) -> tuple[tuple[int, float], ...]:
    if not bias:
        return ()
    pairs = []
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            raise BadRequest(f"logit_bias key {key!r} is not a token id", param="logit_bias") from None
        if not 0 <= token < n_vocab:
            raise BadRequest(f"logit_bias token {token} is outside the vocabulary (0..{n_vocab - 1})", param="logit_bias")
        if not -LOGIT_BIAS_RANGE <= value <= LOGIT_BIAS_RANGE:
            raise BadRequest(f"logit_bias value {value} for token {token} is outside -100..100", param="logit_bias")
        pairs.append((token, float(value)))
    return tuple(pairs)


def check_token_ids(tokens: list[int], n_vocab: int, param: str) -> None:
    for token in tokens:
        if not 0 <= token < n_vocab:
            raise BadRequest(f"token id {token} is outside the vocabulary (0..{n_vocab - 1})", param=param)


def fit_max_tokens(prompt_tokens: int, requested: int | None, default: int | None,
                   ctx_size: int, behavior: str) -> int:
    """The completion budget of one prompt in a `ctx_size` window (`context_length_exceeded_behavior`)."""
    if prompt_tokens > ctx_size:
        raise BadRequest(
            f"This model's maximum context length is {ctx_size} tokens. However, your prompt has "
            f"{prompt_tokens} tokens.",
            param="prompt", code="context_length_exceeded",
        )
    room = ctx_size - prompt_tokens
    wanted = requested if requested is not None else default
    if wanted is None:
        return room
    if wanted > room and behavior == "error":
        raise BadRequest(
            f"This model's maximum context length is {ctx_size} tokens. However, you requested "
            f"{prompt_tokens + wanted} tokens ({prompt_tokens} in the prompt, {wanted} for the "
            "completion). Please reduce the prompt or max_tokens.",
            param="max_tokens", code="context_length_exceeded",
        )
    return min(wanted, room)


ANSWER_ROOT = "fireside-answer"


@dataclass(frozen=True)
class ReasoningFirst:
    """The answer's grammar starts after a reasoning block: `start` opens it (None: the prompt
    already did), `end` closes it."""

    start: str | None
    end: str
    after: str = ""  # always follows the end marker
    answer_opener: str = ""  # opens a plain (non-call) answer


async def output_grammar(request: GenerationFields, served: ServedModel,
                         reasoning: ReasoningFirst | None = None) -> CompiledGrammar | None:
    """The compiled grammar that `response_format` asks for, or None for free text (400 for a
    format that cannot be enforced exactly: never unconstrained output instead). A grammar
    not yet cached is converted and compiled off the event loop: a big schema takes a while."""
    response_format = request.response_format
    if response_format is None:
        return None
    return await asyncio.to_thread(_compile_response_format, response_format, served, reasoning)


def _compile_response_format(response_format: ResponseFormat, served: ServedModel,
                             reasoning: ReasoningFirst | None) -> CompiledGrammar | None:
    try:
        text = response_format_grammar(
            response_format.type,
            schema=response_format.schema,
            json_schema=response_format.json_schema,
            grammar=response_format.grammar,
        )
    except (ResponseFormatError, SchemaError) as error:
        raise BadRequest(f"response_format: {error}", param="response_format") from None
    if text is None:
        return None
    what = "grammar" if response_format.type == "grammar" else "generated grammar"
    if reasoning is not None and reasoning.answer_opener:
        text = f"{text.rstrip()}\n{ANSWER_ROOT} ::= {literal(reasoning.answer_opener)} root\n"
        return compile_grammar(served, text, reasoning, param="response_format", what=what, root=ANSWER_ROOT)
    return compile_grammar(served, text, reasoning, param="response_format", what=what)


def compile_grammar(served: ServedModel, text: str, reasoning: ReasoningFirst | None, *, param: str,
                    what: str = "generated grammar", root: str = "root") -> CompiledGrammar:
    """`text` (rule `root`) compiled for the model (cached), after room for reasoning when there is some."""
    if reasoning is not None:
        text = with_reasoning_first(text, start=reasoning.start, end=reasoning.end + reasoning.after, inner=root)
        root = REASONING_ROOT
    try:
        return served.grammars.get(text, root)
    except GrammarError as error:
        raise BadRequest(f"{param}: the {what} does not parse: {error}", param=param) from None
