"""LoRA adapters served as models (issue 34), end to end: a real `fireside serve` with one adapter
from the command line and more from the config file, real HTTP, the real clients of every door.

The base is the embedded default model; the adapters are seeded ones the tests write
(`tests/fixtures/make_tiny_lora.py`). Oracle: llama-cpp-python's own `Llama(model_path,
lora_path=..., lora_scale=...)` on the same machine (`tests.test_lora_adapters.oracle`): greedy
tokens through every adapter equal its tokens, and scale 0 equals the base.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest
from huggingface_hub import InferenceClient

from app.settings.config import add_model, remove_model
from tests.cli_runner import run_cli
from tests.fixtures.make_tiny_lora import write_adapter
from tests.load import rss_bytes
from tests.servers import RunningServer, free_port, start_server, stop_server
from tests.test_lora_adapters import PROMPT, TOKENS, oracle

BASE = "SmolLM2-135M-Instruct.Q4_1"  # the embedded default model's id: the base of every adapter here
MIB = 1 << 20


class Served:
    def __init__(self, server: RunningServer, config: Path, files: dict[str, Path]):
        self.server, self.config, self.files = server, config, files
        self.http = httpx.Client(base_url=server.base_url, timeout=120)

    def completion(self, model: str, prompt: str = PROMPT, tokens: int = TOKENS, **extra) -> dict:
        response = self.http.post("/v1/completions", json={
            "model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, **extra})
        assert response.status_code == 200, response.text
        return response.json()

    def token_ids(self, model: str) -> list[int]:
        """The greedy answer of a cold prefill: a prompt reused from a slot is decoded in other
        chunks, and these adapters are strong enough that the rounding shows in greedy tokens (as
        llama-cpp-python's own path shows when fed the prompt in those chunks)."""
        return self.completion(model, prompt_cache_isolation_key=uuid.uuid4().hex)["choices"][0]["token_ids"]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    """`one` (seed 1) on the command line; in the config: `two-half` (seed 2 at scale 0.5), `zero`
    (seed 1 at scale 0), and `broken` (made for a wider model)."""
    folder = tmp_path_factory.mktemp("lora-serving")
    files = {"one": write_adapter(folder / "one.gguf", 1), "two": write_adapter(folder / "two.gguf", 2),
             "broken": write_adapter(folder / "wide.gguf", 3, broken="shape"),
             "late": write_adapter(folder / "late.gguf", 5)}
    config = folder / "config.toml"
    config.write_text("\n".join([
        "[[models]]", 'id = "two-half"', f'base = "{BASE}"', f'lora = "{files["two"]}"', "lora_scale = 0.5",
        "[[models]]", 'id = "zero"', f'base = "{BASE}"', f'lora = "{files["one"]}"', "lora_scale = 0",
        "[[models]]", 'id = "broken"', f'base = "{BASE}"', f'lora = "{files["broken"]}"', ""]))
    server = start_server("--lora", str(files["one"]), "--alias", "one", "--config", str(config),
                          "--parallel", "4", "--ctx-size", "1024")
    state = Served(server, config, files)
    try:
        yield state
    finally:
        state.http.close()
        stop_server(server)


# ---- first: what two adapters cost in memory (before any adapter has decoded) --------------------------


def test_two_adapters_take_their_own_tensors_not_another_base(served: Served) -> None:
    """Resident memory of the server once the base has answered, then once two adapters have
    (one loaded at start-up, one from the config on its first request): within 60 MiB. Each
    adapter is a few MiB of tensors; another copy of the base would be ~100 MiB of weights and
    360 MiB of KV cache."""
    served.completion(BASE)
    before = rss_bytes(served.server.process.pid)
    served.completion("one")
    served.completion("two-half")
    after = rss_bytes(served.server.process.pid)
    assert after - before < 60 * MIB, f"{(after - before) / MIB:.1f} MiB more with two adapters"


# ---- what each adapter answers ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def solo(served: Served) -> dict[str, list[int]]:
    """Each model's greedy tokens for PROMPT, asked alone."""
    return {model: served.token_ids(model) for model in (BASE, "one", "two-half", "zero")}


def test_each_adapter_answers_token_for_token_as_llama_cpp_python(served: Served, solo: dict) -> None:
    assert solo["one"] == oracle(served.files["one"])
    assert solo["two-half"] == oracle(served.files["two"], 0.5)
    assert solo[BASE] == oracle(None)
    assert solo["zero"] == solo[BASE]  # scale 0 is the base
    assert len({tuple(solo[m]) for m in (BASE, "one", "two-half")}) == 3  # the adapters change the answer


def test_mixed_requests_at_once_each_equal_their_solo_answer(served: Served, solo: dict) -> None:
    """The base and two adapters, streamed and whole, at once on four slots: llama.cpp applies
    adapters to a whole context, so a step that mixed them would change some answer."""
    order = [("one", True), (BASE, False), ("two-half", True), ("one", False), (BASE, True), ("two-half", False)]

    async def ask(client: httpx.AsyncClient, model: str, stream: bool) -> list[int]:
        body = {"model": model, "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True, "stream": stream, "prompt_cache_isolation_key": uuid.uuid4().hex}
        if not stream:
            return (await client.post("/v1/completions", json=body)).json()["choices"][0]["token_ids"]
        tokens: list[int] = []
        async with client.stream("POST", "/v1/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    for choice in json.loads(line[6:])["choices"]:  # none in a usage chunk
                        tokens += choice.get("token_ids") or []
        return tokens

    async def all_at_once() -> list[list[int]]:
        async with httpx.AsyncClient(base_url=served.server.base_url, timeout=120) as client:
            return await asyncio.gather(*(ask(client, model, stream) for model, stream in order))

    assert asyncio.run(all_at_once()) == [solo[model] for model, _ in order]


def test_an_adapter_never_reuses_the_base_s_cached_prompt(served: Served) -> None:
    long_prompt = "Here is a note about lighthouses and their keepers. " * 6  # ~70 tokens

    def cached(model: str) -> int:
        usage = served.completion(model, long_prompt, 2)["usage"]
        return (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)

    cached(BASE)
    assert cached("one") == 0  # the same prompt, computed under the bare base: not reused
    assert cached("one") > 0  # under the same adapter it is
    assert cached("two-half") == 0


# ---- every door ---------------------------------------------------------------------------------------


QUESTION = "Name three fruits."


def test_every_door_picks_the_adapter_by_its_model_name(served: Served) -> None:
    """The same question, greedy, through each door's own client: each answers as the OpenAI
    chat door does for the adapter, which is not the base's answer."""
    with openai.OpenAI(base_url=served.server.v1, api_key="unused", max_retries=0) as sdk:
        def chat(model: str) -> str:
            reply = sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}],
                                                max_tokens=8, temperature=0)
            return reply.choices[0].message.content or ""

        chat("one")  # every door below reuses this prompt from the slot: the same chunks, the same rounding
        expected = chat("one")
        assert expected != chat(BASE)
        responses = sdk.responses.create(model="one", input=QUESTION, max_output_tokens=8, temperature=0)
        assert responses.output_text == expected
    with anthropic.Anthropic(base_url=served.server.base_url, api_key="unused", max_retries=0) as claude:
        message = claude.messages.create(model="one", max_tokens=8, extra_body={"temperature": 0},
                                         messages=[{"role": "user", "content": QUESTION}])
        assert message.content[0].text == expected
    local = ollama.Client(host=served.server.base_url, timeout=120)
    reply = local.chat(model="one", messages=[{"role": "user", "content": QUESTION}],
                       options={"temperature": 0, "num_predict": 8})
    assert reply.message.content == expected


