"""Security checks against real `fireside serve` processes on loopback (issue 22, item 3).

1. With `--api-key`, every route the app serves (listed from the app itself) needs the key, in
   every header spelling the front doors' clients use, and answers 401 in its front door's shape.
2. The server's whole output holds no API key, and no prompt or output unless `--log-prompts`.
3. CORS answers only the listed origin, preflight included; without `--cors-origin`, nothing.
4. Media URLs on loopback, private and link-local addresses are refused with a 400 saying why,
   without a connection to them; redirects and DNS answers that change are checked in process.
"""

from __future__ import annotations

import asyncio
import base64
import http.server
import ipaddress
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.media import fetch as media
from app.media.fetch import MediaError, media_bytes
from app.server.app import create_app
from app.server.security import MISSING_KEY, WRONG_KEY
from backends.engine import EngineOptions
from backends.llama_model import ModelOptions
from backends.registry import ModelRegistry
from tests.built import tiny_vlm
from tests.conftest import (
    KEYED,
    ONE_SMALL_SLOT,
    POOL,
    TEST_KEY,
    OutputReader,
    RunningServer,
)
from tests.images import noise, png

KEY = TEST_KEY
OTHER_KEY = "fs-Wrong-Key-M4V8K2PJ"
SECRET_WORDS = "quokka-periwinkle-zeppelin"  # in every prompt of the log checks, nowhere else
PROMPT = f"Tell me one short fact about the {SECRET_WORDS} 7731."
ALLOWED = "http://localhost:3000"
SMALL = ONE_SMALL_SLOT

# What answers without a key (README, security.OPEN_PATHS / OPEN_PAGE_*): the liveness probe
# (any method) and the page: `/` and its files, read with GET or HEAD (`HEAD /` is also how
# Ollama's clients see that a server runs). Written out here, not read from the app, so that
# opening a route by mistake fails this test.
PUBLIC_PATHS = frozenset({"/health"})
PUBLIC_PAGE = frozenset({("GET", "/"), ("HEAD", "/"), ("GET", "/static/{name:str}"),
                         ("GET", "/static/vendor/{name:str}")})  # the page's vendored libraries
PAGE_FILE = "page.js"
VENDOR_FILE = "purify.min.js"


# --- servers ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def keyed() -> tuple[RunningServer, OutputReader]:
    """A key, no CORS, no --log-prompts; its whole output (stdout and stderr) read as it comes."""
    server = POOL.get(*KEYED)
    return server, server.output


@pytest.fixture(scope="module")
def talkative() -> tuple[RunningServer, OutputReader]:
    """--log-prompts and one CORS origin, no key (test_observability's prompts_logged too)."""
    server = POOL.get(*SMALL, "--log-prompts", "--cors-origin", ALLOWED)
    return server, server.output


# --- the routes, from the app itself ---------------------------------------------------------------

def served_routes() -> list[tuple[str, str]]:
    """(method, path template) of every handler `create_app` mounts, OPTIONS and HEAD included:
    the same function `fireside serve` builds its app with, so a route added anywhere shows up."""
    app = create_app(ModelRegistry([], ModelOptions(), EngineOptions(ctx_size=0)))
    return sorted({(method, route.path) for route in app.routes for method in route.methods})


def is_public(method: str, template: str) -> bool:
    return template in PUBLIC_PATHS or (method, template) in PUBLIC_PAGE


def concrete(template: str, model: str) -> str:
    """A plausible path for a template: every parameter needs a value here, or the test stops."""
    page_file = VENDOR_FILE if template.startswith("/static/vendor/") else PAGE_FILE
    values = {"model_id": model, "response_id": "resp_0123456789abcdef", "name": page_file}

    def value(match: re.Match[str]) -> str:
        name = match[1]
        assert name in values, f"route parameter {{{name}}} in {template}: give it a plausible value in this test"
        return values[name]

    return re.sub(r"\{(\w+)(?::\w+)?\}", value, template)


LLAMACPP_PATHS = ("/completion", "/infill", "/tokenize", "/detokenize", "/apply-template", "/embedding", "/slots",
                  "/props", "/reranking", "/rerank", "/v1/reranking")  # llama-server's native routes


