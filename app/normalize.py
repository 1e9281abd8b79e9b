"""From a decoded request Struct to what the engine runs (DESIGN step 2), with the checks of
meaning that a schema cannot carry (400)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import msgspec

from app.errors import BadRequest, RequestValidationError, from_msgspec
from app.request_types import (
    ChatCompletionRequest,
    CompletionRequest,
    GenerationFields,
    PredictedOutput,
    ResponseFormat,
    SamplingMaskMode,
)
from app.stream_buffer import BufferPolicy
from backends.grammar import CompiledGrammar, GrammarError
from backends.jobs import CacheKeys, LogprobOptions, SamplingParams
from backends.llama_model import LlamaModel
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


# Echo the whole prompt (`echo: true`), as opposed to its last N tokens (`echo_last`).
ECHO_ALL = -1
_NO_DEFAULTS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class OutputOptions:
    """What a response carries besides text, as the request asks for it."""

    logprobs: LogprobOptions | None = None  # for the engine; None: none computed
    legacy_logprobs: bool = False  # `logprobs`: N (else the OpenAI shape)
    top_logprobs: int = 0
    sampling_mask: SamplingMaskMode | None = None
    echo: int | None = None  # None, ECHO_ALL or the last N prompt tokens
    token_ids: bool = False  # `return_token_ids`
    internal_content: bool = False  # `stream_options.include_internal_content`
    raw_output: bool = False
    perf_in_body: bool = False


def output_options(request: GenerationFields, max_logprobs: int) -> OutputOptions:
    """The request's output extras, checked against each other and `--max-logprobs` (400)."""
    logprobs, top = request.logprobs, request.top_logprobs
    if top is not None and not 0 <= top <= max_logprobs:
        raise BadRequest(f"top_logprobs must be between 0 and {max_logprobs} (--max-logprobs), got {top}",
                         param="top_logprobs")
    legacy = isinstance(logprobs, int) and not isinstance(logprobs, bool)
    if legacy:
        if not 0 <= logprobs <= max_logprobs:
            raise BadRequest(f"logprobs must be between 0 and {max_logprobs} (--max-logprobs), got {logprobs}",
                             param="logprobs")
        top = logprobs if top is None else top
    wanted = legacy or logprobs is True
    if not wanted and top:
        raise BadRequest("top_logprobs needs logprobs: set logprobs to true", param="top_logprobs")
    mask = request.sampling_mask
    if mask is not None:
        if legacy:
            raise BadRequest("sampling_mask comes with the OpenAI logprobs shape (logprobs: true), "
                             "not with logprobs as a number", param="sampling_mask")
        wanted = True  # the mask rides on each token's logprobs entry
    echo = _echo(request)
    engine_options = None
    if wanted:
        prompt_last = 0
        if echo is not None:
            prompt_last = (1 << 30) if echo == ECHO_ALL else echo
        engine_options = LogprobOptions(top=top or 0, sampling=not legacy, active_ids=mask not in (None, "count"),
                                        prompt_last=prompt_last)
    stream_options = request.stream_options
    return OutputOptions(
        logprobs=engine_options,
        legacy_logprobs=legacy,
        top_logprobs=top or 0,
        sampling_mask=mask,
        echo=echo,
        token_ids=bool(request.return_token_ids),
        internal_content=stream_options is not None and bool(stream_options.include_internal_content),
        raw_output=bool(request.raw_output),
        perf_in_body=bool(request.perf_metrics_in_response),
    )


def _echo(request: GenerationFields) -> int | None:
    if request.echo_last is not None:
        if request.echo_last < 0:
            raise BadRequest(f"echo_last must be 0 or more, got {request.echo_last}", param="echo_last")
        if request.echo:
            raise BadRequest("give echo or echo_last, not both", param="echo_last")
        return request.echo_last
    return ECHO_ALL if request.echo else None


def draft_tokens(request: GenerationFields, model: LlamaModel) -> tuple[int, ...]:
    """The predicted output (`speculation`, or OpenAI's `prediction`) as tokens."""
    speculation, prediction = request.speculation, request.prediction
    if speculation is not None and prediction is not None:
        raise BadRequest("give speculation or prediction, not both", param="prediction")
    if isinstance(speculation, list):
        check_token_ids(speculation, model.n_vocab, "speculation")
        return tuple(speculation)
    text = speculation
    if prediction is not None:
        text = prediction if isinstance(prediction, str) else _prediction_text(prediction)
    if not text:
        return ()
    return tuple(model.tokenize(text, add_special=False, parse_special=False))


