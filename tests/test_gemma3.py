"""Gemma 3 270M (Q4_K_M) as a second real model beside SmolLM2: another architecture, a K-quant,
and a 262,144-token vocabulary (SmolLM2's has 49,152), so token ids, logprobs, sampling masks,
grammars and stop sequences are checked where ids run far beyond the default model's. It is a
base model without a chat template: chat goes through the Gemma-family fixture template
(`--chat-template`), and without one through the ChatML fallback. The last tests serve it beside
SmolLM2 from the config registry, each model with its own template and sampling defaults.

Real HTTP on loopback, the real engine, the openai SDK and httpx; one server for the module."""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jsonschema
import numpy as np
import openai
import pytest

from backends.jobs import SamplingParams
from backends.sampling import NO_TOKEN, SamplerChain
from tests.conftest import (
    GEMMA,
    GEMMA_BARE,
    GEMMA_TEMPLATE,
    POOL,
    default_model_path,
)
from tests.fireworks_shapes import (
    CHAT,
    COMPLETIONS,
    FRANCE,
    IM_START,
    VOCAB_SIZE,
    refused,
    stream,
    stream_logprob_content,
    stream_text,
    validate,
    whole,
    without_echo_nulls,
)
from tests.grammar_support import longest_sentence

SMOLLM2_VOCAB = VOCAB_SIZE  # 49,152
GEMMA_VOCAB = 262_144
BOS, START_OF_TURN, END_OF_TURN = 2, 105, 106  # Gemma's <bos>, <start_of_turn>, <end_of_turn>
LYON = 49533  # " Lyon": a word just beyond SmolLM2's vocabulary, unlikely after FRANCE
COUNT = "1, 2, 3, 4, 5,"  # greedy: " 6, 7, 8, ..."; Gemma's digits, commas and spaces are ids > 236,000
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
PERSON = {
    "type": "object", "additionalProperties": False, "required": ["name", "age"],
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0,
                                                                       "maximum": 120}},
}


@pytest.fixture
def sdk(gemma_server):
    with openai.OpenAI(base_url=gemma_server.v1, api_key="unused", max_retries=0) as client:
        yield client


def _content(answer: dict) -> list[dict]:
    return answer["choices"][0]["logprobs"]["content"]


def _decode_buffer(buffer: str) -> list[int]:
    raw = base64.b64decode(buffer)
    assert len(raw) % 4 == 0
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


# ---- vocabulary and plain completions ----------------------------------------------------------------


def test_the_vocabulary_is_gemmas(gemma_http):
    """The turn markup typed into a prompt is one special token each, after the BOS the model
    adds; ids up to 262,143 are accepted as prompts, and one past the end is refused."""
    answer = whole(gemma_http, COMPLETIONS, GEMMA, prompt="<start_of_turn><end_of_turn>", max_tokens=0,
                   return_token_ids=True)
    assert answer["choices"][0]["prompt_token_ids"] == [BOS, START_OF_TURN, END_OF_TURN]
    echoed = whole(gemma_http, COMPLETIONS, GEMMA, prompt=[[LYON], [GEMMA_VOCAB - 1]], max_tokens=0, echo=True)
    assert [choice["text"] for choice in echoed["choices"]] == [" Lyon", "<unused6241>"]
    error = refused(gemma_http, COMPLETIONS, GEMMA, prompt=[[GEMMA_VOCAB]], max_tokens=1)
    assert error["param"] == "prompt" and f"0..{GEMMA_VOCAB - 1}" in error["message"]
    models = gemma_http.get("/v1/models").json()["data"]
    assert [card["id"] for card in models] == [GEMMA, GEMMA_BARE]


def test_greedy_completion_is_deterministic_and_uses_high_ids(sdk):
    first, second = (sdk.completions.create(model=GEMMA, prompt=COUNT, max_tokens=6, temperature=0,
                                            extra_body={"return_token_ids": True, "ignore_eos": True,
                                                        "prompt_cache_isolation_key": uuid.uuid4().hex})
                     for _ in range(2))
    assert first.choices[0].text == second.choices[0].text
    assert first.choices[0].text.startswith(" 6, 7")
    ids = first.choices[0].model_extra["token_ids"]
    assert ids == second.choices[0].model_extra["token_ids"] and len(ids) == first.usage.completion_tokens == 6
    assert all(token >= SMOLLM2_VOCAB for token in ids)  # digits, commas and spaces: ids past 236,000
    prompt_ids = first.choices[0].model_extra["prompt_token_ids"]
    assert prompt_ids[0] == BOS and len(prompt_ids) == first.usage.prompt_tokens


