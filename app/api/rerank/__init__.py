"""`POST /v1/rerank`: documents scored by a cross-encoder or a chat model's yes/no judgement."""
