"""OpenAI's Responses API (`/v1/responses`): a thin adapter over the one request plan."""