def test_stream_equals_the_whole_answer(gemma_http):
    body = {"prompt": COUNT, "max_tokens": 6, "temperature": 0, "return_token_ids": True}
    expected = whole(gemma_http, COMPLETIONS, GEMMA, **body)["choices"][0]
    chunks = stream(gemma_http, COMPLETIONS, GEMMA, **body)
    assert stream_text(chunks) == expected["text"]


# ---- logprobs in both shapes --------------------------------------------------------------------------


def test_legacy_logprobs(gemma_http):
    answer = whole(gemma_http, COMPLETIONS, GEMMA, prompt=COUNT, max_tokens=6, temperature=0, logprobs=3,
                   return_token_ids=True, ignore_eos=True)
    choice = answer["choices"][0]
    logprobs = choice["logprobs"]
    validate("LogProbs", logprobs)
    assert len(logprobs["tokens"]) == answer["usage"]["completion_tokens"] == 6
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert logprobs["token_ids"] == choice["token_ids"]
    assert logprobs["text_offset"] == [len("".join(logprobs["tokens"][:i])) for i in range(6)]
    for token, logprob, top in zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"],
                                   strict=True):
        assert len(top) == 3 and top[token] == logprob == max(top.values())  # greedy: the best token
        assert sum(math.exp(value) for value in top.values()) <= 1 + 1e-6


def test_chat_logprobs_true_with_top_logprobs(gemma_http):
    answer = whole(gemma_http, CHAT, GEMMA, messages=[{"role": "user", "content": COUNT}], max_tokens=6,
                   temperature=0, logprobs=True, top_logprobs=3, return_token_ids=True)
    choice = answer["choices"][0]
    validate("NewLogProbs", choice["logprobs"])
    content = choice["logprobs"]["content"]
    assert [entry["token_id"] for entry in content] == choice["token_ids"]
    assert "".join(entry["token"] for entry in content) == choice["message"]["content"]
    seen = set()
    for entry in content:
        alternatives = entry["top_logprobs"]
        assert len(alternatives) == 3
        assert [a["logprob"] for a in alternatives] == sorted((a["logprob"] for a in alternatives), reverse=True)
        assert alternatives[0]["token_id"] == entry["token_id"]
        assert alternatives[0]["logprob"] == pytest.approx(entry["logprob"], abs=1e-6)
        assert entry["sampling_logprob"] == 0  # greedy: only one token could be drawn
        assert all(0 <= a["token_id"] < GEMMA_VOCAB and a["bytes"] == list(a["token"].encode())
                   for a in alternatives)
        seen.update(a["token_id"] for a in alternatives)
    assert max(seen) >= SMOLLM2_VOCAB


def test_sampling_logprob_under_top_k(gemma_http):
    """top_k 5 at temperature 1: sampling_logprob is the token's logprob renormalized over the 5."""
    content = _content(whole(gemma_http, COMPLETIONS, GEMMA, prompt="Once upon a time", max_tokens=6,
                             temperature=1, top_k=5, seed=7, logprobs=True, top_logprobs=5))
    assert len(content) == 6
    for entry in content:
        values = [a["logprob"] for a in entry["top_logprobs"]]
        assert entry["token_id"] in [a["token_id"] for a in entry["top_logprobs"]]
        top = max(values)
        mass = top + math.log(sum(math.exp(v - top) for v in values))
        assert entry["sampling_logprob"] == pytest.approx(entry["logprob"] - mass, abs=1e-4)


@pytest.mark.parametrize("temperature", [0, 1])
def test_logit_bias_on_an_id_beyond_smollm2s_vocabulary(gemma_http, temperature):
    """The greedy fast path and llama.cpp's sampler chain both apply a bias on id 49,533."""
    [entry] = _content(whole(gemma_http, COMPLETIONS, GEMMA, prompt=FRANCE, max_tokens=1, temperature=temperature,
                             seed=1, logprobs=True, top_logprobs=2, logit_bias={str(LYON): 100}))
    assert entry["token_id"] == LYON and entry["token"] == " Lyon"
    assert entry["logprob"] < -3  # the model's own view, before the bias
    assert entry["sampling_logprob"] == pytest.approx(0, abs=1e-4)
    assert LYON not in [a["token_id"] for a in entry["top_logprobs"]]
    banned = whole(gemma_http, COMPLETIONS, GEMMA, prompt=COUNT, max_tokens=4, temperature=0,
                   logit_bias={"236764": -100}, return_token_ids=True)  # "," ruled out
    assert 236764 not in banned["choices"][0]["token_ids"] and "," not in banned["choices"][0]["text"]


