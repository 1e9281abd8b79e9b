"""llama.cpp's own path for a prompt that holds a sound, the reference the audio tests hold the
engine and the server to: libmtmd's helper reads the file (`mtmd_helper_bitmap_init_from_buf`),
`mtmd_helper_eval_chunks` decodes its chunks in a context of its own between the prompt's text
tokens, and greedy decoding follows."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import llama_cpp
import llama_cpp.mtmd_cpp as mtmd
import numpy as np

from backends.llama_model import LlamaModel
from tests.multimodal_runs import top5


def reference_answer(model: LlamaModel, projector_path: Path, head: Sequence[int], data: bytes, tail: Sequence[int],
                     new_tokens: int, n_batch: int = 256) -> tuple[str, list[tuple[int, float]]]:
    """The greedy text (at most `new_tokens`) of `head`, the sound in `data`, then `tail`, and the
    first token's 5 most likely (token, logprob)."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 512, n_batch, n_batch
    params.n_threads = params.n_threads_batch = 2
    ctx = llama_cpp.llama_init_from_model(model.handle, params)
    options = mtmd.mtmd_context_params_default()
    options.use_gpu, options.n_threads, options.warmup = False, 2, False
    mctx = mtmd.mtmd_init_from_file(str(projector_path).encode(), model.handle, options)
    chunks = mtmd.mtmd_input_chunks_init()
    buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(mctx, buffer, len(data), False)
    batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
    try:
        assert bitmap and mtmd.mtmd_bitmap_is_audio(bitmap)
        marker = mtmd.mtmd_default_marker()
        text = mtmd.mtmd_input_text(marker, len(marker), False, True)
        assert mtmd.mtmd_tokenize(mctx, chunks, ctypes.byref(text), (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) == 0
        _decode(ctx, batch, head, 0, n_batch)
        n_past = llama_cpp.llama_pos(0)
        assert mtmd.mtmd_helper_eval_chunks(mctx, ctx, chunks, len(head), 0, n_batch, False, ctypes.byref(n_past)) == 0
        position = n_past.value
        _decode(ctx, batch, tail, position, n_batch)
        position += len(tail)
        tokens, top = [], []
        for _ in range(new_tokens):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(model.n_vocab,))
            if not top:
                top = top5(logits)
            token = int(np.argmax(logits))
            if model.is_eog(token):
                break
            tokens.append(token)
            _decode(ctx, batch, [token], position, n_batch)
            position += 1
        return model.detokenize(tokens, special=True), top
    finally:
        llama_cpp.llama_batch_free(batch)
        mtmd.mtmd_bitmap_free(bitmap)
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_free(mctx)
        llama_cpp.llama_free(ctx)


def _decode(ctx: llama_cpp.llama_context_p, batch: llama_cpp.llama_batch, tokens: Sequence[int], first: int,
            n_batch: int) -> None:
    """`tokens` decoded from position `first` on, in batches of `n_batch`, logits for the last alone."""
    for start in range(0, len(tokens), n_batch):
        piece = tokens[start:start + n_batch]
        for i, token in enumerate(piece):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, first + start + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, start + i == len(tokens) - 1
        batch.n_tokens = len(piece)
        assert llama_cpp.llama_decode(ctx, batch) == 0
