"""llama-server's `/embedding`: each input's pooled vector (as `[[...]]`, llama-server's shape
with pooling), normalised as `embd_normalize` says (`common_embd_normalize`)."""

from __future__ import annotations

import numpy as np

from app.api.llamacpp.plan import prompt_list
from app.api.llamacpp.tokens import mixed_tokens
from app.api.llamacpp.wire import EmbeddingContent, EmbeddingContentRequest
from app.pipeline.embed import EmbeddingPlan, embed_on
from app.pipeline.errors import BadRequest
from app.pipeline.run import RequestContext, acquire_model

NONE, MAX_ABSOLUTE, TAXICAB, EUCLIDEAN = -1, 0, 1, 2


def normalized(vector: np.ndarray, norm: int) -> list[float]:
    if norm < NONE:
        raise BadRequest(f"embd_normalize must be -1 or more, got {norm}", param="embd_normalize")
    values = vector.astype(np.float64)
    if norm == NONE:
        scale = 1.0
    elif norm == MAX_ABSOLUTE:
        scale = float(np.abs(values).max()) / 32760.0  # llama.cpp scales to int16's range
    elif norm == TAXICAB:
        scale = float(np.abs(values).sum())
    elif norm == EUCLIDEAN:
        scale = float(np.sqrt((values * values).sum()))
    else:
        scale = float((np.abs(values) ** norm).sum() ** (1.0 / norm))
    return (values / scale if scale > 0 else values).tolist()


async def embedding(context: RequestContext, body: EmbeddingContentRequest, model: str) -> list[EmbeddingContent]:
    prompts = prompt_list(body.content)
    lease = await acquire_model(context.registry, model, "embedding")
    try:
        vocab_model = lease.served.model
        inputs = tuple(item if isinstance(item, str) else tuple(mixed_tokens(
            vocab_model, item, add_special=True, parse_special=True, param="content")) for item in prompts)
        vectors, _ = await embed_on(lease, EmbeddingPlan(model, inputs), context.receive)
    finally:
        lease.release()
    return [EmbeddingContent(i, [normalized(vector, body.embd_normalize)]) for i, vector in enumerate(vectors)]
