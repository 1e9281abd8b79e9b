"""Security of `fireside serve`: API keys, the bind check, CORS and the request body limit.

Real server processes (one per configuration, module-scoped), real HTTP with httpx and the
OpenAI SDK; the pure helpers of `app.server.security` get quick unit tests of their own.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from app.server.security import (
    MISSING_KEY,
    WRONG_KEY,
    bearer_token,
    is_open_path,
    key_matches,
)
from app.settings.security import (
    API_KEY_ENV,
    DEFAULT_MAX_BODY_BYTES,
    SecurityConfigError,
    SecuritySettings,
    check_bind,
    collect_api_keys,
    is_loopback,
    normalize_origin,
    read_key_file,
)
from app.settings.sizes import parse_size
from tests.cli_runner import CliResult, run_cli
from tests.conftest import POOL, RunningServer

CLI_KEY = "fs-cli-key-0123456789"
FILE_KEYS = ("fs-file-key-one", "fs-file-key-two")
ENV_KEY = "fs-env-key-abcdef"
ALLOWED = "http://localhost:3000"
OTHER = "http://evil.example"
SMALL = ("--ctx-size", "256", "--parallel", "1")
MIB = 1024 * 1024


def _start_with_env(env_key: str | None, *args: str) -> RunningServer:
    """A pooled server with FIRESIDE_API_KEY set to `env_key` (None: unset)."""
    return POOL.get(*SMALL, *args, env={API_KEY_ENV: env_key})


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text(f"# keys for the tests\n\n{FILE_KEYS[0]}\n   # indented comment\n  {FILE_KEYS[1]}  \n")
    return path


@pytest.fixture(scope="module")
def locked(key_file: Path) -> RunningServer:
    """Keys from --api-key and --api-key-file (the env key must then be ignored), one CORS origin,
    the default body limit."""
    server = _start_with_env(ENV_KEY, "--api-key", CLI_KEY, "--api-key-file", str(key_file),
                             "--cors-origin", ALLOWED)
    return server


@pytest.fixture(scope="module")
def env_keyed() -> RunningServer:
    """The key from FIRESIDE_API_KEY alone, which also allows a non-loopback bind."""
    server = _start_with_env(ENV_KEY, "--host", "0.0.0.0")
    return server


@pytest.fixture(scope="module")
def open_server() -> RunningServer:
    """No key, no CORS, on every interface because --insecure says so."""
    server = _start_with_env(None, "--host", "0.0.0.0", "--insecure")
    return server


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _assert_invalid_key(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] is None
    assert error["code"] == "invalid_api_key" and error["message"]


def _cors_headers(response: httpx.Response) -> dict[str, str]:
    return {name: value for name, value in response.headers.items() if name.lower().startswith("access-control-")}


# --- API keys over HTTP ------------------------------------------------------------------------

def test_missing_key_is_401(locked):
    for path in ("/v1/models", "/inference/v1/models", "/openapi.json"):
        _assert_invalid_key(httpx.get(f"{locked.base_url}{path}"))
    _assert_invalid_key(httpx.post(f"{locked.v1}/completions", json={"model": locked.model, "prompt": "Hi"}))
    _assert_invalid_key(httpx.get(f"{locked.v1}/models", headers={"Authorization": CLI_KEY}))  # no scheme


def test_wrong_key_is_401_and_never_echoed(locked):
    for key in ("wrong", CLI_KEY + "x", CLI_KEY[:-1], ENV_KEY):  # the env key is ignored beside --api-key
        response = httpx.get(f"{locked.v1}/models", headers=_auth(key))
        _assert_invalid_key(response)
        assert key not in response.text


def test_every_configured_key_is_accepted(locked):
    for key in (CLI_KEY, *FILE_KEYS):
        response = httpx.get(f"{locked.v1}/models", headers={"Authorization": f"bearer  {key}"})
        assert response.status_code == 200 and response.json()["data"][0]["id"] == locked.model


def test_x_api_key_is_accepted_like_a_bearer_token(locked):
    """Anthropic's clients send the key as `x-api-key`; it opens every route a bearer token does."""
    response = httpx.get(f"{locked.v1}/models", headers={"x-api-key": FILE_KEYS[0]})
    assert response.status_code == 200 and response.json()["data"][0]["id"] == locked.model
    _assert_invalid_key(httpx.get(f"{locked.v1}/models", headers={"x-api-key": "wrong"}))


def test_tgi_routes_need_the_key_and_answer_in_tgis_shape(locked):
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import TextGenerationError

    response = httpx.post(f"{locked.base_url}/generate", json={"inputs": "Hi"})
    assert response.status_code == 401
    assert response.json() == {"error": MISSING_KEY, "error_type": "authentication"}
    with pytest.raises(TextGenerationError, match=WRONG_KEY):  # the client read TGI's error shape
        InferenceClient(base_url=locked.base_url, api_key="wrong").text_generation("Hi", max_new_tokens=2)
    text = InferenceClient(base_url=locked.base_url, api_key=CLI_KEY).text_generation("Hi", max_new_tokens=2)
    assert isinstance(text, str)