def front_door(template: str) -> str:
    """Whose error shape a path's errors take."""
    if template.startswith("/api/"):
        return "ollama"
    if template.startswith(("/v1/messages", "/messages")):
        return "anthropic"
    if template in ("/generate", "/generate_stream", "/"):  # `/`: TGI's POST (GET/HEAD are public)
        return "tgi"
    if template in LLAMACPP_PATHS:
        return "llamacpp"
    return "openai"


def assert_401_shape(response: httpx.Response, door: str, message: str, where: str) -> None:
    assert response.status_code == 401, f"{where}: {response.status_code} {response.text[:200]}"
    assert response.headers.get("www-authenticate") == "Bearer", where
    body = response.json()
    expected = {
        "openai": {"error": {"message": message, "type": "invalid_request_error", "param": None,
                             "code": "invalid_api_key"}},
        "anthropic": {"type": "error", "error": {"type": "authentication_error", "message": message}},
        "ollama": {"error": message},
        "tgi": {"error": message, "error_type": "authentication"},
        "llamacpp": {"error": {"code": 401, "message": message, "type": "authentication_error"}},
    }[door]
    assert body == expected, f"{where}: {door} shape expected, got {body}"


RIGHT_KEY_HEADERS = (  # OpenAI, Fireworks, huggingface_hub, ollama (headers= or OLLAMA_API_KEY), Anthropic
    {"Authorization": f"Bearer {KEY}"},
    {"Authorization": f"bearer {KEY}"},
    {"x-api-key": KEY},
)
WRONG_KEY_HEADERS = tuple({name: value.replace(KEY, OTHER_KEY) for name, value in h.items()} for h in RIGHT_KEY_HEADERS)
NO_KEY_HEADERS = (  # each is no key at all: the right key without the scheme, or in another scheme
    {},
    {"Authorization": KEY},
    {"Authorization": f"Basic {KEY}"},
    {"Authorization": "Bearer"},
    {"x-api-key": ""},
)


