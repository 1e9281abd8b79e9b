"""Audio over real HTTP: SmolLM2 served with a tiny audio projector made by the tests
(tests/fixtures/make_tiny_audio.py: seeded random weights, so it proves the plumbing, not
hearing), on speech spoken by espeak-ng in each container format, through the OpenAI SDK: chat's
`input_audio` parts and `/v1/audio/transcriptions` and `/translations` in every response format,
whole and streamed. The same sound gives the same greedy text in every shape, usage counts the
sound's tokens, the prefix cache reuses it, and bad requests get 400s (413 for a body past the
limit, 422 for a form that breaks the schema) that name the field."""

from __future__ import annotations

import base64
import struct

import httpx
import pytest

from backends.llama_model import LlamaModel, ModelOptions
from tests.audio_oracle import reference_answer
from tests.built import tiny_audio
from tests.conftest import POOL
from tests.fixtures.make_tiny_audio import AUDIO_TOKENS
from tests.sounds import CONTAINERS, encoded, speech

QUESTION = "What was said?"
CAP = {"max_tokens": 6}  # the random projector's model rambles: a few tokens show the text is the same


@pytest.fixture(scope="module")
def audio_server(model_path):
    _, projector = tiny_audio()
    return POOL.get("--model", str(model_path), "--alias", "audio", "--mmproj", str(projector),
                    "--model", str(model_path), "--alias", "plain", "--ctx-size", "512", "--parallel", "2")


@pytest.fixture(scope="module")
def client(audio_server):
    import openai

    with openai.OpenAI(base_url=audio_server.v1, api_key="unused", max_retries=0) as client:
        yield client


