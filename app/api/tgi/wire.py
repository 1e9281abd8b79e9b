"""TGI's request and response bodies.

The request mirrors the seed's `TgiGenerateRequest`, whose `TgiGenerateParameters` lists ten of
TGI's parameters; TGI itself (router/src/lib.rs `GenerateParameters`) has eight more that its
clients send (`huggingface_hub` sends `best_of`, `do_sample`, `seed`, `top_n_tokens`, `grammar`,
`watermark`, ...), so all of them are here, with TGI's ranges. `model` is optional although the
seed requires it: TGI serves one model and `huggingface_hub.InferenceClient` never sends one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from app.api.common.outputs import RawOutput
from app.api.common.wire import ChoiceCount, WireStruct
from app.pipeline.answer_check import SchemaViolation

Positive = Annotated[float, Meta(gt=0)]
OpenProbability = Annotated[float, Meta(gt=0, le=1)]
PositiveInt = Annotated[int, Meta(ge=1)]


class Grammar(WireStruct):
    """`{"type": "json", "value": <schema>}`, `{"type": "json_schema", "value": {"name", "schema"}}`
    or `{"type": "regex", "value": <pattern>}`."""

    type: Literal["json", "json_schema", "regex"]
    value: Any


class TgiGenerateParameters(WireStruct, kw_only=True):
    details: bool = False
    max_new_tokens: PositiveInt | None = None
    repetition_penalty: Positive | None = None
    return_full_text: bool | None = False
    stop: Annotated[list[str], Meta(max_length=4)] | None = None
    temperature: Positive | None = None
    top_k: PositiveInt | None = None
    top_p: OpenProbability | None = None
    truncate: PositiveInt | None = None
    typical_p: OpenProbability | None = None
    # TGI's own, beyond the seed's list
    best_of: ChoiceCount | None = None  # as many as `n` allows elsewhere (TGI's own default cap is 2)
    decoder_input_details: bool = False
    do_sample: bool = False
    frequency_penalty: Annotated[float, Meta(gt=-2, le=2)] | None = None
    seed: Annotated[int, Meta(ge=0)] | None = None
    top_n_tokens: PositiveInt | None = None
    grammar: Grammar | None = None
    watermark: bool = False
    adapter_id: str | None = None


class TgiGenerateRequest(WireStruct, kw_only=True):
    inputs: str
    model: str | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_isolation_key: str | None = None
    raw_output: bool | None = False
    perf_metrics_in_response: bool | None = False
    parameters: TgiGenerateParameters | None = None
    stream: bool | None = False


FinishReason = Literal["length", "eos_token", "stop_sequence"]


class PrefillToken(msgspec.Struct):
    id: int
    text: str
    logprob: float | None  # None for the first prompt token: nothing comes before it


class Token(msgspec.Struct):
    id: int
    text: str
    logprob: float | None  # None only for an end-of-text token whose score the engine does not report
    special: bool


# UNSET fields are left out, as TGI leaves out empty `top_tokens` and absent `best_of_sequences`
class BestOfSequence(msgspec.Struct):
    generated_text: str
    finish_reason: FinishReason
    generated_tokens: int
    seed: int | None
    prefill: list[PrefillToken]
    tokens: list[Token]
    top_tokens: list[list[Token]] | UnsetType = UNSET


class Details(msgspec.Struct):
    finish_reason: FinishReason
    generated_tokens: int
    seed: int | None
    prefill: list[PrefillToken]
    tokens: list[Token]
    best_of_sequences: list[BestOfSequence] | UnsetType = UNSET
    top_tokens: list[list[Token]] | UnsetType = UNSET


class GenerateResponse(msgspec.Struct):
    generated_text: str
    details: Details | UnsetType = UNSET
    raw_output: RawOutput | UnsetType = UNSET
    perf_metrics: dict[str, Any] | UnsetType = UNSET
    # Fireside's: how the text breaks the JSON schema of `grammar` (left out when it does not)
    schema_violations: list[SchemaViolation] | UnsetType = UNSET


class StreamDetails(msgspec.Struct):
    finish_reason: FinishReason
    generated_tokens: int
    seed: int | None
    input_length: int


class StreamResponse(msgspec.Struct):
    index: int
    token: Token
    generated_text: str | None = None  # on the last event only (null before, as TGI writes it)
    details: StreamDetails | None = None
    top_tokens: list[Token] | UnsetType = UNSET
    raw_output: RawOutput | UnsetType = UNSET
    perf_metrics: dict[str, Any] | UnsetType = UNSET
    schema_violations: list[SchemaViolation] | UnsetType = UNSET  # on the last event, as on a whole answer


class TgiError(msgspec.Struct):
    error: str
    error_type: str