def test_echo_scores_the_prompt_after_its_bos(gemma_http):
    """The BOS the model adds is the first echoed position (no logprob); the text is the prompt as
    written, and every position's offset points at its token in that text."""
    answer = whole(gemma_http, COMPLETIONS, GEMMA, check_schema=False, prompt=FRANCE, echo=True, max_tokens=2,
                   temperature=0, logprobs=1, return_token_ids=True)
    choice = answer["choices"][0]
    validate("CompletionResponse", {**answer, "choices": [{**choice,
                                                           "logprobs": without_echo_nulls(choice["logprobs"])}]})
    logprobs = choice["logprobs"]
    assert choice["text"].startswith(FRANCE)
    assert logprobs["token_ids"] == choice["prompt_token_ids"] + choice["token_ids"]
    assert logprobs["token_ids"][0] == BOS and logprobs["token_logprobs"][0] is None
    offsets = logprobs["text_offset"]
    assert offsets == sorted(offsets)
    for token, offset in zip(logprobs["tokens"][1:], offsets[1:], strict=True):
        assert choice["text"][offset:offset + len(token)] == token
    assert offsets[len(choice["prompt_token_ids"])] == len(FRANCE)  # the completion starts after the prompt
    # A prompt of token ids that holds the BOS shows it in its text, and its offsets count it
    ids = [BOS, START_OF_TURN, 2364]
    scored = whole(gemma_http, COMPLETIONS, GEMMA, check_schema=False, prompt=[ids], echo=True, max_tokens=0,
                   logprobs=0)["choices"][0]
    assert scored["text"] == "<bos><start_of_turn>user"
    assert scored["logprobs"]["token_ids"] == ids and scored["logprobs"]["text_offset"] == [0, 5, 20]


# ---- sampling masks -------------------------------------------------------------------------------------


def _masked(http: httpx.Client, mode: str, **body) -> list[dict]:
    # COUNT: at each position the likeliest tokens are Gemma's digits, commas and spaces (ids past
    # 236,000, by wide margins), so the masks hold ids past 16 bits whatever tokens are drawn
    return _content(whole(http, COMPLETIONS, GEMMA, prompt=COUNT, max_tokens=5, logprobs=True,
                          sampling_mask=mode, **body))


def test_sampling_mask_top_k_in_three_forms(gemma_http):
    body = {"temperature": 1, "top_k": 5, "seed": 11}
    listed = _masked(gemma_http, "non_zero_list", **body)
    buffered = _masked(gemma_http, "non_zero_buffer", **body)
    counted = _masked(gemma_http, "count", **body)
    assert [e["token_id"] for e in listed] == [e["token_id"] for e in buffered] == [e["token_id"] for e in counted]
    masked_ids = set()
    for entry, buffer_entry, count_entry in zip(listed, buffered, counted, strict=True):
        ids = entry["sampling_mask"]
        assert 1 <= entry["sampling_mask_count"] == len(ids) <= 5 and ids == sorted(set(ids))
        assert entry["token_id"] in ids and all(0 <= token < GEMMA_VOCAB for token in ids)
        assert _decode_buffer(buffer_entry["sampling_mask"]) == ids
        assert count_entry["sampling_mask_count"] == len(ids) and "sampling_mask" not in count_entry
        masked_ids.update(ids)
    assert max(masked_ids) >= SMOLLM2_VOCAB  # the buffer carries ids that need more than 16 bits


def test_sampling_mask_greedy_and_full_vocabulary(gemma_http):
    for entry in _masked(gemma_http, "non_zero_list", temperature=0):
        assert entry["sampling_mask"] == [entry["token_id"]] and entry["sampling_mask_count"] == 1
    for entry in _masked(gemma_http, "non_zero_buffer", temperature=1, seed=5):
        # no filter: every token of the 262k vocabulary can be drawn; too many to list
        assert SMOLLM2_VOCAB < entry["sampling_mask_count"] <= GEMMA_VOCAB
        assert "sampling_mask" not in entry


