"""Images in the engine: a tiny projector made by the tests (tests/fixtures/make_tiny_vlm.py,
seeded random weights, llama.cpp's `gemma3` type) beside SmolLM2. Random weights cannot describe a
picture; what is checked is the plumbing: libmtmd reads and encodes the image, the engine decodes
its embeddings in a prompt, different images give different greedy answers and the same image the
same answer, and the prefix cache reuses an image it has decoded (never a different one)."""

from __future__ import annotations

import asyncio
import struct

import numpy as np
import pytest

from backends.engine import Engine, EngineOptions
from backends.image_data import ImageEmbedding, ImageError, area_downscale
from backends.image_header import declared_size
from backends.jobs import (
    ChoiceFinished,
    GenerationJob,
    JobFailed,
    LogprobOptions,
    PromptSpec,
    SamplingParams,
    TextDelta,
)
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path
from backends.vision import Projector
from tests.built import tiny_vlm
from tests.fixtures.make_tiny_vlm import IMAGE_TOKENS
from tests.images import noise, png
from tests.servers import engine_threads


@pytest.fixture(scope="module")
def vlm():
    _, projector_path = tiny_vlm()
    model = LlamaModel(default_model_path(), ModelOptions())
    projector = Projector(model, projector_path, threads=engine_threads())
    engine = Engine(model, EngineOptions(ctx_size=512, parallel=2, threads=engine_threads()))
    yield model, projector, engine
    engine.close()
    projector.close()
    model.close()


def _prompt(model: LlamaModel, image: ImageEmbedding) -> PromptSpec:
    head = model.tokenize("<|im_start|>user\n", add_special=False, parse_special=True)
    tail = model.tokenize("Describe the picture.<|im_end|>\n<|im_start|>assistant\n", add_special=False,
                          parse_special=True)
    return PromptSpec((*head, *image.tokens, *tail), 12, tuple(image.at(len(head))))


def _generate(engine: Engine, prompt: PromptSpec) -> tuple[str, ChoiceFinished]:
    async def run() -> tuple[str, ChoiceFinished]:
        handle = engine.submit(GenerationJob((prompt,), 1, SamplingParams(temperature=0)))
        text, finished = "", None
        async for event in handle.events():
            if isinstance(event, TextDelta):
                text += event.text
            elif isinstance(event, ChoiceFinished):
                finished = event
            elif isinstance(event, JobFailed):
                raise event.error
        assert finished is not None
        return text, finished
    return asyncio.run(run())


def _scores(engine: Engine, prompt: PromptSpec) -> list[tuple[int, float]]:
    """The greedy answer's tokens with the model's log-probability of each (the model's view, on
    this machine: what an image changes even where the greedy text stays the same)."""
    async def run() -> list[tuple[int, float]]:
        handle = engine.submit(GenerationJob((prompt,), 1, SamplingParams(temperature=0),
                                             logprobs=LogprobOptions(top=1)))
        scores = []
        async for event in handle.events():
            if isinstance(event, TextDelta) and event.logprob is not None:
                scores.append((event.logprob.token, event.logprob.logprob))
            elif isinstance(event, JobFailed):
                raise event.error
        return scores
    return asyncio.run(run())


def test_the_projector_encodes_an_image_into_the_text_model_s_width(vlm) -> None:
    model, projector, _ = vlm
    a = projector.encode(png(noise(1)))
    before, tile, after = a.parts  # the gemma3 projector frames an image with text, one chunk between
    assert tile.embeddings.shape == (IMAGE_TOKENS, 576) and tile.non_causal  # gemma3 reads images both ways
    assert model.detokenize(list(before)) == "<start_of_image>" and model.detokenize(list(after)) == "<end_of_image>"
    again, other = projector.encode(png(noise(1))), projector.encode(png(noise(2)))
    assert (again.tiles[0].embeddings == tile.embeddings).all() and again.tokens == a.tokens
    placeholders = [token for token in a.tokens if token < 0]
    assert len(placeholders) == IMAGE_TOKENS and a.tokens[len(before):][:IMAGE_TOKENS] == tuple(placeholders)
    assert set(other.tokens).isdisjoint(placeholders)
    assert abs(other.tiles[0].embeddings - tile.embeddings).max() > 0.01


def test_area_downscale_averages_the_pixels_each_output_pixel_covers() -> None:
    pixels = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    scaled = area_downscale(pixels, (2, 3))
    assert scaled.shape == (2, 3, 3)
    assert (scaled[0, 0] == pixels[:2, :2].reshape(-1, 3).mean(0).round()).all()
    assert (scaled[1, 2] == pixels[2:, 4:].reshape(-1, 3).mean(0).round()).all()


