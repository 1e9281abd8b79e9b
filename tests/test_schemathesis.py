"""Property-based contract test: schemathesis fuzzes the Fireworks API contract against the live server.

Every operation in `fireworks-openapi.yaml` (POST /v1/completions, POST /v1/chat/completions) is
exercised with generated bodies, valid and invalid alike. The only property asserted is that the
server never answers 5xx (schemathesis's `not_a_server_error` check); 4xx answers to nonsense bodies
are expected. A timeout or a dropped connection fails the test as well, with the request shown as
a curl command.

The spec's server URL ends in `/inference`, so requests go to `<server>/inference/v1/...`, which
Fireside serves alongside `/v1/...`.

Cost is bounded for a 135M model on two cores: few examples per operation, no stateful phase, no
shrinking, and every dict body is clamped to at most 4 prompts, 2 choices and 8 tokens. Most bodies
get the served model's name (and, for chat, a message when they have none) so they reach real
generation; about a quarter keep the generated name, which should be answered 404.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig

from tests.conftest import SPEC_DIR, RunningServer

MAX_EXAMPLES = 40  # per operation, fuzzing phase
REQUEST_TIMEOUT = 30.0  # seconds per request
MAX_N = 2
MAX_TOKENS = 8
MAX_PROMPTS = 4  # a list of prompts is a batch: each one is a separate generation
TOKEN_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens")
COVERAGE_PHASE = True
CHAT_PATH = "/v1/chat/completions"

CONFIG = SchemathesisConfig.from_dict(
    {
        "request-timeout": REQUEST_TIMEOUT,
        "request-retries": 0,
        "warnings": False,
        # Show the body as sent: the default hides every key containing "token", max_tokens included.
        "output": {"sanitization": {"enabled": False}},
        "generation": {
            "max-examples": MAX_EXAMPLES,
            "no-shrink": True,  # a shrink loop against a slow server could take minutes
            "database": "none",  # no example database: each run starts fresh, nothing replayed
        },
        "phases": {
            "examples": {"enabled": True},  # the spec has none today; costs nothing
            "fuzzing": {"enabled": True},
            # Boundary and negative values per field: ~1,700 mostly cheap 4xx requests, about three quarters
            # of the run (~16 s of ~22 s on an idle two-core machine; fuzzing alone: ~80 requests, ~5 s).
            "coverage": {"enabled": COVERAGE_PHASE},
            "stateful": {"enabled": False},
        },
        "checks": {"enabled": False, "not_a_server_error": {"enabled": True}},
    }
)
schema = schemathesis.openapi.from_path(SPEC_DIR / "fireworks-openapi.yaml", config=CONFIG)

STATUSES: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def status_summary() -> Iterator[None]:
    """Print how the generated requests were answered (visible with `-s`)."""
    yield
    if STATUSES:
        print(f"\nschemathesis: {sum(STATUSES.values())} requests, answers {dict(sorted(STATUSES.items()))}")


def _lower(value: Any, limit: int) -> Any:
    """`value` capped at `limit` when it is a number above it; anything else is left for the server to judge."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > limit:
        return type(value)(limit)
    return value


def bound_body(body: Any, served_model: str, path: str) -> None:
    """Make a generated body cheap to serve and, mostly, aimed at the served model (in place)."""
    if not isinstance(body, dict):
        return
    # Deterministic per body, so a failing example replays identically: ~3 in 4 use the served model.
    if "model" in body and zlib.crc32(json.dumps(body, sort_keys=True, default=repr).encode()) % 4:
        body["model"] = served_model
        if path == CHAT_PATH and "messages" not in body and "prompt_token_ids" not in body:
            # The contract leaves `messages` optional, but a chat without one cannot generate anything.
            body["messages"] = [{"role": "user", "content": "Hi"}]
    if "n" in body:
        body["n"] = _lower(body["n"], MAX_N)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and any(isinstance(item, (str, list)) for item in prompt):
        body["prompt"] = prompt[:MAX_PROMPTS]
    for field in TOKEN_LIMIT_FIELDS:
        if field in body:
            body[field] = _lower(body[field], MAX_TOKENS)
    if all(body.get(field) is None for field in TOKEN_LIMIT_FIELDS):
        # No limit given (absent or null): set one, never both at once.
        field = "max_completion_tokens" if "max_completion_tokens" in body and "max_tokens" not in body else "max_tokens"
        body[field] = MAX_TOKENS


@schema.parametrize()
# Stop at the first failure: by default every coverage case runs even after one failed, and against a
# hanging server each would wait out its timeout.
@hypothesis.settings(report_multiple_bugs=False)
def test_no_server_errors(case: schemathesis.Case, server: RunningServer) -> None:
    bound_body(case.body, server.model, case.operation.path)
    call_without_server_error(case, server)


