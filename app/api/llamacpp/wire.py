"""llama-server's native request and response bodies (tools/server/README.md and
server-task.cpp in llama.cpp).

Every field llama-server's `/completion` reads is here, so a client that sends its defaults (as
SillyTavern and llama.cpp's own web UI do) is answered; `app.api.llamacpp.plan` refuses (400)
the values it cannot honour. Unknown fields are a schema error (400 in llama-server's shape),
where llama-server ignores them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from app.api.common.timings import Timings
from app.api.common.wire import WireStruct

NonNegative = Annotated[float, Meta(ge=0)]
Probability = Annotated[float, Meta(ge=0, le=1)]
MAX_STOP = 64  # stop strings each token is checked against (llama-server sets no limit)
# one prompt: text, token ids, or both mixed (`[12, 34, "text", 56]`)
MixedPrompt = str | list[int | str]


class LlamaCompletionRequest(WireStruct, kw_only=True):
    prompt: str | list[Any]  # one prompt (text, ids, or mixed) or several; read by the plan
    model: str | None = None
    n_predict: Annotated[int, Meta(ge=-1)] | None = None
    max_tokens: Annotated[int, Meta(ge=-1)] | None = None  # read when n_predict is not given
    stream: bool = False
    stop: Annotated[list[str], Meta(max_length=MAX_STOP)] | None = None
    cache_prompt: bool = True
    n_probs: Annotated[int, Meta(ge=0)] = 0
    post_sampling_probs: bool = False
    return_tokens: bool = False
    timings_per_token: bool = False
    return_progress: bool = False
    response_fields: list[str] | None = None
    n_cmpl: Annotated[int, Meta(ge=1, le=128)] = 1
    # sampling, with llama-server's defaults
    temperature: float = 0.8
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_k: int = 40
    top_p: Probability = 0.95
    min_p: Probability = 0.05
    typical_p: Probability = 1.0
    top_n_sigma: float = -1.0
    xtc_probability: Probability = 0.0
    xtc_threshold: float = 0.1
    repeat_penalty: NonNegative = 1.0
    repeat_last_n: Annotated[int, Meta(ge=-1)] = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: NonNegative = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: list[str] | None = None
    mirostat: Literal[0, 1, 2] = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    min_keep: Annotated[int, Meta(ge=0)] = 0
    samplers: list[str] | str | None = None
    seed: int = -1
    ignore_eos: bool = False
    logit_bias: list[list[Any]] | dict[str, float | bool] | None = None
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    # slots, context and timing controls
    n_keep: int = 0
    n_discard: int = 0
    n_indent: int = 0
    n_cache_reuse: int = 0
    t_max_predict_ms: int = 0
    t_max_prompt_ms: int = -1
    id_slot: int = -1
    sse_ping_interval: float | None = None
    lora: list[dict[str, Any]] | None = None


class InfillChunk(WireStruct, kw_only=True):
    text: str = ""
    filename: str = "tmp"


class InfillRequest(LlamaCompletionRequest, kw_only=True):
    """`/completion`'s fields, `prompt` (the start of the middle) optional, and the code around it."""

    prompt: str | list[Any] = ""
    input_prefix: MixedPrompt
    input_suffix: MixedPrompt = ""
    input_extra: list[InfillChunk] | None = None


class LlamaTokenizeRequest(WireStruct, kw_only=True):
    content: MixedPrompt
    model: str | None = None
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class LlamaDetokenizeRequest(WireStruct, kw_only=True):
    tokens: list[int]
    model: str | None = None


class TemplateMessage(WireStruct, kw_only=True):
    role: str
    content: str | list[dict[str, Any]] | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class ApplyTemplateRequest(WireStruct, kw_only=True):
    messages: Annotated[list[TemplateMessage], Meta(min_length=1)]
    model: str | None = None


# ---- answers ----------------------------------------------------------------------------------


class TokenPiece(msgspec.Struct):
    id: int
    piece: str | list[int]  # the piece's text, or its bytes where they are not valid UTF-8 alone


class LlamaTokenizeResponse(msgspec.Struct):
    tokens: list[int | TokenPiece]  # ids, or ids with their pieces (`with_pieces`)


class LlamaDetokenizeResponse(msgspec.Struct):
    content: str


