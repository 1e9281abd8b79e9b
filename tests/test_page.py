"""The page at `/` in a real browser: headless Chromium from the operating system's packages,
driven by Selenium through the system's ChromeDriver, against real servers on loopback.

Skipped where no Chromium is installed (Debian: `apt-get install chromium chromium-driver`; `.ci/run`
installs both).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.built import tiny_vlm
from tests.conftest import FAMILY_KEY, RunningServer, start_server, stop_server
from tests.fixtures.make_tiny_vlm import IMAGE_TOKENS
from tests.images import png
from tests.test_pull import FakeHub, HubFile, HubHandler, gguf_bytes

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="no Chromium and ChromeDriver here (Debian: apt-get install chromium "
                                       "chromium-driver)")
KEY = FAMILY_KEY
WAIT = 120  # seconds: an answer on two busy cores


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # the flags that keep Chromium from reaching for Google's hosts on a closed network
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_window_size(1280, 860)  # a desktop's window; the narrow test makes it a phone's
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def keyed_server(keyed_family):
    """A server that needs a key, serving a model whose template opens a think block (`r1`)."""
    return keyed_family


def _wait(driver, condition, timeout: float = WAIT):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # the page redraws lists as it goes: an element found a moment ago may be gone, try again
    return WebDriverWait(driver, timeout, poll_frequency=0.1,
                         ignored_exceptions=[StaleElementReferenceException]).until(condition)


def _by_id(driver, name: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, name)


def _set(driver, name: str, value: str) -> None:
    field = _by_id(driver, name)
    field.clear()
    field.send_keys(value)


def _models(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    return [option.get_attribute("value") for option in driver.find_elements(By.CSS_SELECTOR, "#model option")]


def _ask(driver, text: str, *, model: str | None = None) -> tuple[str, str]:
    """Send `text` and wait for the answer's stats; the last turn's (reasoning, content)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    if model is not None:
        Select(_by_id(driver, "model")).select_by_value(model)
    before = len(driver.find_elements(By.CSS_SELECTOR, ".turn.assistant"))
    driver.execute_script("document.getElementById('completion-tokens').textContent = '–'")
    _set(driver, "prompt", text)
    _by_id(driver, "send").click()
    _wait(driver, lambda d: _by_id(d, "completion-tokens").text.isdigit() and _by_id(d, "send").is_enabled())
    turns = driver.find_elements(By.CSS_SELECTOR, ".turn.assistant")
    assert len(turns) == before + 1
    errors = turns[-1].find_elements(By.CSS_SELECTOR, ".error")
    assert not errors, errors[0].text
    reasoning = turns[-1].find_elements(By.CSS_SELECTOR, ".reasoning-text")
    code = turns[-1].find_elements(By.CSS_SELECTOR, ".content pre code")  # an answer to a schema is JSON code
    content = code[0] if code else turns[-1].find_element(By.CSS_SELECTOR, ".content")
    return (reasoning[0].get_attribute("textContent") if reasoning else "", content.get_attribute("textContent"))


def _resources(driver) -> list[str]:
    return driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")


def test_chat_streams_an_answer_and_shows_speed_and_cache(browser, server):
    browser.get(server.base_url)
    _wait(browser, lambda d: server.model in _models(d))
    _set(browser, "temperature", "0")
    _set(browser, "max-tokens", "12")
    _, first = _ask(browser, "Say hello to me.")
    answer = httpx.post(f"{server.v1}/chat/completions", timeout=WAIT, json={
        "model": server.model, "messages": [{"role": "user", "content": "Say hello to me."}], "temperature": 0,
        "max_tokens": 12}).json()
    # the answer is rendered as Markdown: its text is the model's, paragraphs apart
    assert first.split() == answer["choices"][0]["message"]["content"].split()
    assert int(_by_id(browser, "completion-tokens").text) == answer["usage"]["completion_tokens"]
    # the speed and the time to the first token are shown, in their formats (their values are the
    # machine's: a speed needs two tokens apart in time, else it shows "–")
    assert re.fullmatch(r"\d+\.\d|–", _by_id(browser, "tps").text), _by_id(browser, "tps").text
    assert re.fullmatch(r"\d+\.\d\d s", _by_id(browser, "ttft").text), _by_id(browser, "ttft").text
    # "drop the oldest turns" asks the server to, as `prompt_truncate_len` does: the context less the answer's room
    _by_id(browser, "trim").click()
    browser.execute_script("window.sent = []; const send = window.fetch; window.fetch = (url, options) => {"
                           " window.sent.push(options?.body); return send(url, options); };")
    _, second = _ask(browser, "And again, shorter.")  # the second turn starts with the first
    [card] = [c for c in httpx.get(f"{server.v1}/models").json()["data"] if c["id"] == server.model]
    body = json.loads(next(b for b in browser.execute_script("return window.sent") if b and "messages" in b))
    assert body["prompt_truncate_len"] == card["context_length"] - 12
    assert second
    assert int(_by_id(browser, "cached-tokens").text) > 0  # the first turn's prompt was reused
    assert int(_by_id(browser, "prompt-tokens").text) > int(_by_id(browser, "cached-tokens").text)
    origin = server.base_url
    assert all(url.startswith(origin + "/") for url in _resources(browser))  # nothing from elsewhere


