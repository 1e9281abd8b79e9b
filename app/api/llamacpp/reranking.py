"""llama-server's `/reranking` (also `/rerank` and `/v1/reranking`), in Jina's shape: each
document's relevance to the query by a reranker model (rank pooling), best first."""

from __future__ import annotations

from app.api.llamacpp.wire import (
    RankedDocument,
    RerankingRequest,
    RerankingResponse,
    RerankingUsage,
)
from app.pipeline.errors import BadRequest
from app.pipeline.rank import cross_encoder_scores
from app.pipeline.run import RequestContext, leased_model
from backends.embedder import Pooling, declared_pooling


async def reranking(context: RequestContext, body: RerankingRequest, model: str) -> RerankingResponse:
    async with leased_model(context.registry, model, "reranking") as served:
        if declared_pooling(served.model) != Pooling.rank:
            raise BadRequest(f"{served.id} is not a reranker (a GGUF with rank pooling); /v1/rerank also ranks with "
                             "a chat model", param="model")
        scores, tokens = await cross_encoder_scores(served, body.query, body.documents, context.receive)
    ranked = sorted((RankedDocument(i, score) for i, score in enumerate(scores)),
                    key=lambda result: (-result.relevance_score, result.index))
    return RerankingResponse(model, RerankingUsage(tokens, tokens), ranked[:body.top_n])
