"""Output Structs several doors write: OpenAI's usage and its two logprobs shapes, and Fireworks'
`raw_output` (also on TGI's answers). Optional extras default to `UNSET` and stay out of the JSON."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, UnsetType


class ResponseStruct(msgspec.Struct):
    pass


class PromptTokensDetails(ResponseStruct):
    cached_tokens: int | None = None


class UsageInfo(ResponseStruct):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int | None = None
    prompt_tokens_details: PromptTokensDetails | None = None

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> UsageInfo:
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached_tokens),
        )


class LogProbs(ResponseStruct):
    """The legacy shape (`logprobs`: N): one entry per token in each list."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None] | None
    text_offset: list[int]
    token_ids: list[int] | None = None


class TopLogProb(ResponseStruct):
    token: str
    logprob: float
    token_id: int
    bytes: list[int]


class LogProbContent(ResponseStruct):
    token: str
    logprob: float | None  # null for the first prompt token (echo)
    sampling_logprob: float | None
    bytes: list[int]
    top_logprobs: list[TopLogProb]
    token_id: int
    text_offset: int
    sampling_mask_count: int | UnsetType = UNSET
    sampling_mask: list[int] | str | UnsetType = UNSET


class NewLogProbs(ResponseStruct):
    """The OpenAI shape (`logprobs: true`, `top_logprobs`: N)."""

    content: list[LogProbContent]


# LogProbs | NewLogProbs | None: msgspec cannot describe a union of untagged Structs, so the field
# is typed loosely and the schema names the two shapes (both listed in `app.server.openapi`).
ChoiceLogprobs = Annotated[
    Any,
    msgspec.Meta(extra_json_schema={"anyOf": [{"$ref": "#/components/schemas/LogProbs"},
                                              {"$ref": "#/components/schemas/NewLogProbs"}, {"type": "null"}]}),
]


class RawOutput(ResponseStruct):
    prompt_fragments: list[str | int]
    prompt_token_ids: list[int]
    completion: str
    completion_token_ids: list[int] | None = None
    completion_logprobs: NewLogProbs | None = None
    grammar: str | None = None