def test_health_stays_open(locked):
    response = httpx.get(f"{locked.base_url}/health")
    assert response.status_code == 200 and response.json()["status"] == "ok"


def test_openai_sdk_with_right_and_wrong_key(locked):
    with openai.OpenAI(base_url=locked.v1, api_key=FILE_KEYS[1], max_retries=0) as client:
        assert [m.id for m in client.models.list()] == [locked.model]
        result = client.completions.create(model=locked.model, prompt="Hello", max_tokens=2, temperature=0)
        assert result.choices[0].text and result.usage.completion_tokens >= 1
    with openai.OpenAI(base_url=locked.v1, api_key="sk-wrong", max_retries=0) as client:
        with pytest.raises(openai.AuthenticationError) as raised:
            client.completions.create(model=locked.model, prompt="Hello", max_tokens=2)
    assert raised.value.status_code == 401 and raised.value.code == "invalid_api_key"


def test_key_from_environment(env_keyed):
    _assert_invalid_key(httpx.get(f"{env_keyed.v1}/models"))
    assert httpx.get(f"{env_keyed.v1}/models", headers=_auth(ENV_KEY)).status_code == 200


# --- bind address --------------------------------------------------------------------------------

def _run_serve(*args: str, env_key: str | None = None) -> CliResult:
    """`fireside serve` refused before anything loads, in this process (tests/cli_runner.py)."""
    return run_cli("serve", "--port", "1", *args, env={API_KEY_ENV: env_key})


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com"])
def test_non_loopback_bind_without_key_is_refused(host):
    result = _run_serve("--host", host, env_key="")  # an empty key is no key
    assert result.returncode == 2, result.stderr
    assert f"refusing to listen on {host} without an API key" in result.stderr
    assert "--insecure" in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.startswith("fireside: ") and len(result.stderr.splitlines()) == 1


def test_unreadable_or_empty_key_file_is_refused(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing here\n\n")
    for path, message in ((tmp_path / "missing.txt", "cannot read API key file"), (empty, "holds no keys")):
        result = _run_serve("--api-key-file", str(path))
        assert result.returncode == 2 and message in result.stderr, result.stderr


@pytest.mark.parametrize("args", [("--cors-origin", "*"), ("--cors-origin", "null"),
                                  ("--cors-origin", "http://a.example/path"), ("--max-body-size", "lots")])
def test_bad_options_are_refused(args):
    result = _run_serve(*args)
    assert result.returncode == 2 and args[0] in result.stderr, result.stderr


def _startup_lines(server: RunningServer) -> list[str]:
    """What it printed up to its `listening on` line (all printed before it answered /health)."""
    assert server.output.wait_for(lambda line: line.startswith("listening on"))
    lines = server.output.text().splitlines(keepends=True)
    return lines[:next(i for i, line in enumerate(lines) if line.startswith("listening on")) + 1]


def test_insecure_starts_with_a_warning_and_no_key(open_server):
    assert httpx.get(f"{open_server.v1}/models").status_code == 200
    output = "".join(_startup_lines(open_server))
    assert "warning: listening on 0.0.0.0 without an API key (--insecure)" in output
    assert "no API key; no CORS" in output


# --- CORS ----------------------------------------------------------------------------------------

def _preflight(server: RunningServer, origin: str) -> httpx.Response:
    return httpx.options(f"{server.v1}/chat/completions", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    })


def test_cors_is_off_by_default(open_server):
    response = httpx.get(f"{open_server.v1}/models", headers={"Origin": ALLOWED})
    assert response.status_code == 200 and _cors_headers(response) == {}
    assert _cors_headers(_preflight(open_server, ALLOWED)) == {}


def test_allowed_origin_gets_preflight_and_headers(locked):
    preflight = _preflight(locked, ALLOWED)  # no key: browsers never send one on a preflight
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in preflight.headers
    response = httpx.get(f"{locked.v1}/models", headers={"Origin": ALLOWED, **_auth(CLI_KEY)})
    assert response.status_code == 200 and response.headers["access-control-allow-origin"] == ALLOWED
    refused = httpx.get(f"{locked.v1}/models", headers={"Origin": ALLOWED})  # the page can read the 401
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == ALLOWED


def test_other_origin_gets_no_cors_headers(locked):
    assert _cors_headers(_preflight(locked, OTHER)) == {}
    response = httpx.get(f"{locked.v1}/models", headers={"Origin": OTHER, **_auth(CLI_KEY)})
    assert response.status_code == 200 and _cors_headers(response) == {}


# --- request body limit -----------------------------------------------------------------------