def _prediction_text(prediction: PredictedOutput) -> str:
    if isinstance(prediction.content, str):
        return prediction.content
    texts = []
    for i, part in enumerate(prediction.content):
        if part.type != "text" or part.text is None:
            raise BadRequest(f"prediction.content[{i}] must be a text part", param="prediction")
        texts.append(part.text)
    return "".join(texts)


NO_IMAGES = "this model does not accept images"


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
        if request.images:
            raise BadRequest(NO_IMAGES, param="images")


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


def stream_buffer(request: GenerationFields) -> BufferPolicy | None:
    options = request.stream_options
    if options is None:
        return None
    return BufferPolicy.of(options.buffer_tokens, options.buffer_ms, options.buffer_mode)


def requested_max_tokens(request: GenerationFields, defaults: Mapping[str, Any] = _NO_DEFAULTS) -> int | None:
    """`max_tokens` (or its alias), else the model's configured default."""
    if request.max_tokens is not None:
        return request.max_tokens
    if request.max_completion_tokens is not None:
        return request.max_completion_tokens
    return defaults.get("max_tokens")


def stop_sequences(request: GenerationFields, defaults: Mapping[str, Any] = _NO_DEFAULTS) -> tuple[str, ...]:
    stop = request.stop if request.stop is not None else defaults.get("stop")
    if stop is None:
        return ()
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    return tuple(s for s in stops if s)


def cache_keys(request: GenerationFields) -> CacheKeys:
    """`prompt_cache_isolation_key` partitions reuse; `prompt_cache_key`, else `user`, steers."""
    affinity = request.prompt_cache_key if request.prompt_cache_key is not None else request.user
    return CacheKeys(isolation=request.prompt_cache_isolation_key, affinity=affinity)


def sampling_params(request: GenerationFields, n_vocab: int,
                    defaults: Mapping[str, Any] = _NO_DEFAULTS) -> SamplingParams:
    """The request's sampling fields; one it leaves out takes the model's configured default
    (the config file's `[models.sampling]`), else the spec's."""
    def pick(name: str, spec_default: Any) -> Any:
        value = getattr(request, name)
        return value if value is not None else defaults.get(name, spec_default)

    return SamplingParams(
        temperature=pick("temperature", 1.0),
        top_k=pick("top_k", 0),
        top_p=pick("top_p", 1.0),
        min_p=pick("min_p", 0.0),
        typical_p=pick("typical_p", 1.0),
        frequency_penalty=pick("frequency_penalty", 0.0),
        presence_penalty=pick("presence_penalty", 0.0),
        repetition_penalty=pick("repetition_penalty", 1.0),
        mirostat_target=pick("mirostat_target", None),
        mirostat_lr=pick("mirostat_lr", 0.1),
        seed=pick("seed", None),
        logit_bias=_logit_bias(request.logit_bias, n_vocab),
        ignore_eos=request.ignore_eos,
    )


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
    if request.response_format is None:
        return None
    return await asyncio.to_thread(_compile_response_format, request.response_format, served, reasoning)


@dataclass(frozen=True)
class AnswerGrammar:
    """The grammar of a plain answer under `response_format`: its text and root rule."""

    text: str
    root: str
    what: str  # how errors name it


def answer_grammar(response_format: ResponseFormat, reasoning: ReasoningFirst | None) -> AnswerGrammar | None:
    """`response_format` as grammar text (None: free text), after the family's answer opener when
    it has one (400 for a format that cannot be enforced exactly)."""
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
        return AnswerGrammar(text, ANSWER_ROOT, what)
    return AnswerGrammar(text, "root", what)


def _compile_response_format(response_format: ResponseFormat, served: ServedModel,
                             reasoning: ReasoningFirst | None) -> CompiledGrammar | None:
    answer = answer_grammar(response_format, reasoning)
    if answer is None:
        return None
    return compile_grammar(served, answer.text, reasoning, param="response_format", what=answer.what,
                           root=answer.root)


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