def call_without_server_error(case: schemathesis.Case, server: RunningServer, prefix: str = "/inference") -> None:
    """Sends `case` and fails on no answer or a 5xx (with the request as a curl command)."""
    base_url = f"{server.base_url}{prefix}"
    try:
        response = case.call(base_url=base_url, timeout=REQUEST_TIMEOUT)
    except requests.RequestException as exc:  # timeout, refused or dropped connection
        notes = "\n".join(getattr(exc, "__notes__", []))  # schemathesis adds a curl command
        no_answer = f"{case.operation.label}: no answer: {type(exc).__name__}: {exc}\n{notes}"
    else:
        no_answer = None
    if no_answer is not None:  # failed outside the `except`, so the report skips the chained tracebacks
        STATUSES["no answer"] += 1
        pytest.fail(no_answer, pytrace=False)
    STATUSES[str(response.status_code)] += 1
    # Raises with the status, the answer's body and a curl command for the request on a 5xx.
    case.validate_response(response, checks=[not_a_server_error], transport_kwargs={"base_url": base_url})


# ------------------------------------------------------------------- /v1/embeddings and /v1/rerank
# The contract defines their request bodies (`EmbeddingRequest`, `RerankRequestBody`) but no paths;
# these two operations put them at Fireworks' documented paths so schemathesis fuzzes them too.

MAX_INPUTS = 4  # embedding inputs or rerank documents per generated body
MAX_TEXT = 200  # characters per generated text


def _retrieval_schema() -> dict[str, Any]:
    import yaml

    document = yaml.safe_load((SPEC_DIR / "fireworks-openapi.yaml").read_text())

    def operation(name: str, component: str) -> dict[str, Any]:
        body = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{component}"}}},
                "required": True}
        return {"post": {"operationId": name, "requestBody": body,
                         "responses": {"200": {"description": "Successful Response"}}}}

    paths = {"/v1/embeddings": operation("create_embeddings", "EmbeddingRequest"),
             "/v1/rerank": operation("rerank", "RerankRequestBody")}
    return {**document, "paths": paths}


retrieval_schema = schemathesis.openapi.from_dict(_retrieval_schema(), config=CONFIG)


def _short(value: Any) -> Any:
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, list):
        return [_short(item) for item in value[:MAX_INPUTS]]
    if isinstance(value, dict):
        return {key: _short(item) for key, item in list(value.items())[:MAX_INPUTS]}
    return value


def bound_retrieval_body(body: Any, served_model: str) -> None:
    """Few, short inputs and documents, mostly aimed at the served model (in place)."""
    if not isinstance(body, dict):
        return
    if zlib.crc32(json.dumps(body, sort_keys=True, default=repr).encode()) % 4:
        body["model"] = served_model
    for field in ("input", "documents"):
        if field in body:
            body[field] = _short(body[field])


@retrieval_schema.parametrize()
@hypothesis.settings(report_multiple_bugs=False)
def test_no_server_errors_on_embeddings_and_rerank(case: schemathesis.Case, server: RunningServer) -> None:
    bound_retrieval_body(case.body, server.model)
    call_without_server_error(case, server)


# ------------------------------------------------------------------------------- TGI's /generate
# The contract defines `TgiGenerateRequest` without a path; TGI serves it at `/generate` (no
# `/inference` prefix), where schemathesis fuzzes it like the others.

def _tgi_schema() -> dict[str, Any]:
    document = _retrieval_schema()
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiGenerateRequest"}}},
            "required": True}
    operation = {"post": {"operationId": "tgi_generate", "requestBody": body,
                          "responses": {"200": {"description": "Successful Response"}}}}
    return {**document, "paths": {"/generate": operation}}


tgi_schema = schemathesis.openapi.from_dict(_tgi_schema(), config=CONFIG)


def bound_tgi_body(body: Any, served_model: str) -> None:
    """A short input and few new tokens, mostly aimed at the served model (in place)."""
    if not isinstance(body, dict):
        return
    if zlib.crc32(json.dumps(body, sort_keys=True, default=repr).encode()) % 4:
        body["model"] = served_model
    if isinstance(body.get("inputs"), str):
        body["inputs"] = body["inputs"][:MAX_TEXT]
    parameters = body.get("parameters")
    if parameters is None:  # absent or null: TGI's default would be 100 new tokens
        body["parameters"] = parameters = {}
    if isinstance(parameters, dict):
        parameters["max_new_tokens"] = _lower(parameters.get("max_new_tokens") or MAX_TOKENS, MAX_TOKENS)


@tgi_schema.parametrize()
@hypothesis.settings(report_multiple_bugs=False)
def test_no_server_errors_on_tgi(case: schemathesis.Case, server: RunningServer) -> None:
    bound_tgi_body(case.body, server.model)
    call_without_server_error(case, server, prefix="")
