"""`POST /v1/embeddings`: inputs parsed and formatted, embedded on the engine, shaped as OpenAI's list."""
