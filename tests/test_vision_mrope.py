"""M-RoPE images (Qwen2-VL and later) in the engine: a tiny `qwen2vl` text model and
`qwen2vl_merger` projector made by the tests (tests/fixtures/make_tiny_qwen2vl.py). Such an
image's tokens take 2-D positions and advance the position by max(nx, ny), not by their count.
The reference is llama.cpp's own path (libmtmd's `mtmd_helper_eval_chunks`, then greedy
decoding) in a context of its own: the engine must give the same tokens, on a cold cache and on
a prompt whose image it reuses from the prefix cache."""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp
import llama_cpp.mtmd_cpp as mtmd
import numpy as np
import pytest

from backends.jobs import (
    PromptSpec,
)
from backends.llama_model import LlamaModel
from backends.vision import bitmap_of
from tests.built import tiny_qwen2vl
from tests.images import noise
from tests.multimodal_runs import engine_greedy, projector_engine, top5

HEAD = "<|im_start|>user\n"
TAILS = ["Describe.<|im_end|>\n<|im_start|>assistant\n", "Describe it in detail.<|im_end|>\n<|im_start|>assistant\n"]
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def qwen2vl():
    with projector_engine(*tiny_qwen2vl()) as loaded:
        yield loaded


def _reference_text(model: LlamaModel, projector_path: Path, pixels: np.ndarray,
                    tail: str) -> tuple[str, list[tuple[int, float]]]:
    """Greedy text after libmtmd evaluates the prompt itself (positions and all), and the first
    token's 5 most likely (token, logprob)."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 512, 256, 256
    params.n_threads = params.n_threads_batch = 2
    ctx = llama_cpp.llama_init_from_model(model.handle, params)
    options = mtmd.mtmd_context_params_default()
    options.use_gpu, options.n_threads, options.warmup = False, 2, False
    mctx = mtmd.mtmd_init_from_file(str(projector_path).encode(), model.handle, options)
    chunks = mtmd.mtmd_input_chunks_init()
    bitmap = bitmap_of(pixels)
    try:
        prompt = (HEAD + mtmd.mtmd_default_marker().decode() + tail).encode()
        text = mtmd.mtmd_input_text(prompt, len(prompt), False, True)
        assert mtmd.mtmd_tokenize(mctx, chunks, ctypes.byref(text), (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) == 0
        n_past = llama_cpp.llama_pos(0)
        assert mtmd.mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, 256, True, ctypes.byref(n_past)) == 0
        tokens, position, top = [], n_past.value, []
        batch = llama_cpp.llama_batch_init(1, 0, 1)
        for _ in range(NEW_TOKENS):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(model.n_vocab,))
            if not top:
                top = top5(logits)
            token = int(np.argmax(logits))
            if model.is_eog(token):
                break
            tokens.append(token)
            batch.n_tokens, batch.token[0], batch.pos[0], batch.n_seq_id[0] = 1, token, position, 1
            batch.seq_id[0][0], batch.logits[0] = 0, True
            assert llama_cpp.llama_decode(ctx, batch) == 0
            position += 1
        llama_cpp.llama_batch_free(batch)
        return model.detokenize(tokens, special=True), top
    finally:
        mtmd.mtmd_bitmap_free(bitmap)
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_free(mctx)
        llama_cpp.llama_free(ctx)


def _prompt(model: LlamaModel, image, tail: str) -> PromptSpec:
    head = model.tokenize(HEAD, add_special=False, parse_special=True)
    rest = model.tokenize(tail, add_special=False, parse_special=True)
    return PromptSpec((*head, *image.tokens, *rest), NEW_TOKENS, tuple(image.at(len(head))))


def test_an_m_rope_image_takes_2d_positions(qwen2vl) -> None:
    _, projector, _, _ = qwen2vl
    assert projector.mrope
    image = projector.encode_pixels(noise(1, 100)[:70])  # 100 x 70: resized to 112 x 84, 4 x 3 cells
    (tile,) = image.tiles
    assert len(tile.embeddings) == 12 and tile.n_pos == 4
    base, slope = tile.sections
    assert base.shape == (4, 12) and (slope[:3] == 1).all() and (slope[3] == 0).all()  # t, y, x follow pos_0
    assert base[2].tolist() == [0, 1, 2, 3] * 3 and base[1].tolist() == [0] * 4 + [1] * 4 + [2] * 4


def test_the_engine_decodes_as_llama_cpp_does_cold_and_from_the_cache(qwen2vl) -> None:
    model, projector, engine, projector_path = qwen2vl
    pixels = noise(2, 112)[:84]
    image = projector.encode_pixels(pixels)
    for tail in TAILS:  # the second prompt reuses the first one's image from the prefix cache
        text, top, finished = engine_greedy(engine, _prompt(model, image, tail))
        reference_text, reference_top = _reference_text(model, projector_path, pixels, tail)
        assert text == reference_text
        # the same distribution to float precision (about 5e-7 apart); advancing the position by
        # the image's token count instead of its n_pos moves these log-probabilities by 1.5e-3
        assert [token for token, _ in top] == [token for token, _ in reference_top]
        assert max(abs(a - b) for (_, a), (_, b) in zip(top, reference_top, strict=True)) < 1e-4
    head = len(model.tokenize(HEAD, add_special=False, parse_special=True))
    assert finished.cached_tokens >= head + len(image.tokens)  # the image came from the cache


def test_a_qwen2_vl_style_model_is_served_over_http(qwen2vl) -> None:
    import base64

    import httpx

    from tests.conftest import POOL
    from tests.images import png

    text_path, projector_path = tiny_qwen2vl()
    server = POOL.get("--model", str(text_path), "--alias", "qvl", "--mmproj", str(projector_path),
                      "--ctx-size", "512", "--parallel", "1")
    url = "data:image/png;base64," + base64.b64encode(png(noise(3, 112))).decode()
    turn = [{"role": "user", "content": [{"type": "text", "text": "Look:"},
                                         {"type": "image_url", "image_url": {"url": url}}]}]
    first = httpx.post(f"{server.v1}/chat/completions", timeout=120,
                       json={"model": "qvl", "messages": turn, "max_tokens": 4, "temperature": 0}).json()
    answer = first["choices"][0]["message"]["content"]
    again = [*turn, {"role": "assistant", "content": answer}, {"role": "user", "content": "More?"}]
    second = httpx.post(f"{server.v1}/chat/completions", timeout=120,
                        json={"model": "qvl", "messages": again, "max_tokens": 4, "temperature": 0}).json()
    assert first["usage"]["prompt_tokens"] > 16  # a 112 x 112 image is 16 tokens (4 x 4 cells)
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"] - 1
    models = httpx.get(f"{server.v1}/models").json()["data"]
    assert "vision" in models[0]["capabilities"]
