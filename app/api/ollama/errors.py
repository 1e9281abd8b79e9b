"""Ollama's error shape, `{"error": "message"}` with the HTTP status, for every error under
`/api` (the API-key guard's 401, unknown models, bodies that break the schema), while the other
dialects keep theirs: these handlers sit on the Ollama router, not on the app.

A body that breaks the schema is a 400 here, as Ollama answers it, not the 422 of `/v1`.
"""

from __future__ import annotations

from typing import Any

from app.api.common.errors import error_handlers
from app.api.ollama.wire import OllamaErrorResponse
from app.pipeline.errors import ApiError, ModelNotFound, RequestValidationError


class OllamaShape:
    @staticmethod
    def body(_: int, message: str, error: ApiError | None) -> OllamaErrorResponse:
        if isinstance(error, ModelNotFound):  # raised by the shared path: Ollama's words
            message = message.replace("The model `", "model '").replace("` does not exist.", "' not found")
        return OllamaErrorResponse(message)

    def invalid(self, error: RequestValidationError) -> tuple[int, Any]:
        item = error.items[0] if error.items else None
        if item is None:
            return 400, OllamaErrorResponse(str(error))
        loc = [str(part) for part in item.loc[1:]]  # after "body"
        if item.type in ("missing", "extra_forbidden"):
            loc = loc[:-1]  # the message names the field itself
        where = ".".join(loc)
        return 400, OllamaErrorResponse(f"{where}: {item.msg}" if where else item.msg)


HANDLERS = error_handlers(OllamaShape())
