"""Ranking with a cross-encoder (a GGUF with rank pooling, bge-reranker style), for every door
that ranks documents (`/v1/rerank`, llama-server's `/reranking`): each (query, document) pair
read in the engine's embedding batches and scored (backends/cross_encoder.py)."""

from __future__ import annotations

import asyncio

from litestar.types import Receive

from app.pipeline.embed import pooled
from app.pipeline.errors import BadRequest
from backends.cross_encoder import RankingError, pair_tokens, relevance
from backends.registry import ServedModel


async def cross_encoder_scores(served: ServedModel, query: str, documents: list[str],
                               receive: Receive) -> tuple[list[float], int]:
    """Each document's relevance in [0, 1], and the tokens the pairs took."""
    model = served.model
    pairs = await asyncio.to_thread(lambda: [tuple(pair_tokens(model, query, document)) for document in documents])
    limit = served.engine.embedding_input_limit
    for index, pair in enumerate(pairs):
        if len(pair) > limit:
            raise BadRequest(f"documents[{index}]: the query and this document make {len(pair)} tokens; this model "
                             f"reads at most {limit} at once", param="documents", code="context_length_exceeded")
    vectors = await pooled(served, tuple(pairs), receive)
    try:
        scores = [relevance(model, vector) for vector in vectors]
    except RankingError as error:
        raise BadRequest(str(error), param="model") from None
    return scores, sum(len(pair) for pair in pairs)
