"""Logprob records shaped into the spec's `LogProbs` / `NewLogProbs`, with the real SmolLM2
vocabulary (no weights): token texts and bytes, text offsets across stream chunks, the legacy
top dict, sampling masks, echo's first token, and the spec's JSON schemas."""

from __future__ import annotations

import base64
import threading

import jsonschema
import msgspec
import numpy as np
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from app.api.common.logprobs import (
    LogprobShaper,
    TokenTexts,
    merge_logprobs,
    token_texts,
)
from app.api.common.outputs import LogProbs, NewLogProbs
from backends.jobs import MASK_LIST_LIMIT, TokenLogprob
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path
from tests.conftest import SPEC_DIR

SPEC = SPEC_DIR / "fireworks-openapi.yaml"

# SmolLM2 token ids, as its tokenizer gives them (checked in test_real_token_ids)
HELLO, WORLD, THERE, EVERYONE, BANG = 19556, 905, 665, 2573, 17
IM_START, IM_END, ENDOFTEXT = 1, 2, 0
SMILEY = (40303, 218)  # " 😀": b" \xf0\x9f\x98" + b"\x80"


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    loaded = LlamaModel(default_model_path(), ModelOptions(vocab_only=True))
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def texts(model: LlamaModel) -> TokenTexts:
    return TokenTexts(model)


@pytest.fixture(scope="module")
def validators() -> dict[str, jsonschema.Draft202012Validator]:
    spec = yaml.safe_load(SPEC.read_text())
    registry = Registry().with_resource("urn:spec", Resource.from_contents(spec, default_specification=DRAFT202012))
    return {
        name: jsonschema.Draft202012Validator(
            {"$ref": f"urn:spec#/components/schemas/{name}"}, registry=registry
        )
        for name in ("LogProbs", "NewLogProbs", "NewLogProbsContent")
    }


def to_json(value: LogProbs | NewLogProbs) -> dict:
    """Through the wire, as a client sees it."""
    return msgspec.json.decode(msgspec.json.encode(value))


def record(token: int, logprob: float, top: tuple[tuple[int, float], ...] = (), **extra) -> TokenLogprob:
    return TokenLogprob(token=token, logprob=logprob, top=top, **extra)


HELLO_TOP = ((HELLO, -0.25), (THERE, -1.5), (EVERYONE, -2.0))


def test_real_token_ids(model: LlamaModel) -> None:
    assert model.tokenize("Hello world", add_special=False, parse_special=False) == [HELLO, WORLD]
    assert model.tokenize(" there everyone!", add_special=False, parse_special=False) == [THERE, EVERYONE, BANG]
    assert model.tokenize(" 😀", add_special=False, parse_special=False) == list(SMILEY)
    assert model.tokenize("<|im_start|><|im_end|>", add_special=False, parse_special=True) == [IM_START, IM_END]


def test_token_piece_matches_token_bytes_and_is_thread_safe(model: LlamaModel) -> None:
    ids = range(0, model.n_vocab, 11)
    expected = {token: model.token_bytes(token, special=True) for token in ids}
    results: list[dict[int, bytes]] = []

    def work() -> None:
        results.append({token: model.token_piece(token, special=True) for token in ids})

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3
    assert all(result == expected for result in results)


def test_token_texts(model: LlamaModel, texts: TokenTexts) -> None:
    assert texts.get(WORLD).text == " world"
    assert texts.get(WORLD).bytes == [32, 119, 111, 114, 108, 100]
    assert texts.get(WORLD) is texts.get(WORLD)  # cached
    # special tokens show their text; the choice's text has them only when they are rendered
    assert texts.get(IM_END).text == "<|im_end|>"
    assert texts.get(IM_END).bytes == list(b"<|im_end|>")
    assert texts.get(IM_END).plain == b""
    # a character split over two tokens: exact bytes, replacement characters in the texts
    first, second = (texts.get(token) for token in SMILEY)
    assert first.bytes == [0x20, 0xF0, 0x9F, 0x98]
    assert second.bytes == [0x80]
    assert first.text == " \ufffd"
    assert second.text == "\ufffd"
    assert bytes(first.bytes + second.bytes).decode() == " 😀"
    assert token_texts(model) is token_texts(model)


