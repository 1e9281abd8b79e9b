"""Decoding a prompt's images: each image's embeddings (from backends/vision.py) go into the
generation context as one decode of embedding rows, at the slot's next positions.

The engine feeds at most one image a step, between its token decodes, so streams that are
generating keep going while a long prompt's images are read. An image that the projector wants
read with attention both ways (Gemma 3's) is decoded with causal attention off, so it must fit one
micro-batch whole. A cached prefix never ends inside an image: `image_boundary` moves the cut to
the image's start (backends/prefix.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np

from backends.jobs import ImageTile, PromptImage

MROPE_SECTIONS = 4  # positions per token under M-RoPE


def next_image(images: dict[int, PromptImage], fed: int, prompt_length: int) -> int:
    """Where the next image of a prompt starts, at `fed` or after (the prompt's end if none)."""
    return min((start for start in images if start >= fed), default=prompt_length)


class ImageDecodeError(ValueError):
    def __init__(self, batch_size: int):
        super().__init__(f"an image could not be decoded (an image read with attention both ways must fit a batch "
                         f"of {batch_size} tokens, and text must end the prompt)")


class ImagePrefill:
    """A batch of embedding rows for one context."""

    def __init__(self, ctx: llama_cpp.llama_context_p, model: llama_cpp.llama_model_p, max_rows: int):
        self._ctx = ctx
        self.n_embd = llama_cpp.llama_model_n_embd_inp(model)  # what embedding rows hold (Qwen3-VL: deepstack too)
        self.max_rows = max_rows
        # room for M-RoPE's 4 positions a row (section-major), which llama_batch_init sizes by rows
        self._batch = llama_cpp.llama_batch_init(max_rows * MROPE_SECTIONS, self.n_embd, 1)

    def close(self) -> None:
        llama_cpp.llama_batch_free(self._batch)

    def feed(self, sequences: Sequence[Any]) -> Any | None:
        """Decode the image the first of `sequences` (engine sequences, in slot order) waits on,
        if any; returns that sequence when its image could not be decoded."""
        for seq in sequences:
            image = seq.images.get(seq.fed) if seq.images and seq.prefilling else None
            if image is None:
                continue
            tile = image.tile
            rows = len(tile.embeddings)
            if seq.fed + rows >= len(seq.prompt) or self.decode(tile, seq.slot.id, seq.slot.next_position) != 0:
                return seq  # a prompt ends in text: its last token's logits start the answer
            seq.slot.placed(seq.prompt[seq.fed:seq.fed + rows], tile.n_pos or rows)
            seq.fed += rows
            return None
        return None

    def decode(self, tile: ImageTile, seq_id: int, first_position: int) -> int:
        """Decode `tile` into sequence `seq_id` from `first_position` on; llama_decode's status. A
        causal chunk longer than a batch (a Qwen2-Audio window is 750 rows) goes in batch-sized
        pieces, as llama.cpp's helper decodes it; a non-causal one must fit one batch."""
        rows = len(tile.embeddings)
        if (tile.non_causal and rows > self.max_rows) or tile.embeddings.shape[1] != self.n_embd:
            return -1
        source = np.ascontiguousarray(tile.embeddings, dtype=np.float32)
        if tile.sections is None:
            positions = np.arange(first_position, first_position + rows, dtype=np.int64)[None, :]
        else:
            base, slope = tile.sections  # section j of row i at [j, i]
            positions = base + slope * first_position
        if tile.non_causal:
            llama_cpp.llama_set_causal_attn(self._ctx, False)
        try:
            for start in range(0, rows, self.max_rows):
                stop = min(rows, start + self.max_rows)
                status = self._decode_rows(source[start:stop], positions[:, start:stop], seq_id)
                if status != 0:
                    return status
            return 0
        finally:
            if tile.non_causal:
                llama_cpp.llama_set_causal_attn(self._ctx, True)

    def _decode_rows(self, rows: np.ndarray, positions: np.ndarray, seq_id: int) -> int:
        """One decode of embedding `rows` at `positions` (sections x rows; section-major in the batch)."""
        batch, count = self._batch, len(rows)
        ctypes.memmove(batch.embd, rows.ctypes.data, rows.nbytes)
        for index, position in enumerate(positions.reshape(-1).tolist()):
            batch.pos[index] = position
        for row in range(count):
            batch.n_seq_id[row] = 1
            batch.seq_id[row][0] = seq_id
            batch.logits[row] = False
        batch.n_tokens = count
        return llama_cpp.llama_decode(self._ctx, batch)