def test_tgi_adapter_id_names_an_adapter_of_the_requested_base(served: Served) -> None:
    tgi = InferenceClient(base_url=served.server.base_url)
    served.completion("one", tokens=1)  # both answers below reuse the prompt from a slot (the same rounding)
    text = tgi.text_generation(PROMPT, adapter_id="one", max_new_tokens=TOKENS)  # on the first model: BASE
    assert text == served.completion("one", tokens=TOKENS, ignore_eos=False)["choices"][0]["text"]
    response = served.http.post("/generate", json={"inputs": PROMPT, "model": BASE,
                                                    "parameters": {"adapter_id": "nope", "max_new_tokens": 2}})
    assert response.status_code == 400
    assert response.json() == {"error": f"adapter_id 'nope' is not a LoRA adapter of {BASE}; its adapters: one, "
                                        "two-half, zero, broken", "error_type": "validation"}


# ---- listings -----------------------------------------------------------------------------------------


def test_adapters_are_listed_with_their_base(served: Served, tmp_path: Path) -> None:
    cards = {card["id"]: card for card in served.http.get("/v1/models").json()["data"]}
    assert cards["one"]["parent"] == cards["two-half"]["parent"] == BASE and "parent" not in cards[BASE]
    assert "embedding" not in cards["one"]["capabilities"] and "embedding" in cards[BASE]["capabilities"]
    tags = {model["name"]: model for model in served.http.get("/api/tags").json()["models"]}
    assert tags["zero"]["details"]["parent_model"] == BASE and tags[BASE]["details"]["parent_model"] == ""
    assert tags["zero"]["details"]["family"] == tags[BASE]["details"]["family"] == "llama"
    listing = run_cli("models", "--port", str(served.server.port),
                      env={"FIRESIDE_CONFIG_DIR": str(served.config.parent), "FIRESIDE_MODELS_DIR": str(tmp_path)})
    assert listing.returncode == 0, listing.stderr
    rows = {line.split()[0]: line.split() for line in listing.stdout.splitlines()[2:]}
    assert rows["two-half"][2] == BASE and rows["two-half"][-1] == str(served.files["two"])