def test_sampling_mask_follows_the_grammar(gemma_http):
    """The first token of a JSON object must open it: the mask lists only tokens starting with `{`."""
    [first, *_] = _content(whole(gemma_http, COMPLETIONS, GEMMA, prompt="A JSON object:", max_tokens=2,
                                 temperature=1, seed=5, logprobs=True, sampling_mask="non_zero_list",
                                 response_format={"type": "json_object"}))
    ids = first["sampling_mask"]
    assert 1 <= first["sampling_mask_count"] == len(ids) < 100 and first["token_id"] in ids
    texts = whole(gemma_http, COMPLETIONS, GEMMA, prompt=[[token] for token in ids], max_tokens=0, echo=True)
    assert all(choice["text"].startswith("{") for choice in texts["choices"])
    assert first["sampling_logprob"] > first["logprob"]


# ---- grammars and stop sequences ------------------------------------------------------------------------


class _Allowing:
    """A grammar state that allows a fixed set of tokens, counting what it is asked."""

    def __init__(self, allowed: set[int]):
        self.allowed, self.asked = allowed, 0

    def allows(self, token: int) -> bool:
        self.asked += 1
        return token in self.allowed


@pytest.mark.parametrize("case", ["near", "tie", "far", "floor"])
def test_greedy_under_a_grammar_takes_the_best_allowed_token_without_the_whole_vocabulary(case):
    """A rejected greedy token: the next best ones are checked one by one (no pass of the grammar
    over 262k tokens, 130 ms inside a JSON string), and the answer is argmax's over the allowed
    tokens (ties to the lower id); where the window cannot prove that, the whole vocabulary is
    checked (NO_TOKEN here)."""
    logits = np.random.default_rng(3).standard_normal(GEMMA_VOCAB).astype(np.float32)
    order = np.argsort(-logits, kind="stable")
    if case == "near":
        allowed = {int(order[2]), int(order[9])}
    elif case == "tie":  # two allowed tokens share the second-best logit: the lower id wins
        logits[[200_000, 100]] = logits[order[1]]
        allowed = {200_000, 100}
    elif case == "far":
        allowed = {int(order[5_000])}
    else:  # the window's lowest logit is shared by tokens outside it
        logits[:] = 0
        logits[7] = 1
        allowed = {GEMMA_VOCAB - 1}
    chain = SamplerChain(SamplingParams(temperature=0), seed=0, n_vocab=GEMMA_VOCAB, eog_tokens=(1,),
                         penalty_window=64)
    grammar = _Allowing(allowed)
    token = chain._best_allowed_near_top(logits, int(logits.argmax()), grammar)
    masked = np.full(GEMMA_VOCAB, -np.inf, dtype=np.float32)
    masked[list(allowed)] = logits[list(allowed)]
    expected = int(masked.argmax()) if case in ("near", "tie") else NO_TOKEN
    assert token == expected and grammar.asked <= 32
    if case == "tie":
        assert token == 100


def test_json_schema_answer_follows_the_schema(sdk):
    # PERSON's grammar admits at most ~200 bytes (5 places of up to 21 whitespace characters, a name of
    # 12 escaped characters): 256 tokens finish the object whatever whitespace the model picks
    answer = sdk.chat.completions.create(
        model=GEMMA, messages=[{"role": "user", "content": "A person as JSON."}], max_tokens=256, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}},
        extra_body={"raw_output": True})
    choice = answer.choices[0]
    assert longest_sentence(choice.model_extra["raw_output"]["grammar"]) <= 256
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), PERSON)
    plain = sdk.completions.create(model=GEMMA, prompt="A person as JSON:", max_tokens=256, temperature=0,
                                   extra_body={"response_format": {"type": "json_schema", "json_schema": PERSON}})
    jsonschema.validate(json.loads(plain.choices[0].text), PERSON)


def test_user_gbnf_grammar(gemma_http):
    grammar = 'root ::= " " ("yes" | "no") ", " [0-9] [0-9]? " times."'
    # at most 15 characters: 16 tokens finish it however the model splits them
    answer = whole(gemma_http, COMPLETIONS, GEMMA, prompt="Is water wet? Answer:", max_tokens=16, temperature=0,
                   raw_output=True, response_format={"type": "grammar", "grammar": grammar})
    choice = answer["choices"][0]
    assert re.fullmatch(r" (yes|no), [0-9][0-9]? times\.", choice["text"]), choice["text"]
    assert longest_sentence(grammar) <= 16
    assert choice["finish_reason"] == "stop" and choice["raw_output"]["grammar"] == grammar