def test_the_route_list_covers_the_openapi_document(keyed):
    """Every documented operation is among the routes the checks below walk (and more are)."""
    server, _ = keyed
    document = httpx.get(f"{server.base_url}/openapi.json", headers=RIGHT_KEY_HEADERS[0], timeout=60).json()
    routes = {(method, re.sub(r":\w+\}", "}", path)) for method, path in served_routes()}
    documented = {(method.upper(), path) for path, item in document["paths"].items() for method in item
                  if method.upper() in ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD")}
    assert documented and documented <= routes, sorted(documented - routes)
    assert {("GET", "/metrics"), ("POST", "/"), ("POST", "/api/chat"), ("GET", "/api/tags")} <= routes


def test_every_route_but_health_and_the_page_needs_the_key(keyed):
    server, _ = keyed
    checked = 0
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        for method, template in served_routes():
            if is_public(method, template):
                continue
            path, door = concrete(template, server.model), front_door(template)
            for headers in NO_KEY_HEADERS:
                assert_401_shape(client.request(method, path, headers=headers), door, MISSING_KEY,
                                 f"{method} {path} with {headers}")
            for headers in WRONG_KEY_HEADERS:
                response = client.request(method, path, headers=headers)
                assert_401_shape(response, door, WRONG_KEY, f"{method} {path} with {headers}")
                assert OTHER_KEY not in response.text
            for headers in RIGHT_KEY_HEADERS:
                response = client.request(method, path, headers=headers)
                # past the key: a GET answers, an empty POST is the handler's own 400/404/422
                assert response.status_code not in (401, 403) and response.status_code < 500, \
                    f"{method} {path} with {headers}: {response.status_code} {response.text[:200]}"
            checked += 1
    assert checked >= 60  # /v1, /inference/v1, Anthropic, Responses, TGI, Ollama, /metrics, /openapi.json


def test_health_and_the_page_answer_without_a_key(keyed):
    server, _ = keyed
    public = [(m, t) for m, t in served_routes() if is_public(m, t)]
    assert {("GET", "/health"), ("GET", "/"), ("GET", "/static/{name:str}")} <= set(public)
    for method, template in public:
        if method == "OPTIONS":
            continue
        for headers in ({}, WRONG_KEY_HEADERS[0]):
            response = httpx.request(method, f"{server.base_url}{concrete(template, server.model)}", headers=headers)
            assert response.status_code == 200, f"{method} {template}: {response.status_code}"


def _raw_status(server: RunningServer, method: str, path: str) -> tuple[int, str]:
    """The status and body of a request sent byte for byte (httpx would tidy `..` and `//`)."""
    port = int(server.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode("utf-8", "replace")


@pytest.mark.parametrize("path", [
    "/static/../v1/models", "/static/%2e%2e/v1/models", "/static/..%2fv1%2fmodels", "/health/../v1/models",
    "/health/..%2f..%2fv1/models", "/health%2f..%2fv1/models", "//v1/models", "/v1//models", "/./v1/models",
    "/v1/models/", "/V1/MODELS", "/health;/../v1/models", "/static/../openapi.json", "/static/../metrics",
])
def test_paths_that_look_public_do_not_open_the_api(keyed, path):
    server, _ = keyed
    status, body = _raw_status(server, "GET", path)
    assert status not in range(200, 400) or body.startswith('{"status":"ok"'), f"{path}: {status} {body[:200]}"
    assert server.model not in body and "fireside_" not in body and '"paths"' not in body


def test_the_front_doors_clients_send_the_key_as_the_server_reads_it(keyed, monkeypatch):
    """The official clients, not hand-written headers: ollama (headers= or OLLAMA_API_KEY) and
    Anthropic's SDK; each reads the 401 in its own front door's shape."""
    import anthropic
    import ollama

    server, _ = keyed
    assert [m.model for m in ollama.Client(host=server.base_url, headers={"Authorization": f"Bearer {KEY}"})
            .list().models] == [server.model]
    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=server.base_url, headers={"Authorization": f"Bearer {OTHER_KEY}"}).list()
    assert refused.value.status_code == 401 and refused.value.error == WRONG_KEY
    monkeypatch.setenv("OLLAMA_API_KEY", KEY)
    assert ollama.Client(host=server.base_url).list().models

    count = {"model": server.model, "messages": [{"role": "user", "content": "Hi"}]}
    with anthropic.Anthropic(base_url=server.base_url, api_key=KEY, max_retries=0) as client:
        assert client.messages.count_tokens(**count).input_tokens > 0
    with (anthropic.Anthropic(base_url=server.base_url, api_key=OTHER_KEY, max_retries=0) as client,
          pytest.raises(anthropic.AuthenticationError) as raised):
        client.messages.count_tokens(**count)
    assert raised.value.status_code == 401 and raised.value.body["error"]["type"] == "authentication_error"


# --- logs: no keys, no prompts or outputs without --log-prompts ----------------------------------

class Exercise:
    """Requests through several front doors, each with a request id whose log line is awaited,
    so that the output read afterwards holds every line they caused."""

    def __init__(self, server: RunningServer, output: OutputReader, tag: str):
        self.server, self.output, self.tag = server, output, tag
        self.ids: list[str] = []
        self.outputs: list[str] = []  # generated texts long enough to be told apart

    def send(self, method: str, path: str, expect: int, headers: dict[str, str] | None = None,
             **kwargs: object) -> httpx.Response:
        request_id = f"sec-{self.tag}-{len(self.ids)}"
        self.ids.append(request_id)
        headers = {"Authorization": f"Bearer {KEY}", "X-Request-Id": request_id, **(headers or {})}
        response = httpx.request(method, f"{self.server.base_url}{path}", headers=headers, timeout=120, **kwargs)
        assert response.status_code == expect, f"{path}: {response.status_code} {response.text[:300]}"
        return response

    def generated(self, text: str) -> None:
        if len(text.strip()) >= 16:
            self.outputs.append(text.strip())

    def lines(self) -> str:
        """The whole output, once every request's line is in it."""
        for request_id in self.ids:
            line = self.output.wait_for(lambda text, rid=request_id: f"id={rid} " in text, timeout=60)
            assert line is not None, f"no request log line for {request_id}"
        return self.output.text()


def logged(text: str) -> str:
    """`text` as a log line writes a value with spaces or quotes (a JSON string, unquoted here)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def exercise(server: RunningServer, output: OutputReader, tag: str) -> Exercise:
    run, model = Exercise(server, output, tag), server.model
    user = [{"role": "user", "content": PROMPT}]
    # `ignore_eos`: 24 tokens each, whenever the model would have ended (which differs between CPUs)
    chat = run.send("POST", "/v1/chat/completions", 200,
                    json={"model": model, "messages": user, "max_tokens": 24, "temperature": 0, "ignore_eos": True})
    assert chat.json()["usage"]["completion_tokens"] == 24
    run.generated(chat.json()["choices"][0]["message"]["content"])
    streamed = run.send("POST", "/v1/completions", 200,
                        json={"model": model, "prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stream": True,
                              "ignore_eos": True})
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    run.generated("".join(chunk["choices"][0]["text"] for chunk in chunks if chunk["choices"]))
    run.send("POST", "/v1/messages", 200, headers={"x-api-key": KEY},
             json={"model": model, "max_tokens": 8, "messages": user})
    run.send("POST", "/api/chat", 200, json={"model": model, "messages": user, "stream": False,
                                             "options": {"num_predict": 8}})
    tgi = run.send("POST", "/generate", 200, json={"inputs": PROMPT, "parameters": {"max_new_tokens": 24}})
    run.generated(tgi.json()["generated_text"])
    run.send("POST", "/v1/responses", 200, json={"model": model, "input": PROMPT, "max_output_tokens": 8})
    run.send("POST", "/v1/embeddings", 200, json={"model": model, "input": PROMPT})
    # failures with the prompt in the body, each logged with its error message
    run.send("POST", "/v1/chat/completions", 404, json={"model": "no-such-model", "messages": user})
    run.send("POST", "/v1/chat/completions", 400, json={"model": model, "messages": [
        {"role": "user", "content": PROMPT * 40}]})  # over the 256-token context
    run.send("POST", "/v1/completions", 422, content=f'{{"model": "{model}", "prompt": "{PROMPT}'.encode(),
             headers={"Content-Type": "application/json"})  # cut short
    run.send("POST", "/api/generate", 400, json={"model": model, "prompt": PROMPT, "options": {"temperature": "x"}})
    run.send("POST", "/generate", 422, json={"inputs": PROMPT, "parameters": {"max_new_tokens": "many"}})
    run.send("POST", "/v1/messages", 400, headers={"x-api-key": KEY},
             json={"model": model, "max_tokens": 8, "messages": user, "temperature": 9})
    run.send("POST", "/v1/messages", 404, headers={"x-api-key": KEY},
             json={"model": "no-such-model", "max_tokens": 8, "messages": user})
    return run


def test_without_log_prompts_no_key_prompt_or_output_is_logged(keyed):
    server, output = keyed
    run = exercise(server, output, "quiet")
    run.send("POST", "/v1/chat/completions", 401, headers={"Authorization": f"Bearer {OTHER_KEY}"},
             json={"model": server.model, "messages": [{"role": "user", "content": PROMPT}]})
    run.send("POST", "/v1/messages", 401, headers={"Authorization": "", "x-api-key": OTHER_KEY},
             json={"model": server.model, "max_tokens": 8, "messages": [{"role": "user", "content": PROMPT}]})
    text = run.lines()
    assert len(run.outputs) >= 2, run.outputs  # the model wrote something that could be looked for
    assert KEY not in text and OTHER_KEY not in text
    assert SECRET_WORDS not in text
    for generated in run.outputs:
        assert generated not in text and logged(generated) not in text
    requests = [line for line in text.splitlines() if " id=sec-quiet-" in line]
    assert not [line for line in requests if " prompt=" in line or " output=" in line]
    # the failures were logged with their messages: the check looked where a prompt could leak
    assert any("maximum context length" in line and "status=400" in line for line in requests)
    assert any("status=422" in line and "error=" in line for line in requests)
    assert any("route=/api/generate" in line and "options.temperature" in line for line in requests)  # Ollama's
    assert any("route=/generate" in line and "max_new_tokens" in line for line in requests)  # TGI's shape


def test_with_log_prompts_the_prompt_and_output_are_logged_but_no_key(talkative):
    server, output = talkative
    run = exercise(server, output, "loud")
    text = run.lines()
    assert SECRET_WORDS in text  # the check above can fail
    assert run.outputs and all(logged(generated)[:16] in text for generated in run.outputs)
    assert KEY not in text


# --- CORS ----------------------------------------------------------------------------------------

def _cors(response: httpx.Response) -> dict[str, str]:
    return {name.lower(): value for name, value in response.headers.items()
            if name.lower().startswith("access-control-")}


def _preflight(server: RunningServer, origin: str | None, method: str = "POST",
               path: str = "/v1/chat/completions") -> httpx.Response:
    headers = {"Access-Control-Request-Method": method,
               "Access-Control-Request-Headers": "authorization, content-type, x-api-key"}
    if origin is not None:
        headers["Origin"] = origin
    return httpx.options(f"{server.base_url}{path}", headers=headers)


UNLISTED = ["http://evil.example", "http://localhost:3001", "https://localhost:3000", "http://localhost",
            "http://localhost:3000.evil.example", "http://evil.localhost:3000", "http://127.0.0.1:3000", "null"]


@pytest.mark.parametrize("origin", UNLISTED)
def test_an_unlisted_origin_gets_no_cors_headers(talkative, origin):
    server, _ = talkative
    preflight = _preflight(server, origin)
    assert _cors(preflight) == {}
    # answered as if no Origin had been sent: the app's own OPTIONS, which a browser refuses
    assert preflight.status_code == _preflight(server, None).status_code
    listed = httpx.get(f"{server.v1}/models", headers={"Origin": origin})
    assert listed.status_code == 200 and _cors(listed) == {}
    posted = httpx.post(f"{server.v1}/chat/completions", headers={"Origin": origin},
                        json={"model": "no-such-model", "messages": [{"role": "user", "content": "Hi"}]})
    assert posted.status_code == 404 and _cors(posted) == {}


def test_the_listed_origin_gets_preflights_for_every_method_and_its_headers(talkative):
    server, _ = talkative
    methods = {m for m, _ in served_routes()} - {"OPTIONS", "HEAD"}
    assert {"GET", "POST", "DELETE"} <= methods
    for method in methods:
        preflight = _preflight(server, ALLOWED, method, "/v1/responses/resp_0123456789abcdef")
        assert preflight.status_code == 204, method
        cors = _cors(preflight)
        assert cors["access-control-allow-origin"] == ALLOWED
        allowed = {m.strip() for m in cors["access-control-allow-methods"].split(",")}
        assert method in allowed, (method, allowed)
        asked = {h.strip() for h in cors["access-control-allow-headers"].lower().split(",")}
        assert {"authorization", "content-type", "x-api-key"} <= asked
        assert "access-control-allow-credentials" not in cors
        assert "origin" in preflight.headers.get("vary", "").lower()
    listed = httpx.get(f"{server.v1}/models", headers={"Origin": ALLOWED})
    assert listed.status_code == 200 and _cors(listed)["access-control-allow-origin"] == ALLOWED
    failed = httpx.post(f"{server.v1}/chat/completions", headers={"Origin": ALLOWED},
                        json={"model": "no-such-model", "messages": [{"role": "user", "content": "Hi"}]})
    assert failed.status_code == 404 and _cors(failed)["access-control-allow-origin"] == ALLOWED  # readable


def test_without_cors_origins_no_cors_headers_at_all(keyed):
    server, _ = keyed
    for origin in (ALLOWED, "http://evil.example"):
        assert _cors(_preflight(server, origin)) == {}
        response = httpx.get(f"{server.v1}/models", headers={"Origin": origin, **RIGHT_KEY_HEADERS[0]})
        assert response.status_code == 200 and _cors(response) == {}


# --- media URLs: no fetching from private addresses --------------------------------------------------

IMAGE = png(noise(1))


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        site: CountingSite = self.server  # type: ignore[assignment]
        if self.path == "/moved" and site.redirect_to:
            self.send_response(302)
            self.send_header("Location", site.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(IMAGE)))
        self.end_headers()
        self.wfile.write(IMAGE)

    def log_message(self, *args: object) -> None:
        pass


class CountingSite(http.server.ThreadingHTTPServer):
    """Serves an image at any path (and a redirect at /moved), counting the connections it accepts."""

    daemon_threads = True
    connections = 0
    redirect_to = ""

    def get_request(self) -> tuple[socket.socket, object]:
        accepted = super().get_request()
        self.connections += 1
        return accepted

    @property
    def port(self) -> int:
        return self.server_address[1]


class CountingSite6(CountingSite):
    address_family = socket.AF_INET6


def _serve(site: CountingSite) -> CountingSite:
    threading.Thread(target=site.serve_forever, daemon=True).start()
    return site


@pytest.fixture
def site() -> Iterator[CountingSite]:
    served = _serve(CountingSite(("127.0.0.1", 0), _Handler))
    yield served
    served.shutdown()
    served.server_close()


@pytest.fixture
def site6() -> Iterator[CountingSite | None]:
    try:
        served = _serve(CountingSite6(("::1", 0), _Handler))
    except OSError:  # no IPv6 loopback here: the [::1] case checks the refusal only
        yield None
        return
    yield served
    served.shutdown()
    served.server_close()


@pytest.fixture(scope="module")
def vision(model_path: Path) -> RunningServer:
    """The tiny test projector beside SmolLM2; private media URLs refused (the default)."""
    _, projector = tiny_vlm()
    return POOL.get("--model", str(model_path), "--alias", "vlm", "--mmproj", str(projector),
                    "--ctx-size", "512", "--parallel", "1")


def _ask_about(server: RunningServer, url: str) -> httpx.Response:
    return httpx.post(f"{server.v1}/chat/completions", timeout=120, json={
        "model": "vlm", "max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url}}]}]})


PRIVATE_URLS: list[tuple[str, Callable[[int, int], str], str]] = [  # (case, url from ports, address named)
    ("loopback", lambda p, _: f"http://127.0.0.1:{p}/x.png", "127.0.0.1"),
    ("loopback https", lambda p, _: f"https://127.0.0.1:{p}/x.png", "127.0.0.1"),
    ("localhost resolves to loopback", lambda p, _: f"http://localhost:{p}/x.png", "127.0.0.1"),
    ("LOCALHOST", lambda p, _: f"http://LOCALHOST:{p}/x.png", "127.0.0.1"),
    ("short form", lambda p, _: f"http://127.1:{p}/x.png", "127.0.0.1"),
    ("decimal form", lambda p, _: f"http://2130706433:{p}/x.png", "127.0.0.1"),
    ("hex form", lambda p, _: f"http://0x7f000001:{p}/x.png", "127.0.0.1"),
    ("user info", lambda p, _: f"http://public.example@127.0.0.1:{p}/x.png", "127.0.0.1"),
    ("any address", lambda p, _: f"http://0.0.0.0:{p}/x.png", "0.0.0.0"),
    ("IPv4-mapped IPv6", lambda p, _: f"http://[::ffff:127.0.0.1]:{p}/x.png", "::ffff:7f00:1"),
    ("IPv6 loopback", lambda _, p6: f"http://[::1]:{p6}/x.png", "::1"),
    ("private", lambda *_: "http://10.0.0.1/x.png", "10.0.0.1"),
    ("private 192.168", lambda *_: "http://192.168.1.1/x.png", "192.168.1.1"),
    ("cloud metadata", lambda *_: "http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
    ("IPv6 unique local", lambda *_: "http://[fd00::1]/x.png", "fd00::1"),
]


def test_media_urls_on_private_addresses_are_refused_without_a_connection(vision, site, site6):
    port6 = site6.port if site6 is not None else 9
    for case, url_of, address in PRIVATE_URLS:
        response = _ask_about(vision, url_of(site.port, port6))
        assert response.status_code == 400, f"{case}: {response.status_code} {response.text[:300]}"
        message = response.json()["error"]["message"]
        assert message.startswith("messages[0].content[1]: "), (case, message)
        assert f"resolves to {address}," in message and "loopback, private or link-local" in message, (case, message)
        assert "--allow-private-media-urls" in message, (case, message)
    assert site.connections == 0 and (site6 is None or site6.connections == 0)
    data_uri = "data:image/png;base64," + base64.b64encode(IMAGE).decode()
    assert _ask_about(vision, data_uri).status_code == 200  # images themselves are read


@pytest.mark.parametrize(("url", "words"), [
    ("http://[::1", "the URL is not valid"),
    ("http://127.0.0.1:99999/x.png", "is not a TCP port"),
    ("http://xn--/x.png", "the URL is not valid"),
])
def test_media_urls_that_cannot_be_fetched_are_a_400_not_a_500(vision, url, words):
    response = _ask_about(vision, url)
    assert response.status_code == 400, response.text[:300]
    assert words in response.json()["error"]["message"]


def _fetch(url: str) -> bytes:
    return asyncio.run(media_bytes(url, media.DEFAULT_MEDIA))


@pytest.fixture
def loopback_is_public(monkeypatch: pytest.MonkeyPatch) -> ipaddress.IPv4Address:
    """Only loopback can be served here: let 127.0.0.1, and only it, pass for public, so that a
    fetch can start on "a public address" and its redirects and later lookups can be watched."""
    public = ipaddress.ip_address("127.0.0.1")
    real = media._is_public
    monkeypatch.setattr(media, "_is_public", lambda ip: ip == public or real(ip))
    return public


def test_a_redirect_to_a_private_address_is_refused_without_a_connection(loopback_is_public, site, site6):
    target = _serve(CountingSite(("127.0.0.2", 0), _Handler))  # any 127/8 address is this machine's
    try:
        site.redirect_to = f"http://127.0.0.1:{site.port}/x.png"
        assert _fetch(f"http://127.0.0.1:{site.port}/moved") == IMAGE  # the setup fetches and follows
        for location, address in [(f"http://127.0.0.2:{target.port}/x.png", "127.0.0.2"),
                                  ("http://10.0.0.1/x.png", "10.0.0.1"),
                                  (f"http://[::1]:{site6.port if site6 else 9}/x.png", "::1")]:
            site.redirect_to = location
            with pytest.raises(MediaError, match=f"resolves to {re.escape(address)}, a loopback, private"):
                _fetch(f"http://127.0.0.1:{site.port}/moved")
        assert target.connections == 0 and (site6 is None or site6.connections == 0)
        assert site.connections == 5  # the two hops of the first fetch, then one per redirect
    finally:
        target.shutdown()
        target.server_close()


def _name(host: str | bytes | None) -> str | None:
    """A looked-up name as text: anyio passes it to getaddrinfo IDNA-encoded, as bytes."""
    return host.decode("ascii") if isinstance(host, bytes) else host


def test_the_address_checked_is_the_address_connected_to(loopback_is_public, site, monkeypatch):
    """A name is looked up once per connection and fetched from that answer (the URL's name still
    in `Host`): its later answers (127.0.0.2, private, where nothing listens) are never asked for."""
    real_getaddrinfo = socket.getaddrinfo
    answers = iter(["127.0.0.1"])
    lookups: list[str] = []

    def rebinding(host: str | bytes, *args: object, **kwargs: object) -> list:
        if _name(host) != "rebind.test":
            return real_getaddrinfo(host, *args, **kwargs)
        lookups.append(_name(host))
        address = next(answers, "127.0.0.2")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, 0))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    assert _fetch(f"http://rebind.test:{site.port}/x.png") == IMAGE
    assert lookups == ["rebind.test"] and site.connections == 1


def test_a_rebinding_name_never_reaches_the_private_answer(monkeypatch, site):
    """The other way round: the first answer is a public address where nothing of ours listens
    (127.0.0.2 taken for public), every later one is 127.0.0.1, where the site is. Checking one
    answer and connecting by another lookup would reach the site."""
    public = ipaddress.ip_address("127.0.0.2")
    real_public, real_getaddrinfo = media._is_public, socket.getaddrinfo
    monkeypatch.setattr(media, "_is_public", lambda ip: ip == public or real_public(ip))
    answers = iter(["127.0.0.2"])

    def rebinding(host: str | bytes, *args: object, **kwargs: object) -> list:
        if _name(host) != "rebind.test":
            return real_getaddrinfo(host, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (next(answers, "127.0.0.1"), 0))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with pytest.raises(MediaError, match="fetching the URL failed: ConnectError"):
        _fetch(f"http://rebind.test:{site.port}/x.png")  # refused at 127.0.0.2: nothing listens there
    assert site.connections == 0