def test_an_adapter_has_no_embeddings_of_its_own(served: Served) -> None:
    response = served.http.post("/v1/embeddings", json={"model": "one", "input": "hi"})
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith(f"one is a LoRA adapter on {BASE}: pooled outputs")


# ---- the config file, while serving -------------------------------------------------------------------


def test_a_broken_configured_adapter_is_a_503_naming_its_file_and_the_rest_serve(served: Served) -> None:
    response = served.http.post("/v1/completions", json={"model": "broken", "prompt": "Hi", "max_tokens": 1})
    assert response.status_code == 503
    message = response.json()["error"]["message"]
    assert f"LoRA adapter {served.files['broken']}: tensor 'blk." in message and "has incorrect shape" in message
    assert served.completion("one", tokens=1) and served.completion(BASE, tokens=1)


def test_an_adapter_added_to_the_config_serves_without_reloading_the_base_and_unloads_when_removed(
        served: Served) -> None:
    output = served.server.output
    mark = output.mark()
    add_model({"id": "late", "base": BASE, "lora": served.files["late"]}, served.config)
    assert served.completion("late", tokens=2)["model"] == "late"
    log = output.text(mark)
    assert "loading LoRA adapter late" in log and f"loading {BASE}" not in log and "unloaded" not in log
    assert remove_model("late", served.config)
    assert output.wait_for(lambda line: "unloaded late" in line, since=mark) is not None  # its tensors only
    response = served.http.post("/v1/completions", json={"model": "late", "prompt": "Hi", "max_tokens": 1})
    assert response.status_code == 503 and "late is no longer in the config file" in response.text
    assert served.completion(BASE, tokens=1) and served.completion("one", tokens=1)
    log = output.text(mark)
    assert f"unloaded {BASE}" not in log and f"loading {BASE}" not in log  # the base and one stayed loaded
    cards = {card["id"]: card["loaded"] for card in served.http.get("/v1/models").json()["data"]}
    assert cards[BASE] and cards["one"] and not cards["late"]


