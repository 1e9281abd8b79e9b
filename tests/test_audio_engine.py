"""Audio in the engine: a tiny `ultravox` projector made by the tests (tests/fixtures/make_tiny_audio.py,
seeded random weights) beside SmolLM2, on speech spoken by espeak-ng. Random weights cannot hear;
what is checked is the plumbing against llama.cpp's own path: libmtmd's helper reads the WAV
(`mtmd_helper_bitmap_init_from_buf`), `mtmd_helper_eval_chunks` evaluates the prompt in a context
of its own and greedy decoding follows; the engine must give the same text and the same top-5
first-token log-probabilities (within 1e-4), cold and with the sound reused from the prefix cache.
Long sound is cut into the encoder's 30 s windows in order; bad sound is refused with a reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.media.audio import audio_samples
from backends import image_data
from backends.engine import Engine, EngineOptions
from backends.image_data import ImageError
from backends.jobs import (
    PromptSpec,
)
from backends.llama_model import LlamaModel
from backends.vision import Projector
from tests.audio_oracle import reference_answer
from tests.built import tiny_audio, tiny_vlm
from tests.fixtures.make_tiny_audio import AUDIO_TOKENS
from tests.multimodal_runs import engine_greedy, projector_engine
from tests.servers import engine_threads
from tests.sounds import encoded, speech, tone_wav

HEAD = "<|im_start|>user\nWhat was said? "
TAIL = "<|im_end|>\n<|im_start|>assistant\n"
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def audio_model():
    with projector_engine(*tiny_audio()) as loaded:
        yield loaded


def _reference_text(model: LlamaModel, projector_path: Path, data: bytes,
                    n_batch: int = 256) -> tuple[str, list[tuple[int, float]]]:
    head = model.tokenize(HEAD, add_special=False, parse_special=True)
    tail = model.tokenize(TAIL, add_special=False, parse_special=True)
    return reference_answer(model, projector_path, head, data, tail, NEW_TOKENS, n_batch)


def _prompt(model: LlamaModel, sound) -> PromptSpec:
    head = model.tokenize(HEAD, add_special=False, parse_special=True)
    rest = model.tokenize(TAIL, add_special=False, parse_special=True)
    return PromptSpec((*head, *sound.tokens, *rest), NEW_TOKENS, tuple(sound.at(len(head))))


def test_the_fixture_script_prints_the_model_and_the_projector(tmp_path) -> None:
    text_path, projector_path = tiny_audio()
    script = Path(__file__).parent / "fixtures" / "make_tiny_audio.py"
    run = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}, check=True)
    assert run.stdout.splitlines() == [str(text_path), str(tmp_path / "mmproj-audio.gguf")]
    assert (tmp_path / "mmproj-audio.gguf").read_bytes() == projector_path.read_bytes()  # seeded: the same bytes


def test_the_projector_reads_audio_and_not_images(audio_model) -> None:
    _, projector, _, _ = audio_model
    assert projector.audio and not projector.vision
    sound = projector.encode_audio(speech(), audio_samples)
    (tile,) = sound.tiles  # 2.5 s of speech: one 30 s window
    assert tile.embeddings.shape == (AUDIO_TOKENS, 576) and np.isfinite(tile.embeddings).all()
    assert projector.count_audio(speech(), audio_samples) == len(sound.tokens) == AUDIO_TOKENS
    assert projector.encode_audio(speech(), audio_samples).key == sound.key  # keyed by content
    with pytest.raises(ImageError, match="takes no images"):
        projector.count(b"\x89PNG\r\n\x1a\n")


def test_a_vision_projector_takes_no_audio(audio_model) -> None:
    model = audio_model[0]
    vision_only = Projector(model, tiny_vlm()[1], threads=engine_threads())
    try:
        assert vision_only.vision and not vision_only.audio
        with pytest.raises(ImageError, match="takes no audio"):
            vision_only.encode_audio(speech(), audio_samples)
    finally:
        vision_only.close()


def test_the_engine_matches_llama_cpps_own_path(audio_model) -> None:
    model, projector, engine, projector_path = audio_model
    expected, expected_top = _reference_text(model, projector_path, speech())
    prompt = _prompt(model, projector.encode_audio(speech(), audio_samples))
    for cached in (False, True):  # cold, then the sound's chunk reused from the prefix cache
        text, top, finished = engine_greedy(engine, prompt)
        assert text == expected
        assert [token for token, _ in top] == [token for token, _ in expected_top]
        assert np.allclose([p for _, p in top], [p for _, p in expected_top], atol=1e-4)
        assert finished.prompt_tokens == len(prompt.tokens)  # the sound's tokens are counted
        assert (finished.cached_tokens >= len(prompt.tokens) - 2) == cached


def test_a_chunk_longer_than_a_batch_is_decoded_in_pieces(audio_model) -> None:
    model, projector, _, projector_path = audio_model
    expected, expected_top = _reference_text(model, projector_path, speech(), n_batch=32)  # llama.cpp's pieces
    prompt = _prompt(model, projector.encode_audio(speech(), audio_samples))
    small = Engine(model, EngineOptions(ctx_size=512, parallel=1, threads=engine_threads(), batch_size=32))  # 75 rows: 3 pieces
    try:
        text, top, _ = engine_greedy(small, prompt)
    finally:
        small.close()
    assert text == expected
    assert np.allclose([p for _, p in top], [p for _, p in expected_top], atol=1e-4)


def test_each_container_reads_as_the_same_speech(audio_model) -> None:
    _, projector, _, _ = audio_model
    wav = projector.encode_audio(speech(), audio_samples).tiles[0].embeddings
    for container in ("flac", "mp3", "ogg", "webm", "m4a"):
        tile = projector.encode_audio(encoded(container), audio_samples).tiles[0].embeddings
        assert tile.shape == wav.shape, container
        # lossy codecs change the samples a little, never into another sound
        assert np.corrcoef(tile.ravel(), wav.ravel())[0, 1] > 0.9, container


def test_long_sound_is_cut_into_windows_in_order(audio_model) -> None:
    _, projector, _, _ = audio_model
    # 30 s of one tone, then another: two 30 s windows, the first tone's first
    sound = projector.encode_audio(tone_wav(30, 16000, 440, (5, 1000)), audio_samples)
    assert [len(tile.embeddings) for tile in sound.tiles] == [AUDIO_TOKENS, AUDIO_TOKENS]
    longer = projector.encode_audio(tone_wav(30, 16000, 440, (10, 1000)), audio_samples)
    swapped = projector.encode_audio(tone_wav(30, 16000, 1000, (5, 440)), audio_samples)
    assert np.allclose(sound.tiles[0].embeddings, longer.tiles[0].embeddings, atol=1e-4)
    assert not np.allclose(sound.tiles[1].embeddings, longer.tiles[1].embeddings, atol=1e-2)
    assert not np.allclose(sound.tiles[0].embeddings, swapped.tiles[0].embeddings, atol=1e-2)
    assert sound.tokens != longer.tokens  # other content, other placeholders: never one for the other


@pytest.mark.parametrize(("data", "words"), [
    (b"RIFF\x00\x00\x00\x00WAVEnot really", "no fmt chunk"),
    (b"\x00" * 64, "not audio"),
    (tone_wav(0), "no samples"),
])
def test_bad_sound_is_refused_with_a_reason(audio_model, data, words) -> None:
    _, projector, _, _ = audio_model
    with pytest.raises(ImageError, match=words):
        projector.encode_audio(data, audio_samples)


def test_sound_past_the_limit_is_refused_with_the_numbers(audio_model, monkeypatch) -> None:
    _, projector, _, _ = audio_model
    monkeypatch.setattr(image_data, "MAX_AUDIO_SECONDS", 20)
    with pytest.raises(ImageError, match=r"is 25.0 s long; at most 20 s"):
        projector.count_audio(tone_wav(25), audio_samples)
    with pytest.raises(ImageError, match=r"at most 20 s"):
        projector.count_audio(encoded("ogg", "a longer sentence, " * 30), audio_samples)
