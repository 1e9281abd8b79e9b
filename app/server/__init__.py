"""The HTTP server's own concerns, apart from any API dialect: assembly (`app`), security (API
keys, CORS, body limits), errors and their rendering, metrics and the request log, SSE framing,
health and the OpenAPI document."""