def _assert_too_large(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "request_too_large"
    assert "16 MiB" in error["message"]


def test_body_over_the_limit_with_content_length_is_413(locked):
    body = b"x" * (17 * MIB)
    response = httpx.post(f"{locked.v1}/completions", content=body,
                          headers={**_auth(CLI_KEY), "Content-Type": "application/json"}, timeout=60)
    _assert_too_large(response)


def test_announced_length_is_refused_before_the_body_is_read(locked):
    """Only the headers are sent: the answer comes without waiting for (or holding) the body."""
    port = int(locked.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {CLI_KEY}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {17 * MIB}\r\n\r\n".encode())
        head = sock.recv(65536).decode("latin-1")
    assert head.startswith("HTTP/1.1 413"), head


def test_chunked_body_over_the_limit_is_413(locked):
    def chunks() -> Iterator[bytes]:
        for _ in range(17 * 4):
            yield b"y" * (MIB // 4)

    response = httpx.post(f"{locked.v1}/completions", content=chunks(),
                          headers={**_auth(CLI_KEY), "Content-Type": "application/json"}, timeout=60)
    assert response.request.headers.get("transfer-encoding") == "chunked"
    _assert_too_large(response)
    assert httpx.get(f"{locked.base_url}/health").status_code == 200


def test_body_just_under_the_limit_is_read(locked):
    head, tail = b'{"model": 1, "pad": "', b'"}'
    body = head + b"a" * (DEFAULT_MAX_BODY_BYTES - len(head) - len(tail) - 1) + tail
    response = httpx.post(f"{locked.v1}/completions", content=body,
                          headers={**_auth(CLI_KEY), "Content-Type": "application/json"}, timeout=60)
    # not a 413: the body was taken in and decoded, and it is JSON of the wrong shape, which this server
    # answers with a 422 naming the field (its 400s are for well-formed requests it cannot serve)
    assert response.status_code == 422, response.text[:300]
    assert response.json() == {"detail": [{"loc": ["body", "model"], "msg": "Expected `str`, got `int`",
                                           "type": "type_error"}]}


# --- the helpers ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "size"), [("16777216", 16 * MIB), ("16MiB", 16 * MIB), ("16 mib", 16 * MIB),
                                            ("16M", 16 * MIB), ("16MB", 16_000_000), ("512KiB", 512 * 1024),
                                            ("1.5GiB", 3 * 512 * MIB), ("100b", 100)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "0", "-1", "16 XB", "MiB", "1e6"])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("LOCALHOST", True), ("::ffff:127.0.0.1", True), ("0.0.0.0", False), ("::", False),
    ("10.0.0.1", False), ("myhost", False), ("", False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_check_bind():
    keyed = SecuritySettings(api_keys=("k",))
    assert check_bind("127.0.0.1", SecuritySettings(), insecure=False) is None
    assert check_bind("0.0.0.0", keyed, insecure=False) is None
    assert "without an API key" in check_bind("0.0.0.0", SecuritySettings(), insecure=True)
    with pytest.raises(SecurityConfigError):
        check_bind("0.0.0.0", SecuritySettings(), insecure=False)


def test_keys_and_their_sources(tmp_path):
    path = tmp_path / "keys"
    path.write_text("a\n# b\n\n  c  \na\n")
    assert read_key_file(path) == ["a", "c", "a"]
    assert collect_api_keys(["x"], path, {API_KEY_ENV: "env"}) == ("x", "a", "c")
    assert collect_api_keys([], None, {API_KEY_ENV: " env "}) == ("env",)
    assert collect_api_keys([], None, {API_KEY_ENV: ""}) == ()
    with pytest.raises(SecurityConfigError):
        collect_api_keys(["has space"], None, {})
    digests = SecuritySettings(api_keys=("one", "two")).key_digests
    assert key_matches("two", digests) and key_matches("one", digests)
    assert not key_matches("tw", digests) and not key_matches("", digests) and not key_matches("x", ())


def test_header_origin_and_path_helpers():
    assert bearer_token("Bearer abc") == "abc" and bearer_token("bearer   abc ") == "abc"
    assert bearer_token(None) is None and bearer_token("Basic abc") is None and bearer_token("Bearer ") is None
    assert normalize_origin("HTTP://LocalHost:3000/") == "http://localhost:3000"
    assert normalize_origin("https://[::1]:8443") == "https://[::1]:8443"
    for bad in ("*", "null", "localhost:3000", "http://a.example/x", "ftp://a.example"):
        with pytest.raises(ValueError):
            normalize_origin(bad)
    assert is_open_path("/health") and is_open_path("/health/")
    assert not is_open_path("/v1/models") and not is_open_path("/metrics") and not is_open_path("/")
    assert is_open_path("/", "GET") and is_open_path("/static/page.js", "GET")  # the page, not POST / (TGI)
    assert not is_open_path("/v1/models", "GET") and not is_open_path("/static/page.js", "POST")
