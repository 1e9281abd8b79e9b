"""Property-based contract test: schemathesis fuzzes the Fireworks API contract against the live server.

Every operation in `fireworks-openapi.yaml` (POST /v1/completions, POST /v1/chat/completions) is
exercised with generated bodies, valid and invalid alike. Two properties are asserted: the server
never answers 5xx (schemathesis's `not_a_server_error` check; 4xx answers to nonsense bodies are
expected), and every answer conforms to the response schema documented for its status and media
type (`response_schema_conformance`), both in the contract and in the OpenAPI document the server
itself serves at /openapi.json. A timeout or a dropped connection fails the test as well, with the
request shown as a curl command.

The spec's server URL ends in `/inference`, so requests go to `<server>/inference/v1/...`, which
Fireside serves alongside `/v1/...`.

Cost is bounded for a 135M model on two cores: few examples per operation, no stateful phase, no
shrinking, and every dict body is clamped to at most 4 prompts, 2 choices and 8 tokens. Most bodies
get the served model's name (and, for chat, a message when they have none) so they reach real
generation; about a quarter keep the generated name, which should be answered 404.
"""

from __future__ import annotations

import copy
import json
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import hypothesis
import jsonschema
import pytest
import requests
import schemathesis
import yaml
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.core.transport import Response
from schemathesis.specs.openapi.checks import response_schema_conformance

from app.server.openapi import openapi_document
from tests.conftest import POOL, SPEC_DIR, TWO_SLOTS, RunningServer

MAX_EXAMPLES = 15  # per operation, fuzzing phase (the coverage phase adds each field's edges)
REQUEST_TIMEOUT = 30.0  # seconds per request
MAX_N = 2
MAX_TOKENS = 4  # a few tokens show the shape of an answer; each costs a decode step
MAX_PROMPTS = 4  # a list of prompts is a batch: each one is a separate generation
MAX_TEXT = 200  # characters (or token ids) per generated text
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
            # Boundary and negative values per field: ~1,700 mostly cheap 4xx requests, most of the run's
            # requests; the fuzzing phase's fewer, valid ones cost the decoding.
            "coverage": {"enabled": COVERAGE_PHASE},
            "stateful": {"enabled": False},
        },
        "checks": {"enabled": False, "not_a_server_error": {"enabled": True},
                   "response_schema_conformance": {"enabled": True}},
    }
)