def test_new_shape(texts: TokenTexts, validators) -> None:
    shaper = LogprobShaper(texts, legacy=False, top=2)
    entries = [
        (HELLO, record(HELLO, -0.25, HELLO_TOP, sampling_logprob=-0.1)),
        (WORLD, record(WORLD, -3.0, ((THERE, -0.5), (EVERYONE, -1.0), (WORLD, -3.0)), sampling_logprob=-2.5)),
    ]
    body = to_json(shaper.shape(0, entries))
    validators["NewLogProbs"].validate(body)
    assert body == {
        "content": [
            {
                "token": "Hello", "logprob": -0.25, "sampling_logprob": -0.1, "bytes": list(b"Hello"),
                "top_logprobs": [
                    {"token": "Hello", "logprob": -0.25, "token_id": HELLO, "bytes": list(b"Hello")},
                    {"token": " there", "logprob": -1.5, "token_id": THERE, "bytes": list(b" there")},
                ],
                "token_id": HELLO, "text_offset": 0,
            },
            {
                "token": " world", "logprob": -3.0, "sampling_logprob": -2.5, "bytes": list(b" world"),
                "top_logprobs": [
                    {"token": " there", "logprob": -0.5, "token_id": THERE, "bytes": list(b" there")},
                    {"token": " everyone", "logprob": -1.0, "token_id": EVERYONE, "bytes": list(b" everyone")},
                ],
                "token_id": WORLD, "text_offset": 5,
            },
        ]
    }


def test_numpy_scalars_encode(texts: TokenTexts, validators) -> None:
    entry = record(HELLO, np.float32(-0.5), ((HELLO, np.float32(-0.5)),), sampling_logprob=np.float32(-0.25))
    new = to_json(LogprobShaper(texts, legacy=False, top=1).shape(0, [(HELLO, entry)]))
    validators["NewLogProbs"].validate(new)
    assert new["content"][0]["logprob"] == -0.5
    legacy = to_json(LogprobShaper(texts, legacy=True, top=1).shape(0, [(HELLO, entry)]))
    assert legacy["top_logprobs"] == [{"Hello": -0.5}]


def test_legacy_shape_adds_the_sampled_token(texts: TokenTexts, validators) -> None:
    shaper = LogprobShaper(texts, legacy=True, top=2)
    entries = [
        (HELLO, record(HELLO, -0.25, HELLO_TOP)),  # sampled token among the top 2
        (WORLD, record(WORLD, -3.0, ((THERE, -0.5), (EVERYONE, -1.0), (WORLD, -3.0)))),  # not among them
    ]
    body = to_json(shaper.shape(0, entries))
    validators["LogProbs"].validate(body)
    assert body == {
        "tokens": ["Hello", " world"],
        "token_logprobs": [-0.25, -3.0],
        "top_logprobs": [{"Hello": -0.25, " there": -1.5}, {" there": -0.5, " everyone": -1.0, " world": -3.0}],
        "text_offset": [0, 5],
        "token_ids": [HELLO, WORLD],
    }


def test_legacy_top_zero_holds_only_the_sampled_token(texts: TokenTexts, validators) -> None:
    body = to_json(LogprobShaper(texts, legacy=True, top=0).shape(0, [(WORLD, record(WORLD, -3.0, HELLO_TOP))]))
    validators["LogProbs"].validate(body)
    assert body["top_logprobs"] == [{" world": -3.0}]


def test_new_shape_top_zero(texts: TokenTexts, validators) -> None:
    body = to_json(LogprobShaper(texts, legacy=False, top=0).shape(0, [(HELLO, record(HELLO, -0.25, HELLO_TOP))]))
    validators["NewLogProbs"].validate(body)
    assert body["content"][0]["top_logprobs"] == []
    assert body["content"][0]["sampling_logprob"] is None


@pytest.mark.parametrize("legacy", [True, False])
def test_offsets_continue_across_chunks_and_merge(texts: TokenTexts, legacy: bool) -> None:
    tokens = [HELLO, WORLD, THERE, EVERYONE, BANG]  # "Hello world there everyone!"
    entries = [(token, record(token, -1.0 - i, HELLO_TOP)) for i, token in enumerate(tokens)]
    streamed = LogprobShaper(texts, legacy=legacy, top=1)
    chunks = [streamed.shape(0, entries[:2]), streamed.shape(0, entries[2:3]), streamed.shape(0, entries[3:])]
    whole = LogprobShaper(texts, legacy=legacy, top=1).shape(0, entries)

    def offsets(value: LogProbs | NewLogProbs) -> list[int]:
        return value.text_offset if legacy else [entry.text_offset for entry in value.content]

    assert [offsets(chunk) for chunk in chunks] == [[0, 5], [11], [17, 26]]
    assert streamed.offset(0) == len("Hello world there everyone!")
    merged = None
    for chunk in chunks:
        merged = merge_logprobs(merged, chunk)
    assert merged == whole
    assert offsets(whole) == [0, 5, 11, 17, 26]


