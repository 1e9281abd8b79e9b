"""Where the OpenAI-style routes live: under `/v1`, and under `/inference/v1` as on Fireworks."""

API_PREFIXES = ("/v1", "/inference/v1")