def events_as_data(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with each `text/event-stream` schema read as the contract and the server mean it:
    the JSON in each event's `data` (the last one `[DONE]`). Schemathesis reads an OpenAPI 3.1
    stream schema as the schema of the event objects themselves (`{"data": ..., "event": ...}`), so
    the schema moves to OpenAPI 3.2's `itemSchema`, under `data` as embedded JSON."""
    document = copy.deepcopy(document)
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for answer in operation.get("responses", {}).values():
                stream = answer.get("content", {}).get("text/event-stream")
                if stream is not None and "schema" in stream:
                    data = {"anyOf": [{"const": "[DONE]"},
                                      {"contentMediaType": "application/json", "contentSchema": stream.pop("schema")}]}
                    stream["itemSchema"] = {"type": "object", "required": ["data"], "properties": {"data": data}}
    return document


def with_known_deviations(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with the one deviation the README states: an echoed prompt's first token has no
    logprob (nothing comes before it), so `content[].logprob` is null there, where the contract says
    `number` (the legacy `token_logprobs` allows null). Every other field is checked as written."""
    document = copy.deepcopy(document)
    content = document["components"]["schemas"]["NewLogProbsContent"]["properties"]
    content["logprob"] = {"anyOf": [content["logprob"], {"type": "null"}]}
    return document


CONTRACT = yaml.safe_load((SPEC_DIR / "fireworks-openapi.yaml").read_text())
schema = schemathesis.openapi.from_dict(events_as_data(with_known_deviations(CONTRACT)), config=CONFIG)

STATUSES: Counter[str] = Counter()
CHECKS = [not_a_server_error, response_schema_conformance]


@pytest.fixture(scope="module")
def served_schema(server: RunningServer) -> schemathesis.BaseSchema:
    """The OpenAPI document the server serves, whose response schemas each answer must also match."""
    document = requests.get(f"{server.base_url}/openapi.json", timeout=REQUEST_TIMEOUT).json()
    return schemathesis.openapi.from_dict(events_as_data(document), config=CONFIG)


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


def _cut_texts(value: Any) -> Any:
    """`value` with every string, and every list of token ids, cut to MAX_TEXT."""
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, list):
        items = value[:MAX_TEXT] if all(isinstance(item, int) for item in value) else value
        return [_cut_texts(item) for item in items]
    if isinstance(value, dict):
        return {key: _cut_texts(item) for key, item in value.items()}
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
    # Texts and token lists as short as the served doors' (_clip): a long one only costs prefill
    for field in ("prompt", "messages"):
        if field in body:
            body[field] = _cut_texts(body[field])
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
def test_no_server_errors(case: schemathesis.Case, server: RunningServer, served_schema: schemathesis.BaseSchema) -> None:
    bound_body(case.body, server.model, case.operation.path)
    call_and_check(case, server, served_schema)


def call_and_check(case: schemathesis.Case, server: RunningServer, served_schema: schemathesis.BaseSchema,
                   prefix: str = "/inference") -> None:
    """Sends `case` and fails on no answer, a 5xx, or an answer that breaks its documented schema in
    the contract or in the served document (with the request as a curl command)."""
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
    # Raises with the status, the answer's body and a curl command for the request on a failed check.
    case.validate_response(response, checks=CHECKS, transport_kwargs={"base_url": base_url})
    path = f"{prefix}{case.operation.path}"
    served_schema[path][case.operation.method].validate_response(response, case=case)
    ndjson_lines_conform(served_schema.raw_schema, path, case.operation.method, response)


def ndjson_lines_conform(document: dict[str, Any], path: str, method: str, response: Response) -> None:
    """Each line of an NDJSON answer (Ollama's streams) against the schema `document` gives it:
    schemathesis reads no NDJSON."""
    if not any(value.startswith("application/x-ndjson") for value in response.headers.get("content-type", [])):
        return
    answers = document["paths"][path][method.lower()]["responses"]
    media = answers.get(str(response.status_code), {}).get("content", {}).get("application/x-ndjson")
    assert media is not None, f"{method} {path}: an undocumented NDJSON answer ({response.status_code})"
    validator = jsonschema.Draft202012Validator({**media["schema"], "components": document["components"]})
    lines = response.text.splitlines()
    if response.stream_cut_short:  # schemathesis stopped reading: the last line may be cut too
        lines = lines[:-1]
    for number, line in enumerate(lines, 1):
        errors = [error.message for error in validator.iter_errors(json.loads(line))] if line else []
        assert not errors, f"{method} {path}: line {number} of the answer breaks its schema: {errors}\n{line}"


# ------------------------------------------------------------------- /v1/embeddings and /v1/rerank
# The contract defines their request bodies (`EmbeddingRequest`, `RerankRequestBody`) but no paths;
# these two operations put them at Fireworks' documented paths so schemathesis fuzzes them too.

MAX_INPUTS = 4  # embedding inputs or rerank documents per generated body


def _retrieval_schema() -> dict[str, Any]:
    def operation(name: str, component: str) -> dict[str, Any]:
        body = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{component}"}}},
                "required": True}
        return {"post": {"operationId": name, "requestBody": body,
                         "responses": {"200": {"description": "Successful Response"}}}}

    paths = {"/v1/embeddings": operation("create_embeddings", "EmbeddingRequest"),
             "/v1/rerank": operation("rerank", "RerankRequestBody")}
    return {**CONTRACT, "paths": paths}


retrieval_schema = schemathesis.openapi.from_dict(_retrieval_schema(), config=CONFIG)


def _short(value: Any) -> Any:
    """`_clip`, and objects cut to MAX_INPUTS keys too."""
    return _clip(value, keys=MAX_INPUTS)


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
def test_no_server_errors_on_embeddings_and_rerank(case: schemathesis.Case, server: RunningServer,
                                                   served_schema: schemathesis.BaseSchema) -> None:
    bound_retrieval_body(case.body, server.model)
    call_and_check(case, server, served_schema)


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
def test_no_server_errors_on_tgi(case: schemathesis.Case, server: RunningServer,
                                 served_schema: schemathesis.BaseSchema) -> None:
    bound_tgi_body(case.body, server.model)
    call_and_check(case, server, served_schema, prefix="")


# ------------------------------------------------------------------- the rest of the served document
# Every other operation of the server's own document (the Anthropic, Responses, Ollama and TGI front
# doors, the model lists), its answers checked against the response schemas the document gives it.
# On a server of its own: an Ollama `keep_alive` or a stored response must not touch the suite's.
# Left out: what the operations above already fuzz through the contract (the same handlers),
# /api/pull (a download) and /api/delete (removes model files).

FUZZED_ABOVE = r"^/(inference/)?v1/(completions|chat/completions|embeddings|rerank)$|^/generate$"
served_document = (schemathesis.openapi.from_dict(events_as_data(openapi_document()), config=CONFIG)
                   .exclude(path_regex=FUZZED_ABOVE).exclude(path=["/api/pull", "/api/delete"]))
TOKEN_LIMITS = ("max_tokens", "max_output_tokens")  # Anthropic's and the Responses API's


@pytest.fixture(scope="module")
def front_doors() -> RunningServer:
    return POOL.get(*TWO_SLOTS)


def _clip(value: Any, keys: int | None = None) -> Any:
    """`value` with every string cut to MAX_TEXT characters, every list to MAX_INPUTS items and
    every object to its first `keys` keys (None: all)."""
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, list):
        return [_clip(item, keys) for item in value[:MAX_INPUTS]]
    if isinstance(value, dict):
        return {key: _clip(item, keys) for key, item in list(value.items())[:keys]}
    return value


def bound_served_body(body: Any, served_model: str, path: str) -> None:
    """Short texts, at most MAX_TOKENS generated, the model kept loaded, and mostly the served
    model (in place)."""
    if not isinstance(body, dict):
        return
    if zlib.crc32(json.dumps(body, sort_keys=True, default=repr).encode()) % 4:
        body["model"] = served_model
    body.update(_clip(body))
    body.pop("keep_alive", None)  # Ollama's: 0 unloads the model
    for field in TOKEN_LIMITS:
        if field in body:
            body[field] = _lower(body[field], MAX_TOKENS)
    if path == "/v1/responses" and body.get("max_output_tokens") is None:
        body["max_output_tokens"] = MAX_TOKENS
    if path in ("/api/chat", "/api/generate"):
        if not isinstance(body.get("options"), dict):
            body["options"] = {}
        predict = body["options"].get("num_predict")
        if not isinstance(predict, int) or isinstance(predict, bool) or not 0 <= predict <= MAX_TOKENS:
            body["options"]["num_predict"] = MAX_TOKENS  # Ollama's default, -1, runs to the context's end
    if path in ("/", "/generate_stream"):
        bound_tgi_body(body, served_model)
    if path in ("/completion", "/infill"):  # llama-server's: n_predict -1 runs to the context's end
        predict = body.get("n_predict")
        if not isinstance(predict, int) or isinstance(predict, bool) or not 1 <= predict <= MAX_TOKENS:
            body["n_predict"] = MAX_TOKENS
        body.pop("max_tokens", None)
        if "n_cmpl" in body:  # up to 128 answers queued on two slots: over a loaded machine's timeout
            body["n_cmpl"] = _lower(body["n_cmpl"], MAX_N)


@served_document.parametrize()
@hypothesis.settings(report_multiple_bugs=False)
def test_the_other_front_doors_conform_to_the_served_document(case: schemathesis.Case, front_doors: RunningServer,
                                                               served_schema: schemathesis.BaseSchema) -> None:
    bound_served_body(case.body, front_doors.model, case.operation.path)
    call_and_check(case, front_doors, served_schema, prefix="")