def test_offsets_are_per_choice(texts: TokenTexts) -> None:
    shaper = LogprobShaper(texts, legacy=True, top=0)
    shaper.shape(0, [(HELLO, record(HELLO, -1.0))])
    first = shaper.shape(1, [(WORLD, record(WORLD, -1.0))])
    second = shaper.shape(0, [(WORLD, record(WORLD, -1.0))])
    assert first.text_offset == [0]
    assert second.text_offset == [5]


def test_offsets_count_characters_of_the_choice_text(texts: TokenTexts, model: LlamaModel) -> None:
    """Split characters count once, where the token completing them ends, as in the text the
    engine decodes incrementally; every offset indexes the choice's text."""
    text = "héllo 😀 日本語"
    tokens = model.tokenize(text, add_special=False, parse_special=False)
    assert len(tokens) == 12  # é whole; 😀, 日 and 語 split over tokens
    shaper = LogprobShaper(texts, legacy=False, top=0)
    body = to_json(shaper.shape(0, [(token, record(token, -1.0)) for token in tokens]))
    assert [entry["text_offset"] for entry in body["content"]] == [0, 1, 2, 5, 6, 7, 8, 8, 9, 10, 10, 10]
    assert shaper.offset(0) == len(text) == 11
    assert b"".join(bytes(entry["bytes"]) for entry in body["content"]) == text.encode()
    assert [entry["token"] for entry in body["content"]][3:5] == [" \ufffd", "\ufffd"]


def test_offsets_and_special_tokens(texts: TokenTexts) -> None:
    entries = [(HELLO, record(HELLO, -1.0)), (IM_END, record(IM_END, -1.0)), (WORLD, record(WORLD, -1.0))]
    hidden = LogprobShaper(texts, legacy=True, top=0).shape(0, entries)
    assert hidden.tokens == ["Hello", "<|im_end|>", " world"]
    assert hidden.text_offset == [0, 5, 5]  # the choice's text has no "<|im_end|>"
    shown = LogprobShaper(texts, legacy=True, top=0, special_text=True).shape(0, entries)
    assert shown.text_offset == [0, 5, 15]
    overridden = LogprobShaper(texts, legacy=True, top=0).shape(0, entries, special_text=True)
    assert overridden.text_offset == [0, 5, 15]


def test_echo_first_token_has_no_logprob(texts: TokenTexts, validators) -> None:
    """The echoed prompt's first token: null in both shapes; the rest validate strictly (the
    spec says `number` for these, but the first prompt token has none)."""
    entries = [(IM_START, None), (HELLO, record(HELLO, -0.25, HELLO_TOP)), (WORLD, record(WORLD, -2.0, HELLO_TOP))]

    legacy = to_json(LogprobShaper(texts, legacy=True, top=1, special_text=True).shape(0, entries))
    assert legacy["tokens"] == ["<|im_start|>", "Hello", " world"]
    assert legacy["token_logprobs"] == [None, -0.25, -2.0]
    assert legacy["top_logprobs"] == [None, {"Hello": -0.25}, {"Hello": -0.25, " world": -2.0}]
    assert legacy["text_offset"] == [0, 12, 17]
    rest = {key: value[1:] for key, value in legacy.items()}
    validators["LogProbs"].validate(rest)

    new = to_json(LogprobShaper(texts, legacy=False, top=1, mask="count", special_text=True).shape(0, entries))
    first = new["content"][0]
    assert first == {
        "token": "<|im_start|>", "logprob": None, "sampling_logprob": None, "bytes": list(b"<|im_start|>"),
        "top_logprobs": [], "token_id": IM_START, "text_offset": 0,
    }
    validators["NewLogProbsContent"].validate({**first, "logprob": 0.0})  # null apart, it conforms
    validators["NewLogProbs"].validate({"content": new["content"][1:]})