def test_stop_sequence_across_tokens(gemma_http):
    """" 8" is two tokens in Gemma's vocabulary (" " and "8"): the text is cut before both."""
    free = whole(gemma_http, COMPLETIONS, GEMMA, prompt=COUNT, max_tokens=8, temperature=0)["choices"][0]
    assert free["text"].startswith(" 6, 7, 8")
    body = {"prompt": COUNT, "max_tokens": 12, "temperature": 0, "stop": [" 8", "never"]}
    stopped = whole(gemma_http, COMPLETIONS, GEMMA, **body)
    choice = stopped["choices"][0]
    assert choice["text"] == " 6, 7," and choice["finish_reason"] == "stop"
    assert stopped["usage"]["completion_tokens"] == 8  # generation ends on the token completing the stop
    chunks = stream(gemma_http, COMPLETIONS, GEMMA, **body)
    assert stream_text(chunks) == " 6, 7,"
    assert [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c.get("finish_reason")] == ["stop"]
    unmatched = whole(gemma_http, COMPLETIONS, GEMMA, prompt=COUNT, max_tokens=4, temperature=0, stop=["zebra"],
                      ignore_eos=True)
    assert unmatched["choices"][0]["finish_reason"] == "length"


# ---- chat templates -------------------------------------------------------------------------------------


def test_chat_through_the_gemma_template(sdk):
    answer = sdk.chat.completions.create(model=GEMMA, messages=QUESTION, max_tokens=8, temperature=0,
                                         extra_body={"raw_output": True, "return_token_ids": True})
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    raw = choice.model_extra["raw_output"]
    assert raw["prompt_fragments"] == [BOS, START_OF_TURN, "user\nWhat is the capital of France?", END_OF_TURN,
                                       "\n", START_OF_TURN, "model\n"]
    assert raw["completion"] == choice.message.content
    assert len(raw["prompt_token_ids"]) == answer.usage.prompt_tokens