# ---- the command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (("--lora-scale", "0.5"), "--lora-scale goes right after the --lora it scales"),
    (("--lora", "a.gguf", "--lora-scale", "1", "--lora-scale", "2"), "--lora-scale given twice for one --lora"),
    (("--lora", "a.gguf", "--lora-scale", "lots"), "argument --lora-scale: a number such as 0.5, got 'lots'"),
    (("--lora", "a.gguf", "--alias", "x", "--alias", "y"), "--alias given twice for one --lora"),
])
def test_lora_options_out_of_place_are_usage_errors(args: tuple[str, ...], message: str) -> None:
    result = run_cli("serve", "--port", "1", *args)
    assert result.returncode == 2 and message in result.stderr


def test_a_bad_adapter_on_the_command_line_stops_start_up_in_one_line(tmp_path: Path) -> None:
    wide = write_adapter(tmp_path / "wide.gguf", 3, broken="shape")
    refused = {wide: f"wide: LoRA adapter {wide}: tensor 'blk.0.attn_output.weight' has incorrect shape: its "
                     "shapes do not match the base model's (made for another model?)",
               tmp_path / "gone.gguf": f"LoRA adapter file of gone not found: {tmp_path / 'gone.gguf'}"}
    for path, complaint in refused.items():
        result = run_cli("serve", "--port", str(free_port()), "--prompt-cache-disk", "0", "--lora", str(path),
                         env={"FIRESIDE_CONFIG_DIR": str(tmp_path)})
        assert result.returncode == 1
        assert f"fireside: {complaint}\n" in result.stderr and "Traceback" not in result.stderr


def test_an_alias_names_the_model_or_the_adapter_before_it() -> None:
    from app.cli import build_parser
    from app.cli.serving import model_specs

    args = build_parser().parse_args(["serve", "--model", "a.gguf", "--alias", "base-a", "--lora", "x.gguf",
                                      "--alias", "x-tuned", "--lora-scale", "0.25", "--model", "b.gguf",
                                      "--lora", "y.gguf", "--mmproj", "p.gguf"])
    specs = model_specs(args.model, args.alias, None, 0, None, None, (), (), args.lora)
    assert [(s.id, s.base, s.lora_scale) for s in specs] == [
        ("base-a", None, 1.0), ("b", None, 1.0), ("x-tuned", "base-a", 0.25), ("y", "b", 1.0)]
    assert args.mmproj == [None, Path("p.gguf")]  # after a --lora, still the --model's option


@pytest.mark.parametrize(("lines", "complaint"), [
    (['id = "t"', 'base = "b"'], "models[1]: t has a base but no lora (the adapter GGUF file)"),
    (['id = "t"', 'lora = "t.gguf"'], "models[1].lora: lora goes with base (the id of the model the adapter"),
    (['id = "t"', 'base = "b"', 'lora = "t.gguf"', "gpu_layers = 10"],
     "models[1].gpu_layers: gpu_layers does not apply to t, a LoRA adapter on b (its base's entry sets it)"),
    (['id = "t"', 'base = "b"', 'lora = "t.gguf"', 'lora_scale = "high"'],
     "models[1].lora_scale: lora_scale is a number such as 0.5, got 'high'"),
    (['id = "t"', 'base = "t"', 'lora = "t.gguf"'], "models[1].base: t cannot be its own base"),
])
def test_a_configured_adapter_says_what_is_wrong_with_it(tmp_path: Path, lines: list[str], complaint: str) -> None:
    from app.settings.config import ConfigError, load_config

    config = tmp_path / "config.toml"
    config.write_text("\n".join(["[[models]]", 'id = "b"', 'file = "b.gguf"', "[[models]]", *lines, ""]))
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert complaint in str(error.value)


def test_an_adapter_of_an_adapter_is_refused_by_the_config(tmp_path: Path) -> None:
    from app.settings.config import ConfigError, load_config

    config = tmp_path / "config.toml"
    lines = ["[[models]]", 'id = "a"', 'base = "x"', 'lora = "a.gguf"',
             "[[models]]", 'id = "b"', 'base = "a"', 'lora = "b.gguf"', ""]
    config.write_text("\n".join(lines))
    with pytest.raises(ConfigError, match="b's base 'a' is another LoRA adapter; an adapter applies to a model loaded"):
        load_config(config)