def test_a_pasted_schema_shapes_the_answer(browser, server):
    browser.get(server.base_url)
    _wait(browser, lambda d: server.model in _models(d))
    _set(browser, "temperature", "0")
    # the schema allows at most 194 bytes (its grammar's `longest_sentence`): the answer ends within 256
    # tokens whatever whitespace the model picks (its choice differs between CPUs)
    _set(browser, "max-tokens", "256")
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}, "required": ["name"],
              "additionalProperties": False}
    _set(browser, "schema", json.dumps(schema))
    _, content = _ask(browser, "Give me a name as JSON.")
    assert set(json.loads(content)) == {"name"}
    _set(browser, "schema", "{not json")
    _set(browser, "prompt", "again")
    _by_id(browser, "send").click()
    _wait(browser, lambda d: _by_id(d, "schema-error").is_displayed())
    assert "not JSON" in _by_id(browser, "schema-error").text


def test_the_page_asks_for_the_key_and_shows_reasoning_apart(browser, keyed_server):
    browser.get(keyed_server.base_url)  # the page itself needs no key
    _wait(browser, lambda d: _by_id(d, "key-form").is_displayed())
    assert _models(browser) == []
    _set(browser, "key", "wrong")
    _by_id(browser, "key-save").click()
    _wait(browser, lambda d: "refused" in _by_id(d, "status").text)
    _set(browser, "key", KEY)
    _by_id(browser, "key-save").click()
    _wait(browser, lambda d: "r1" in _models(d))
    assert not _by_id(browser, "key-form").is_displayed()
    _set(browser, "max-tokens", "16")
    reasoning, content = _ask(browser, "Why is the sky blue?", model="r1")
    _wait(browser, lambda d: _by_id(d, "effort-field").is_displayed(), timeout=10)  # loaded now: R1 thinks
    # its generation prompt opens a think block the tiny model never closes: all of it is reasoning
    assert reasoning.strip() and content == ""
    page = httpx.get(keyed_server.base_url)
    assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
    assert httpx.post(keyed_server.base_url, json={"inputs": "Hi"}).status_code == 401  # TGI's route is not open


# ---- the page as a daily tool: one server of its own, with a model whose answers the tests write ----