def test_set_offset_after_echoed_prompt(texts: TokenTexts) -> None:
    shaper = LogprobShaper(texts, legacy=False, top=0)
    shaper.set_offset(0, len("Hello"))
    result = shaper.shape(0, [(WORLD, record(WORLD, -1.0)), (BANG, record(BANG, -1.0))])
    assert [entry.text_offset for entry in result.content] == [5, 11]


ACTIVE = np.array([BANG, THERE, WORLD, EVERYONE, 40000], dtype=np.uint32)


def masked(active_ids: np.ndarray | None = ACTIVE, count: int = len(ACTIVE)) -> TokenLogprob:
    return record(WORLD, -0.5, ((WORLD, -0.5),), sampling_logprob=-0.2, active_count=count, active_ids=active_ids)


def test_mask_count(texts: TokenTexts, validators) -> None:
    body = to_json(LogprobShaper(texts, legacy=False, top=1, mask="count").shape(0, [(WORLD, masked())]))
    validators["NewLogProbs"].validate(body)
    assert body["content"][0]["sampling_mask_count"] == 5
    assert "sampling_mask" not in body["content"][0]


def test_mask_list(texts: TokenTexts, validators) -> None:
    body = to_json(LogprobShaper(texts, legacy=False, top=1, mask="non_zero_list").shape(0, [(WORLD, masked())]))
    validators["NewLogProbs"].validate(body)
    assert body["content"][0]["sampling_mask_count"] == 5
    assert body["content"][0]["sampling_mask"] == [17, 665, 905, 2573, 40000]


def test_mask_buffer(texts: TokenTexts, validators) -> None:
    body = to_json(LogprobShaper(texts, legacy=False, top=1, mask="non_zero_buffer").shape(0, [(WORLD, masked())]))
    validators["NewLogProbs"].validate(body)
    encoded = body["content"][0]["sampling_mask"]
    assert isinstance(encoded, str)
    raw = base64.b64decode(encoded)
    assert len(raw) == 4 * len(ACTIVE)
    assert raw[:4] == bytes([17, 0, 0, 0])  # little-endian
    np.testing.assert_array_equal(np.frombuffer(raw, dtype="<u4"), ACTIVE)


@pytest.mark.parametrize("mode", ["non_zero_list", "non_zero_buffer"])
def test_mask_over_the_limit_gives_the_count_only(texts: TokenTexts, validators, mode: str) -> None:
    shaper = LogprobShaper(texts, legacy=False, top=1, mask=mode)
    body = to_json(shaper.shape(0, [(WORLD, masked(active_ids=None, count=MASK_LIST_LIMIT + 500))]))
    validators["NewLogProbs"].validate(body)
    assert body["content"][0]["sampling_mask_count"] == 1500
    assert "sampling_mask" not in body["content"][0]


def test_no_mask_fields_unless_asked_or_known(texts: TokenTexts) -> None:
    unasked = to_json(LogprobShaper(texts, legacy=False, top=1).shape(0, [(WORLD, masked())]))
    assert "sampling_mask_count" not in unasked["content"][0]
    assert "sampling_mask" not in unasked["content"][0]
    # a prompt position (echo) has no sampling information
    prompt = to_json(LogprobShaper(texts, legacy=False, top=1, mask="non_zero_list").shape(0, [(WORLD, record(WORLD, -1.0))]))
    assert "sampling_mask_count" not in prompt["content"][0]


def test_merge_none_and_mismatched_shapes(texts: TokenTexts) -> None:
    new = LogprobShaper(texts, legacy=False, top=0).shape(0, [(HELLO, record(HELLO, -1.0))])
    legacy = LogprobShaper(texts, legacy=True, top=0).shape(0, [(HELLO, record(HELLO, -1.0))])
    assert merge_logprobs(None, None) is None
    assert merge_logprobs(None, new) is new
    assert merge_logprobs(legacy, None) is legacy
    with pytest.raises(TypeError):
        merge_logprobs(new, legacy)


def test_merge_legacy_with_missing_lists() -> None:
    first = LogProbs(tokens=["a"], token_logprobs=[-1.0], top_logprobs=None, text_offset=[0], token_ids=[1])
    second = LogProbs(tokens=["b"], token_logprobs=[-2.0], top_logprobs=[{"b": -2.0}], text_offset=[1], token_ids=None)
    merged = merge_logprobs(first, second)
    assert merged == LogProbs(
        tokens=["a", "b"], token_logprobs=[-1.0, -2.0], top_logprobs=[None, {"b": -2.0}], text_offset=[0, 1],
        token_ids=None,
    )