def test_gemma_prompt_text_and_turns(gemma_http):
    """The rendered prompt (echoed) has Gemma's turns; an assistant message is the `model` turn."""
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "Name a color."}]
    answer = whole(gemma_http, CHAT, GEMMA, messages=messages, max_tokens=2, temperature=0, echo=True)
    text = answer["choices"][0]["message"]["content"]
    assert text.startswith("<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                           "<start_of_turn>user\nName a color.<end_of_turn>\n<start_of_turn>model\n")


def test_the_gemma_template_refuses_a_system_message(gemma_http):
    """The template's own raise_exception is a 400 naming `messages`."""
    error = refused(gemma_http, CHAT, GEMMA, messages=[{"role": "system", "content": "Be brief."}, *QUESTION],
                    max_tokens=2)
    assert error["param"] == "messages" and error["code"] == "chat_template_error"
    assert "System role not supported" in error["message"]


def test_without_a_template_chat_falls_back_to_chatml_as_text(gemma_http):
    """Gemma's vocabulary has no ChatML tokens: the fallback's markup is plain text (one fragment,
    no special token but the BOS), and the chat is still answered."""
    answer = whole(gemma_http, CHAT, GEMMA_BARE, messages=QUESTION, max_tokens=6, temperature=0, raw_output=True)
    choice = answer["choices"][0]
    raw = choice["raw_output"]
    chatml = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    assert raw["prompt_fragments"] == [chatml]
    assert raw["prompt_token_ids"][0] == BOS and START_OF_TURN not in raw["prompt_token_ids"]
    assert isinstance(choice["message"]["content"], str) and choice["finish_reason"] in ("stop", "length")


def test_without_a_template_the_fallback_end_marker_ends_the_answer(gemma_http):
    """ChatML's `<|im_end|>` is no token of Gemma's vocabulary: the base model writes it as text,
    so it is a stop sequence of every chat request (else the model runs on into a turn of its own)."""
    choice = whole(gemma_http, CHAT, GEMMA_BARE, messages=QUESTION, max_tokens=16, temperature=0)["choices"][0]
    assert "<|im_end|>" not in choice["message"]["content"] and "<|im_start|>" not in choice["message"]["content"]
    # whether this machine's model writes the marker within 16 tokens is its own: a grammar makes it
    # write the marker and a turn after it, and the answer ends at the marker
    turn = 'root ::= "Paris.<|im_end|>\n<|im_start|>user\nAnd Italy?<|im_end|>"'
    forced = whole(gemma_http, CHAT, GEMMA_BARE, messages=QUESTION, max_tokens=64, temperature=0,
                   response_format={"type": "grammar", "grammar": turn})["choices"][0]
    assert (forced["message"]["content"], forced["finish_reason"]) == ("Paris.", "stop")


# ---- both models from the config registry ---------------------------------------------------------------


@pytest.fixture(scope="module")
def registry_server(gemma_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """SmolLM2 with its own GGUF template and hot sampling; Gemma with the Gemma fixture template
    and greedy sampling: different defaults for the fields requests leave out."""
    config = tmp_path_factory.mktemp("registry") / "config.toml"
    config.write_text(
        "[[models]]\n"
        'id = "smollm2"\n'
        f"file = {json.dumps(str(default_model_path()))}\n"
        'keep_alive = "-1"\n'
        "[models.sampling]\n"
        "temperature = 1.5\n"
        "max_tokens = 3\n"
        "\n"
        "[[models]]\n"
        'id = "gemma"\n'
        'aliases = ["accounts/google/models/gemma-3-270m"]\n'
        f"file = {json.dumps(str(gemma_path))}\n"
        f"chat_template = {json.dumps(str(GEMMA_TEMPLATE))}\n"
        'keep_alive = "-1"\n'
        "[models.sampling]\n"
        "temperature = 0\n"
        "max_tokens = 5\n",
        encoding="utf-8",
    )
    running = POOL.get("--config", str(config), "--ctx-size", "512", "--parallel", "2")
    with httpx.Client(base_url=running.base_url, timeout=120) as client:
        yield client


def test_registry_lists_both_models_and_serves_them_at_once(registry_server):
    listed = {card["id"]: card for card in registry_server.get("/v1/models").json()["data"]}
    assert set(listed) == {"smollm2", "gemma"}

    def ask(model: str) -> dict:
        return whole(registry_server, CHAT, model, messages=[{"role": "user", "content": "Hi"}], raw_output=True,
                     return_token_ids=True, ignore_eos=True)

    with ThreadPoolExecutor(2) as pool:
        smol, gemma = pool.map(ask, ["smollm2", "gemma"])
    # each model's own template: ChatML tokens for SmolLM2, Gemma's turns for Gemma
    smol_fragments = smol["choices"][0]["raw_output"]["prompt_fragments"]
    assert smol_fragments[0] == IM_START and smol_fragments[-1] == "assistant\n"
    assert START_OF_TURN not in smol["choices"][0]["raw_output"]["prompt_token_ids"]
    assert gemma["choices"][0]["raw_output"]["prompt_fragments"] == [BOS, START_OF_TURN, "user\nHi", END_OF_TURN,
                                                                      "\n", START_OF_TURN, "model\n"]
    # each model's own max_tokens default
    assert smol["usage"]["completion_tokens"] == 3 and gemma["usage"]["completion_tokens"] == 5
    assert all(token < SMOLLM2_VOCAB for token in smol["choices"][0]["token_ids"])
    assert {card["id"]: card["loaded"] for card in registry_server.get("/v1/models").json()["data"]} == \
        {"smollm2": True, "gemma": True}


def test_registry_sampling_defaults_are_per_model(registry_server):
    """Gemma's default temperature 0: the same text whatever the seed, equal to an explicit greedy
    request; SmolLM2's 1.5: the seed changes the text. A request's own field wins."""
    def text(model: str, **body) -> str:
        answer = whole(registry_server, COMPLETIONS, model, prompt=COUNT, ignore_eos=True, **body)
        return answer["choices"][0]["text"]

    gemma = {text("gemma", seed=seed) for seed in range(3)}
    assert len(gemma) == 1
    assert gemma == {text("accounts/google/models/gemma-3-270m", temperature=0, max_tokens=5)}
    assert len({text("smollm2", seed=seed) for seed in range(4)}) > 1
    smol_greedy = {text("smollm2", seed=seed, temperature=0) for seed in range(2)}
    assert len(smol_greedy) == 1
    long = whole(registry_server, COMPLETIONS, "gemma", prompt=COUNT, max_tokens=7, ignore_eos=True)
    assert long["usage"]["completion_tokens"] == 7


def test_registry_gemma_stream_with_logprobs(registry_server):
    """The registry's Gemma streams logprob entries whose ids reach past SmolLM2's vocabulary."""
    chunks = stream(registry_server, CHAT, "gemma", messages=[{"role": "user", "content": COUNT}], logprobs=True,
                    top_logprobs=2, ignore_eos=True)
    entries = stream_logprob_content(chunks)
    assert len(entries) == 5 and "".join(e["token"] for e in entries) == stream_text(chunks)
    assert max(a["token_id"] for e in entries for a in e["top_logprobs"]) >= SMOLLM2_VOCAB