class Scripted:
    """A stand-in upstream (OpenAI's chat stream) that answers what the test set in `answer`, in
    `pieces` chunks `delay` seconds apart, and keeps every request body it was sent."""

    def __init__(self) -> None:
        self.answer = "Hello."
        self.pieces = 4
        self.delay = 0.0
        self.bodies: list[dict] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                scripted.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                text, size = scripted.answer, max(1, -(-len(scripted.answer) // scripted.pieces))
                try:
                    for start in range(0, len(text), size):
                        self._send({"choices": [{"index": 0, "delta": {"content": text[start:start + size]}}]})
                        time.sleep(scripted.delay)
                    self._send({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    self._send({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": scripted.pieces,
                                                         "total_tokens": 40 + scripted.pieces}})
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped the answer

            def _send(self, chunk: dict) -> None:
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", **chunk}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/v1"


PULLED = gguf_bytes("page-pull", 256 * 1024)
HOSTILE = """## Steps

- one with `inline code`
- two, see [the docs](https://example.com/docs)

| name | size |
|------|------|
| a    | 1    |

```python
def add(a, b):
    return a + b
```

<img src=x onerror="window.pwned = 'img'"><script>window.pwned = 'script'</script>
<a href="javascript:window.pwned='link'">click</a>
"""


@dataclass
class PageServer:
    server: RunningServer
    scripted: Scripted
    hub: FakeHub


@pytest.fixture(scope="module")
def page_server(tmp_path_factory) -> Iterator[PageServer]:
    """The tiny vision model (`vlm`, 512 tokens), `scripted` (routed to the stand-in) and the Hub's
    stand-in for pulls, in folders of its own: pulls and deletes change it."""
    home = tmp_path_factory.mktemp("page-home")
    scripted = Scripted()
    hub = FakeHub()
    hub.add("acme/Tiny-GGUF", {"Tiny-Q4_K_M.gguf": HubFile(PULLED)})
    hub_http = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (HubHandler,), {"hub": hub}))
    hub_http.daemon_threads = True
    hub.port = hub_http.server_address[1]
    threading.Thread(target=hub_http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    (home / "config").mkdir()
    (home / "config" / "config.toml").write_text(f'[[models]]\nid = "scripted"\nupstream = "{scripted.url}"\n')
    model, projector = tiny_vlm()
    environment = {"HF_ENDPOINT": hub.url, "HF_HOME": str(home / "hf-home"), "HF_HUB_DISABLE_XET": "1",
                   "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0", "HF_TOKEN": None,
                   "FIRESIDE_MODELS_DIR": str(home / "models"), "FIRESIDE_CONFIG_DIR": str(home / "config")}
    running = start_server("--model", str(model), "--alias", "vlm", "--mmproj", str(projector),
                           "--ctx-size", "512", "--parallel", "1", env=environment)
    yield PageServer(running, scripted, hub)
    stop_server(running)
    for http in (scripted.http, hub_http):
        http.shutdown()
        http.server_close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    """Where the screenshots go: FIRESIDE_TEST_ARTIFACTS, else a temporary folder."""
    folder = Path(os.environ.get("FIRESIDE_TEST_ARTIFACTS") or tmp_path_factory.mktemp("page-artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _css(driver, selector: str) -> list:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def _texts(driver, selector: str) -> list[str]:
    """The text of each element `selector` finds, read at once (the page redraws lists as it goes)."""
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.textContent.trim())",
                                 selector)


def _open_chat(driver, title: str) -> None:
    driver.execute_script("[...document.querySelectorAll('.open-chat')].find(b => b.textContent === arguments[0])"
                          ".click()", title)


def _open_page(driver, page: PageServer, model: str = "scripted") -> None:
    from selenium.webdriver.support.ui import Select

    driver.get(page.server.base_url)
    _wait(driver, lambda d: model in _models(d))
    Select(_by_id(driver, "model")).select_by_value(model)


def _answer(driver, page: PageServer, text: str, prompt: str) -> str:
    """Send `prompt` to `scripted`, which answers `text`; the last answer's rendered HTML."""
    page.scripted.answer = text
    before = len(page.scripted.bodies)
    _set(driver, "prompt", prompt)
    _by_id(driver, "send").click()
    _wait(driver, lambda d: len(page.scripted.bodies) > before and _by_id(d, "send").is_enabled()
          and _css(d, ".turn.assistant .actions .regenerate"))
    return _css(driver, ".turn.assistant .content")[-1].get_attribute("innerHTML")


def test_markdown_renders_while_it_streams_and_html_in_an_answer_never_runs(browser, page_server, artifacts):
    _open_page(browser, page_server)
    page_server.scripted.pieces, page_server.scripted.delay = 8, 0.25
    page_server.scripted.answer = HOSTILE
    _set(browser, "prompt", "Show me the steps.")
    _by_id(browser, "send").click()
    # the heading is drawn while the answer still streams (Stop is live)
    _wait(browser, lambda d: _css(d, ".turn.assistant .content h2"), timeout=10)
    assert _by_id(browser, "stop").is_enabled()
    _wait(browser, lambda d: _css(d, ".turn.assistant .actions .regenerate"), timeout=20)
    page_server.scripted.pieces, page_server.scripted.delay = 4, 0.0
    assert not _by_id(browser, "effort-field").is_displayed()  # no reasoning effort for a model without it
    content = _css(browser, ".turn.assistant .content")[-1]
    assert content.find_element("css selector", "h2").text == "Steps"
    assert [item.text for item in content.find_elements("css selector", "ul li")] == [
        "one with inline code", "two, see the docs"]
    assert content.find_element("css selector", "li code").text == "inline code"
    link = content.find_element("css selector", "a[href='https://example.com/docs']")
    assert link.get_attribute("target") == "_blank" and "noopener" in link.get_attribute("rel")
    assert [cell.text for cell in content.find_elements("css selector", "table th")] == ["name", "size"]
    assert content.find_element("css selector", ".code-block .code-language").text == "python"
    assert "def add(a, b):" in content.find_element("css selector", ".code-block pre code").text
    assert content.find_element("css selector", ".code-block .copy-code").text == "Copy"
    # the hostile HTML: gone, nothing ran, no javascript: link left
    html = content.get_attribute("innerHTML")
    assert "<script" not in html and "onerror" not in html and "javascript:" not in html
    assert not content.find_elements("css selector", "img, script")
    assert browser.execute_script("return window.pwned === undefined")
    logged = [entry["message"] for entry in browser.get_log("browser") if "favicon.ico" not in entry["message"]]
    assert not [message for message in logged if "Content Security Policy" in message or "pwned" in message], logged
    browser.save_screenshot(str(artifacts / "markdown-answer.png"))
    # the libraries come from the package, under the page's CSP; nothing else of the folder is served
    base = page_server.server.base_url
    library = httpx.get(f"{base}/static/vendor/purify.min.js")
    assert library.status_code == 200 and library.headers["content-type"].startswith("text/javascript")
    assert library.headers["content-security-policy"].startswith("default-src 'none'")
    assert httpx.get(f"{base}/static/vendor/VERSIONS").status_code == 404
    assert httpx.get(f"{base}/static/vendor/..%2Fpage.js").status_code == 404


def test_conversations_last_and_can_be_edited_regenerated_stopped_renamed_searched_exported(browser, page_server,
                                                                                               artifacts):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    _open_page(browser, page_server)
    _by_id(browser, "new-chat").click()
    _answer(browser, page_server, "First *answer*.", "Tell me about otters")
    browser.refresh()  # kept in IndexedDB: the list survives a reload
    _wait(browser, lambda d: "Tell me about otters" in _texts(d, ".open-chat"))
    _open_chat(browser, "Tell me about otters")
    _wait(browser, lambda d: len(_css(d, ".turn")) == 2)
    assert _texts(browser, ".turn.assistant .content em") == ["answer"]
    # edit the question and send it again: what followed it is replaced
    _css(browser, ".turn.user .edit")[0].click()
    field = _css(browser, ".edit-field")[0]
    field.clear()
    field.send_keys("Tell me about beavers")
    page_server.scripted.answer = "Beavers build dams."
    _css(browser, ".edit-send")[0].click()
    _wait(browser, lambda d: _texts(d, ".turn.assistant .content")[-1:] == ["Beavers build dams."]
          and _by_id(d, "send").is_enabled())
    sent = page_server.scripted.bodies[-1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["Tell me about beavers"]
    # regenerate the last answer: the same question again
    page_server.scripted.answer = "Beavers are rodents."
    _css(browser, ".turn.assistant .regenerate")[-1].click()
    _wait(browser, lambda d: _texts(d, ".turn.assistant .content")[-1:] == ["Beavers are rodents."]
          and _by_id(d, "send").is_enabled())
    assert page_server.scripted.bodies[-1]["messages"] == sent and len(_css(browser, ".turn")) == 2
    # stop a running answer: what came so far stays
    page_server.scripted.pieces, page_server.scripted.delay = 40, 0.2
    page_server.scripted.answer = "word " * 200
    _set(browser, "prompt", "Go on at length")
    _by_id(browser, "send").click()
    _wait(browser, lambda d: "word" in _texts(d, ".turn.assistant .content")[-1], timeout=10)
    _by_id(browser, "stop").click()
    _wait(browser, lambda d: _by_id(d, "send").is_enabled(), timeout=5)
    page_server.scripted.pieces, page_server.scripted.delay = 4, 0.0
    partial = _css(browser, ".turn.assistant .content")[-1].text
    assert 0 < partial.count("word") < 200
    _wait(browser, lambda d: _texts(d, ".turn.assistant .stopped") == ["Stopped before the end."], timeout=5)
    # rename, then search by title
    item = next(li for li in _css(browser, "#conversation-list li")
                if li.find_element("css selector", ".open-chat").text == "Tell me about otters")
    item.find_element("css selector", ".rename-chat").click()
    _wait(browser, lambda d: d.execute_script("return document.activeElement.className") == "rename-field")
    # the old title is selected: typing replaces it, Enter keeps it (WebDriver's clear() would blur the field)
    ActionChains(browser).send_keys("Rodents", Keys.ENTER).perform()
    _wait(browser, lambda d: "Rodents" in _texts(d, ".open-chat"))
    _set(browser, "search", "rod")
    _wait(browser, lambda d: _texts(d, ".open-chat") == ["Rodents"])
    browser.save_screenshot(str(artifacts / "conversations.png"))
    _set(browser, "search", "no such chat")
    _wait(browser, lambda d: not _css(d, ".open-chat"))
    _by_id(browser, "search").clear()
    _by_id(browser, "search").send_keys(" ")
    # export (the JSON the download link carries), delete, import it back
    browser.execute_script("window.exported = []; const made = URL.createObjectURL;"
                           "URL.createObjectURL = (blob) => { window.exported.push(blob); return made(blob); };")
    _by_id(browser, "export").click()
    exported = json.loads(browser.execute_async_script(
        "const done = arguments[0]; window.exported[0].text().then(done);"))
    rodents = next(c for c in exported if c["title"] == "Rodents")
    assert [m["role"] for m in rodents["messages"]] == ["user", "assistant", "user", "assistant"]
    assert rodents["messages"][2]["content"] == "Go on at length" and rodents["messages"][3]["stopped"] is True
    for _ in exported:
        count = len(_texts(browser, ".open-chat"))
        _css(browser, "#conversation-list .delete-chat")[0].click()
        _wait(browser, lambda d, count=count: len(_texts(d, ".open-chat")) == count - 1)
    path = artifacts / "exported-chats.json"
    path.write_text(json.dumps(exported), encoding="utf-8")
    _by_id(browser, "import-file").send_keys(str(path))
    _wait(browser, lambda d: sorted(_texts(d, ".open-chat")) == sorted(c["title"] for c in exported))


def test_settings_are_kept_with_each_conversation_and_sent(browser, page_server):
    _open_page(browser, page_server)
    _by_id(browser, "new-chat").click()
    _set(browser, "system", "Answer like a pirate.")
    _set(browser, "temperature", "0.3")
    _set(browser, "top-p", "0.9")
    _set(browser, "max-tokens", "64")
    _answer(browser, page_server, "Arr.", "Hello")
    body = page_server.scripted.bodies[-1]
    assert body["messages"][0] == {"role": "system", "content": "Answer like a pirate."}
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.3, 0.9, 64)
    _by_id(browser, "new-chat").click()
    _set(browser, "system", "")
    _set(browser, "temperature", "1")
    _answer(browser, page_server, "Hi.", "Plain hello")
    assert page_server.scripted.bodies[-1]["messages"][0]["role"] == "user"
    _open_chat(browser, "Hello")
    _wait(browser, lambda d: _by_id(d, "system").get_attribute("value") == "Answer like a pirate.")
    assert _by_id(browser, "temperature").get_attribute("value") == "0.3"
    assert _by_id(browser, "max-tokens").get_attribute("value") == "64"


def test_enter_sends_shift_enter_breaks_a_line_and_themes_follow_the_system(browser, page_server, artifacts):
    from selenium.webdriver.common.keys import Keys

    _open_page(browser, page_server)
    _by_id(browser, "new-chat").click()
    page_server.scripted.answer = "Two lines read."
    before = len(page_server.scripted.bodies)
    _by_id(browser, "prompt").send_keys("line one", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "line two", Keys.ENTER)
    _wait(browser, lambda d: len(page_server.scripted.bodies) > before and _by_id(d, "send").is_enabled())
    assert page_server.scripted.bodies[-1]["messages"][-1]["content"] == "line one\nline two"
    # every control has a name a screen reader can say: a label, an aria-label or its text
    unnamed = browser.execute_script(
        "return [...document.querySelectorAll('input, select, textarea, button, meter, progress')]"
        ".filter(e => !(e.labels?.length || e.getAttribute('aria-label') || e.textContent.trim()))"
        ".map(e => e.id || e.outerHTML.slice(0, 80))")
    assert unnamed == []
    background = "return getComputedStyle(document.body).backgroundColor"
    light = browser.execute_script(background)
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                            {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        dark = browser.execute_script(background)
        assert dark == "rgb(24, 23, 22)" and light == "rgb(251, 250, 248)"
        browser.save_screenshot(str(artifacts / "dark.png"))
        from selenium.webdriver.support.ui import Select
        Select(_by_id(browser, "theme")).select_by_value("light")  # the picker overrides the system
        assert browser.execute_script(background) == light
        Select(_by_id(browser, "theme")).select_by_value("system")
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def test_a_narrow_window_keeps_everything_reachable(browser, page_server, artifacts):
    _open_page(browser, page_server)
    size = browser.get_window_size()
    browser.set_window_size(360, 740)
    try:
        _wait(browser, lambda d: d.execute_script("return innerWidth") <= 400, timeout=5)
        width = browser.execute_script("return innerWidth")
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width  # no sideways scroll
        assert not _by_id(browser, "chats").is_displayed() and _by_id(browser, "prompt").is_displayed()
        _by_id(browser, "toggle-chats").click()
        assert _by_id(browser, "chats").is_displayed()
        assert _by_id(browser, "toggle-chats").get_attribute("aria-expanded") == "true"
        browser.save_screenshot(str(artifacts / "narrow-chats.png"))
        _by_id(browser, "toggle-chats").click()
        _by_id(browser, "toggle-settings").click()
        assert _by_id(browser, "system").is_displayed()
        _by_id(browser, "toggle-settings").click()
        _answer(browser, page_server, "Short *and* sweet.", "Narrow")
        browser.save_screenshot(str(artifacts / "narrow-chat.png"))
    finally:
        browser.set_window_size(size["width"], size["height"])


def test_an_image_reaches_the_vision_model_and_the_context_meter_counts(browser, page_server, artifacts, tmp_path):
    _open_page(browser, page_server, model="vlm")
    _by_id(browser, "new-chat").click()
    _set(browser, "temperature", "0")
    _set(browser, "max-tokens", "4")
    _set(browser, "system", "")
    picture = tmp_path / "red.png"
    picture.write_bytes(png(np.full((32, 32, 3), (200, 30, 30), dtype=np.uint8)))
    notes = tmp_path / "notes.txt"
    notes.write_text("the notes\n", encoding="utf-8")
    _by_id(browser, "attach-input").send_keys(f"{picture}\n{notes}")
    _wait(browser, lambda d: len(_css(d, "#attachments img")) == 1)
    assert "notes.txt:\n```\nthe notes\n```" in _by_id(browser, "prompt").get_attribute("value")
    _set(browser, "prompt", "What is this?")
    _by_id(browser, "send").click()
    _wait(browser, lambda d: _by_id(d, "completion-tokens").text.isdigit() and _by_id(d, "send").is_enabled())
    assert not _css(browser, ".turn.assistant .error")
    assert len(_css(browser, ".turn.user .thumbnails img")) == 1
    text_only = httpx.post(f"{page_server.server.v1}/chat/completions", timeout=WAIT, json={
        "model": "vlm", "messages": [{"role": "user", "content": "What is this?"}], "max_tokens": 1}).json()
    assert int(_by_id(browser, "prompt-tokens").text) >= text_only["usage"]["prompt_tokens"] + IMAGE_TOKENS
    used = int(_by_id(browser, "prompt-tokens").text) + int(_by_id(browser, "completion-tokens").text)
    assert _by_id(browser, "context-text").text == f"{used} of 512 tokens ({round(100 * used / 512)}%)"
    assert not _by_id(browser, "context-warning").is_displayed()
    _set(browser, "max-tokens", "500")  # what is left cannot hold such an answer: the page says so
    _by_id(browser, "temperature").click()  # the change lands
    _wait(browser, lambda d: _by_id(d, "context-warning").is_displayed(), timeout=5)
    assert "The next answer may not fit" in _by_id(browser, "context-warning").text
    browser.save_screenshot(str(artifacts / "image-and-context.png"))
    _set(browser, "max-tokens", "4")


def test_the_models_panel_pulls_with_progress_loads_unloads_and_deletes(browser, page_server, artifacts):
    from selenium.webdriver.support.ui import Select

    _open_page(browser, page_server)
    _by_id(browser, "open-models").click()
    _wait(browser, lambda d: {row.get_attribute("data-model") for row in _css(d, "#model-rows tr")} >= {"vlm",
                                                                                                      "scripted"})
    vlm = _css(browser, "#model-rows tr[data-model='vlm']")[0]
    assert vlm.find_elements("css selector", "td")[2].text == "512"
    if vlm.find_elements("css selector", "button[aria-label='Unload vlm']"):
        vlm.find_element("css selector", "button[aria-label='Unload vlm']").click()
    _wait(browser, lambda d: _css(d, "#model-rows tr[data-model='vlm'] button[aria-label='Load vlm']"))
    assert _css(browser, "#model-rows tr[data-model='vlm'] .loaded")[0].text == "no"
    Select(_by_id(browser, "keep-alive")).select_by_value("1h")
    _css(browser, "#model-rows tr[data-model='vlm'] button[aria-label='Load vlm']")[0].click()
    _wait(browser, lambda d: _texts(d, "#model-rows tr[data-model='vlm'] .loaded") != ["no"])
    [loaded] = _texts(browser, "#model-rows tr[data-model='vlm'] .loaded")
    assert re.fullmatch(r"yes, until \d\d:\d\d( [AP]M)?", loaded), loaded  # an hour from now, not for good
    [running] = httpx.get(f"{page_server.server.base_url}/api/ps").json()["models"]
    assert running["name"] == "vlm" and not running["expires_at"].startswith("9999")
    assert "vision" in _css(browser, "#model-rows tr[data-model='vlm'] td")[3].text
    _set(browser, "pull-name", "hf.co/acme/Tiny-GGUF:Q4_K_M")
    _by_id(browser, "pull").click()
    _wait(browser, lambda d: _css(d, "#model-rows tr[data-model='tiny-q4_k_m']"))
    progress = _by_id(browser, "pull-progress")
    assert progress.get_attribute("max") == progress.get_attribute("value") == str(len(PULLED))
    assert _by_id(browser, "pull-status").text == "success"
    browser.save_screenshot(str(artifacts / "models-panel.png"))
    delete = "#model-rows tr[data-model='tiny-q4_k_m'] button[aria-label='Delete tiny-q4_k_m']"
    _css(browser, delete)[0].click()
    _css(browser, delete)[0].click()  # the second click deletes
    _wait(browser, lambda d: not _css(d, "#model-rows tr[data-model='tiny-q4_k_m']"))
    assert "Deleted tiny-q4_k_m" in _by_id(browser, "pull-status").text
    _by_id(browser, "close-models").click()


def test_a_conversation_past_the_context_is_told_so_and_can_drop_its_oldest_turns(browser, page_server):
    _open_page(browser, page_server, model="vlm")
    _by_id(browser, "new-chat").click()
    _set(browser, "temperature", "0")
    _set(browser, "max-tokens", "2")
    if _by_id(browser, "trim").is_selected():
        _by_id(browser, "trim").click()
    fill = "document.getElementById('prompt').value = arguments[0]"  # typing it key by key takes seconds
    browser.execute_script(fill, "apple " * 200)
    _by_id(browser, "send").click()
    _wait(browser, lambda d: _by_id(d, "send").is_enabled() and len(_css(d, ".turn.assistant .regenerate")) == 1)
    assert not _css(browser, ".turn.assistant .error")
    browser.execute_script(fill, "pear " * 300)  # with the first turn, past the model's 512 tokens
    _by_id(browser, "send").click()
    _wait(browser, lambda d: _by_id(d, "send").is_enabled() and _css(d, ".turn.assistant .error"))
    assert "maximum context length is 512" in _css(browser, ".turn.assistant .error")[0].text
    _css(browser, ".turn.assistant .trim-retry")[0].click()  # the page offers to drop the oldest turns
    _wait(browser, lambda d: _by_id(d, "send").is_enabled() and not _css(d, ".turn.assistant .error")
          and len(_css(d, ".turn.assistant")) == 2)
    assert _by_id(browser, "trim").is_selected()
    assert int(_by_id(browser, "prompt-tokens").text) <= 512 - 2  # what the model saw: the first turn left out