def audio_message(data: bytes, audio_format: str = "wav") -> list[dict]:
    return [{"role": "user", "content": [
        {"type": "text", "text": QUESTION},
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": audio_format}}]}]


def chat(server, messages: list[dict], model: str = "audio", **fields) -> httpx.Response:
    return httpx.post(f"{server.v1}/chat/completions", timeout=120, json={
        "model": model, "messages": messages, "max_tokens": 6, "temperature": 0, **fields})


def transcribe(server, files: dict | None = None, path: str = "transcriptions", **fields) -> httpx.Response:
    files = {"file": ("speech.wav", speech(), "audio/wav")} if files is None else files
    return httpx.post(f"{server.v1}/audio/{path}", timeout=120, files=files,
                      data={"model": "audio", "max_tokens": "6", **fields})


def test_input_audio_through_the_openai_sdk_whole_and_streamed(client) -> None:
    def ask(**fields):
        return client.chat.completions.create(model="audio", messages=audio_message(speech()), max_tokens=6,
                                              temperature=0, **fields)
    whole, again = ask(logprobs=True), ask()
    chunks = list(ask(stream=True))
    text_only = client.chat.completions.create(model="audio", max_tokens=1, temperature=0, messages=[
        {"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
    content = whole.choices[0].message.content
    assert content and again.choices[0].message.content == content
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content
    assert whole.usage.prompt_tokens >= text_only.usage.prompt_tokens + AUDIO_TOKENS  # the sound is counted
    assert again.usage.prompt_tokens_details.cached_tokens >= whole.usage.prompt_tokens - 3  # and reused


def test_the_responses_door_reads_input_audio_as_chat_does(audio_server, client) -> None:
    data = base64.b64encode(speech()).decode()
    response = client.responses.create(model="audio", max_output_tokens=6, temperature=0, input=[
        {"role": "user", "content": [{"type": "input_text", "text": QUESTION},
                                     {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}]}])
    expected = chat(audio_server, audio_message(speech())).json()["choices"][0]["message"]["content"]
    assert response.output_text == expected  # the same turn, the same prompt, the same greedy text
    assert response.usage.input_tokens > AUDIO_TOKENS


def test_the_server_matches_llama_cpps_own_path(audio_server, model_path) -> None:
    """The served chat (template, HTTP, engine) against libmtmd's helper path on the same tokens
    and the same WAV: the same greedy text, the same top-5 first tokens within 1e-4."""
    answer = chat(audio_server, audio_message(speech()), raw_output=True, logprobs=True, top_logprobs=5).json()
    choice = answer["choices"][0]
    ids = choice["raw_output"]["prompt_token_ids"]
    sound = [i for i, token in enumerate(ids) if token < 0]
    assert len(sound) == AUDIO_TOKENS and sound == list(range(sound[0], sound[0] + AUDIO_TOKENS))
    model = LlamaModel(model_path, ModelOptions())
    try:
        text, top = reference_answer(model, tiny_audio()[1], ids[:sound[0]], speech(), ids[sound[-1] + 1:], 6,
                                     n_batch=512)
    finally:
        model.close()
    assert choice["message"]["content"] == text
    first = choice["logprobs"]["content"][0]["top_logprobs"]
    assert [entry["token_id"] for entry in first] == [token for token, _ in top]
    assert [entry["logprob"] for entry in first] == pytest.approx([logprob for _, logprob in top], abs=1e-4)


@pytest.mark.parametrize("container", sorted(CONTAINERS))
def test_each_container_is_heard_through_chat_and_transcriptions(client, container) -> None:
    data = encoded(container)
    chunks = list(client.chat.completions.create(model="audio", messages=audio_message(data, container),
                                                 max_tokens=6, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    transcript = client.audio.transcriptions.create(model="audio", file=(f"speech.{container}", data),
                                                    extra_body=CAP)
    streamed = list(client.audio.transcriptions.create(model="audio", file=(f"speech.{container}", data),
                                                       stream=True, extra_body=CAP))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)  # the answer streams
    assert chunks[-1].usage.prompt_tokens > AUDIO_TOKENS == transcript.usage.input_token_details.audio_tokens
    assert streamed[-1].type == "transcript.text.done" and streamed[-1].text == transcript.text
    assert "".join(event.delta for event in streamed[:-1]) == transcript.text


def test_transcriptions_answer_every_response_format_with_the_same_text(audio_server, client) -> None:
    def ask(response_format: str, **fields):
        return client.audio.transcriptions.create(model="audio", file=("speech.wav", speech()),
                                                  response_format=response_format, extra_body=CAP, **fields)
    text = ask("json").text
    assert text and ask("text") == text + "\n"
    seconds = len(speech()) / (2 * 22050)  # espeak-ng's WAV: 16-bit mono at 22.05 kHz (less its header)
    srt = ask("srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:02,") and srt.endswith(f"\n{text}\n\n")
    assert ask("vtt").startswith("WEBVTT\n\n00:00:00.000 --> 00:00:02.")
    verbose = ask("verbose_json", timestamp_granularities=["segment"], language="en")
    in_english = ask("json", language="en").text  # the language is named in the instruction
    assert verbose.text == in_english and verbose.language == "en" and abs(verbose.duration - seconds) < 0.01
    (segment,) = verbose.segments
    assert segment.start == 0 and segment.end == verbose.duration and segment.text == in_english
    assert len(segment.tokens) == 6 and segment.avg_logprob < 0
    scored = client.audio.transcriptions.create(model="audio", file=("speech.wav", speech()), include=["logprobs"],
                                                extra_body=CAP)
    assert "".join(entry.token for entry in scored.logprobs) == text and len(scored.logprobs) == 6
    events = list(client.audio.transcriptions.create(model="audio", file=("speech.wav", speech()), stream=True,
                                                     include=["logprobs"], extra_body=CAP))
    streamed = [entry for event in events[:-1] for entry in event.logprobs or []]
    assert [e.token for e in streamed] == [e.token for e in events[-1].logprobs] == [e.token for e in scored.logprobs]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in scored.logprobs], abs=1e-4)
    assert all(entry.logprob < 0 for entry in streamed)
    translation = client.audio.translations.create(model="audio", file=("speech.wav", speech()), extra_body=CAP)
    assert translation.text  # another instruction: its text is the model's
    usage = transcribe(audio_server, language="en").json()["usage"]
    assert usage["input_token_details"]["audio_tokens"] == AUDIO_TOKENS and usage["output_tokens"] == 6


@pytest.mark.parametrize(("fields", "status", "words"), [
    ({"timestamp_granularities[]": "word", "response_format": "verbose_json"}, 400, "word timestamps"),
    ({"timestamp_granularities[]": "segment"}, 400, "needs response_format verbose_json"),
    ({"response_format": "diarized_json"}, 400, "response_format is one of"),
    ({"response_format": "srt", "stream": "true"}, 400, "cannot stream"),
    ({"include[]": "logprobs", "response_format": "text"}, 400, "include logprobs needs response_format json"),
    ({"include[]": "segments"}, 400, "include is logprobs"),
    ({"chunking_strategy": "server_vad"}, 400, "chunking_strategy"),
    ({"speed": "2"}, 400, "speed is not a field"),
    ({"temperature": "warm"}, 422, "valid number"),
    ({"temperature": "3"}, 400, "temperature must be 0 to 1"),
    ({"stream": "maybe"}, 422, "valid boolean"),
])
def test_form_fields_that_cannot_apply_are_refused_naming_them(audio_server, fields, status, words) -> None:
    response = transcribe(audio_server, **fields)
    assert response.status_code == status, response.text
    body = response.json()
    assert words in (body["error"]["message"] if status == 400 else body["detail"][0]["msg"])


def test_bad_audio_is_refused_naming_the_part(audio_server) -> None:
    missing = httpx.post(f"{audio_server.v1}/audio/transcriptions", timeout=60, files={"x": ("a", b"1")},
                         data={"model": "audio"})
    assert missing.status_code == 400 and "x is not a field" in missing.json()["error"]["message"]
    no_file = httpx.post(f"{audio_server.v1}/audio/transcriptions", timeout=60, data={"model": "audio"})
    assert no_file.status_code == 400 and "multipart" in no_file.json()["error"]["message"]
    corrupt = transcribe(audio_server, files={"file": ("a.ogg", b"OggS" + b"\x00" * 200)})
    assert corrupt.status_code == 400 and corrupt.json()["error"]["param"] == "file"
    assert "not audio this server can read" in corrupt.json()["error"]["message"]
    plain = transcribe(audio_server, model="plain")
    assert plain.status_code == 400 and "does not accept audio" in plain.json()["error"]["message"]
    for part, words in [({"data": "", "format": "wav"}, "data is empty"), ({"data": "AAAA", "format": "midi"},
                                                                             "format is one of"),
                        ({"data": base64.b64encode(b"\x00" * 64).decode(), "format": "wav"}, "not audio")]:
        response = chat(audio_server, [{"role": "user", "content": [{"type": "input_audio", "input_audio": part}]}])
        assert response.status_code == 400 and words in response.json()["error"]["message"], response.text
        assert "messages[0].content[0]" in response.json()["error"]["message"]
    shown = chat(audio_server, audio_message(speech()), raw_output=True).json()["choices"][0]["raw_output"]
    assert f"{QUESTION}\n<audio>" in "".join(p for p in shown["prompt_fragments"] if isinstance(p, str))
    refused = chat(audio_server, audio_message(speech()), model="plain")
    assert refused.status_code == 400 and "does not accept audio" in refused.json()["error"]["message"]
    models = {m["id"]: m for m in httpx.get(f"{audio_server.v1}/models").json()["data"]}
    assert "audio" in models["audio"]["capabilities"] and "vision" not in models["audio"]["capabilities"]
    assert "audio" not in models["plain"]["capabilities"]
    for model, modalities in (("audio", {"vision": False, "audio": True}), ("plain", {"vision": False, "audio": False})):
        props = httpx.get(f"{audio_server.base_url}/props", params={"model": model}, timeout=30).json()
        assert props["modalities"] == modalities  # llama-server's GET /props says the same


def test_sound_past_the_limits_gets_413_or_400_with_the_numbers(audio_server) -> None:
    big = transcribe(audio_server, files={"file": ("a.wav", b"\x00" * (17 * 1024 * 1024))})
    assert big.status_code == 413 and "16 MiB" in big.json()["error"]["message"]
    rate, seconds = 8000, 1801  # 8-bit mono: a header that says (and data that holds) 1801 s in 14.4 MB
    samples = b"\x80" * (rate * seconds)
    header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(samples), b"WAVE", b"fmt ", 16, 1, 1, rate, rate,
                         1, 8, b"data", len(samples))
    long = transcribe(audio_server, files={"file": ("long.wav", header + samples)})
    assert long.status_code == 400 and "1801.0 s long; at most 1800 s" in long.json()["error"]["message"]
