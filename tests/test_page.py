"""The page at `/` in a real browser: headless Chromium from the operating system's packages,
driven by Selenium through the system's ChromeDriver, against real servers on loopback.

Skipped where no Chromium is installed (Debian: `apt-get install chromium chromium-driver`; `.ci/run`
installs both).
"""

from __future__ import annotations

import json
import re
import shutil

import httpx
import pytest

from tests.conftest import FAMILY_KEY

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
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def keyed_server(keyed_family):
    """A server that needs a key, serving a model whose template opens a think block (`r1`)."""
    return keyed_family


def _wait(driver, condition, timeout: float = WAIT):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


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
    return (reasoning[0].get_attribute("textContent") if reasoning else "",
            turns[-1].find_element(By.CSS_SELECTOR, ".content").get_attribute("textContent"))


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
    assert first == answer["choices"][0]["message"]["content"]
    assert int(_by_id(browser, "completion-tokens").text) == answer["usage"]["completion_tokens"]
    # the speed and the time to the first token are shown, in their formats (their values are the
    # machine's: a speed needs two tokens apart in time, else it shows "–")
    assert re.fullmatch(r"\d+\.\d|–", _by_id(browser, "tps").text), _by_id(browser, "tps").text
    assert re.fullmatch(r"\d+\.\d\d s", _by_id(browser, "ttft").text), _by_id(browser, "ttft").text
    _, second = _ask(browser, "And again, shorter.")  # the second turn starts with the first
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
    # its generation prompt opens a think block the tiny model never closes: all of it is reasoning
    assert reasoning.strip() and content == ""
    page = httpx.get(keyed_server.base_url)
    assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
    assert httpx.post(keyed_server.base_url, json={"inputs": "Hi"}).status_code == 401  # TGI's route is not open