class ApplyTemplateResponse(msgspec.Struct):
    prompt: str


class TopProbability(msgspec.Struct):
    id: int
    token: str
    bytes: list[int]
    logprob: float


class TokenProbability(msgspec.Struct):
    id: int
    token: str
    bytes: list[int]
    logprob: float
    top_logprobs: list[TopProbability]


StopType = Literal["none", "eos", "limit", "word"]


class LlamaCompletionChunk(msgspec.Struct):
    """One streamed token (`stop: false`)."""

    index: int
    content: str
    tokens: list[int]
    stop: bool
    id_slot: int
    tokens_predicted: int
    tokens_evaluated: int
    timings: Timings | UnsetType = UNSET
    completion_probabilities: list[TokenProbability] | UnsetType = UNSET


class LlamaCompletionResponse(msgspec.Struct):
    """A whole answer, and a stream's last event (`stop: true`)."""

    index: int
    content: str
    tokens: list[int]
    id_slot: int
    stop: bool
    model: str
    tokens_predicted: int
    tokens_evaluated: int
    generation_settings: dict[str, Any]
    prompt: str
    has_new_line: bool
    truncated: bool
    stop_type: StopType
    stopping_word: str
    tokens_cached: int
    timings: Timings
    completion_probabilities: list[TokenProbability] | UnsetType = UNSET


class LlamaProps(msgspec.Struct):
    default_generation_settings: dict[str, Any]
    total_slots: int
    model_path: str
    chat_template: str
    chat_template_caps: dict[str, Any]
    modalities: dict[str, bool]
    build_info: str
    is_sleeping: bool
    bos_token: str
    eos_token: str


class EmbeddingContentRequest(WireStruct, kw_only=True):
    content: str | list[Any]  # one input (text, ids, or both mixed) or several, as `/completion`'s prompt
    model: str | None = None
    embd_normalize: int = 2  # -1: none, 0: max absolute, 1: taxicab, 2: Euclidean, above 2: that p-norm


class EmbeddingContent(msgspec.Struct):
    index: int
    embedding: list[list[float]]  # one pooled vector (llama-server lists per-token ones without pooling)


class RerankingRequest(WireStruct, kw_only=True):
    query: str
    documents: Annotated[list[str], Meta(min_length=1)]
    model: str | None = None
    top_n: Annotated[int, Meta(ge=1)] | None = None  # llama-server sizes its list by a negative one (and fails)


class RankedDocument(msgspec.Struct):
    index: int
    relevance_score: float


class RerankingUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class RerankingResponse(msgspec.Struct):
    """Jina's shape, as llama-server answers it."""

    model: str
    usage: RerankingUsage
    results: list[RankedDocument]
    object: str = "list"


class SlotNextToken(msgspec.Struct):
    has_next_token: bool
    has_new_line: bool
    n_remain: int
    n_decoded: int
    stopping_word: str


class SlotState(msgspec.Struct):
    id: int
    id_task: int
    n_ctx: int
    speculative: bool
    is_processing: bool
    n_tokens_cached: int  # Fireside's: how many positions its cache holds (never their text)
    params: dict[str, Any]
    prompt: str  # always empty: a slot's prompt is another client's (llama-server shows it)
    next_token: list[SlotNextToken]  # a list of one, as llama-server writes it


class LlamaErrorBody(msgspec.Struct):
    code: int
    message: str
    type: str


class LlamaError(msgspec.Struct):
    error: LlamaErrorBody


# ---- vLLM's `/v1/tokenize` and `/v1/detokenize` (OpenAI-speaking clients) ---------------------


class VllmTokenizeRequest(WireStruct, kw_only=True):
    """A `prompt`, or chat `messages` rendered with the model's template (not both)."""

    model: str | None = None
    prompt: str | None = None
    messages: Annotated[list[TemplateMessage], Meta(min_length=1)] | None = None
    add_special_tokens: bool | None = None  # vLLM's default: true for a prompt, false for messages
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool = False


class VllmTokenizeResponse(msgspec.Struct):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class VllmDetokenizeRequest(WireStruct, kw_only=True):
    tokens: list[int]
    model: str | None = None


class VllmDetokenizeResponse(msgspec.Struct):
    prompt: str