def test_headers_declare_the_size_before_decoding() -> None:
    assert declared_size(png(noise(1, 20))) == (20, 20)
    assert declared_size(b"GIF89a" + struct.pack("<HH", 7, 9) + b"\0" * 10) == (7, 9)
    assert declared_size(b"BM" + b"\0" * 16 + struct.pack("<ii", 5, -6)) == (5, 6)
    jpeg = b"\xff\xd8\xff\xe0" + struct.pack(">H", 4) + b"\0\0" + b"\xff\xc0" + struct.pack(">HBHH", 11, 8, 30, 40) + b"\0" * 6
    assert declared_size(jpeg) == (40, 30)
    assert declared_size(b"RIFF....WEBPVP8 ") is None


def test_a_decompression_bomb_is_refused_before_decoding(vlm) -> None:
    _, projector, _ = vlm
    header = png(noise(1, 8))
    bomb = header[:16] + struct.pack(">II", 100_000, 100_000) + header[24:]  # 10^10 pixels declared
    with pytest.raises(ImageError, match="declares 100000x100000 pixels"):
        projector.encode(bomb)


def test_webp_is_read_with_pillow(vlm) -> None:
    import io

    from PIL import Image

    _, projector, _ = vlm
    pixels = noise(7)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "WEBP", lossless=True)
    webp = projector.encode(buffer.getvalue())
    assert (webp.tiles[0].embeddings == projector.encode(png(pixels)).tiles[0].embeddings).all()  # the same pixels


def test_max_side_scales_the_image_down_first(vlm) -> None:
    _, projector, _ = vlm
    data = png(noise(6, 200))
    whole, small = projector.encode(data), projector.encode(data, max_side=10)
    assert whole.key != small.key and abs(whole.tiles[0].embeddings - small.tiles[0].embeddings).max() > 0.01
    unscaled = projector.encode(data, max_side=400)  # not larger than that: as sent
    assert (unscaled.tiles[0].embeddings == whole.tiles[0].embeddings).all()


@pytest.mark.parametrize("data", [b"", b"not an image", png(noise(3))[:60]])
def test_what_is_not_an_image_is_refused(vlm, data) -> None:
    _, projector, _ = vlm
    with pytest.raises(ImageError, match="not an image"):
        projector.encode(data)


def test_images_steer_the_answer_and_the_cache_knows_them(vlm) -> None:
    model, projector, engine = vlm
    a, b = projector.encode(png(noise(1))), projector.encode(png(noise(2)))
    text_a, first = _generate(engine, _prompt(model, a))
    assert first.prompt_tokens == len(_prompt(model, a).tokens) and first.completion_tokens > 0
    text_again, again = _generate(engine, _prompt(model, a))
    assert text_again == text_a
    head = len(model.tokenize("<|im_start|>user\n", add_special=False, parse_special=True))
    assert again.cached_tokens >= head + len(a.tokens)  # the image was reused, not decoded again
    _, other = _generate(engine, _prompt(model, b))
    assert other.cached_tokens <= head + len(b.parts[0])  # a different image: nothing of it is reused
    # the image steers the model: its scores differ (whether its 12 greedy tokens do is the model's)
    assert _scores(engine, _prompt(model, a)) != _scores(engine, _prompt(model, b))


def test_an_image_of_several_chunks_is_placed_and_decoded_chunk_by_chunk(vlm) -> None:
    """Projectors that tile large images (MiniCPM-V, SmolVLM) make an overview and slices, with
    text between them; here two chunks of the tiny projector's output stand in for them."""
    model, projector, engine = vlm
    a, b = projector.encode(png(noise(1))), projector.encode(png(noise(2)))
    separator = tuple(model.tokenize(" then ", add_special=False, parse_special=False))
    tiled = ImageEmbedding(99, (a.parts[0], a.tiles[0], separator, b.tiles[0], a.parts[-1]))
    placed = tiled.at(5)
    assert [image.start for image in placed] == [5 + len(a.parts[0]), 5 + len(a.parts[0]) + IMAGE_TOKENS + len(separator)]
    holes = [token for token in tiled.tokens if token < 0]
    assert len(holes) == len(set(holes)) == 2 * IMAGE_TOKENS  # each chunk has its own placeholders
    text, finished = _generate(engine, _prompt(model, tiled))
    assert text and finished.prompt_tokens == len(_prompt(model, tiled).tokens)


def test_a_prompt_ending_in_an_image_fails_alone(vlm) -> None:
    model, projector, engine = vlm
    image = projector.encode(png(noise(4)))
    head = model.tokenize("Look:", add_special=False, parse_special=False)
    with pytest.raises(ValueError, match="text must end the prompt"):
        _generate(engine, PromptSpec((*head, *image.tokens[:-len(image.parts[-1])]), 4, tuple(image.at(len(head)))))
    text, _ = _generate(engine, _prompt(model, image))  # the engine goes on
    assert text
