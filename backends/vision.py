"""A model's multimodal projector (`mmproj` GGUF) through llama.cpp's libmtmd: image bytes in,
the embeddings the text model decodes in their place out.

`Projector.encode` reads an image (PNG, JPEG, BMP, GIF's first frame with libmtmd's stb_image;
WebP and what else Pillow reads with Pillow), runs the projector's own preprocessing and vision encoder, and returns an `ImageEmbedding`:
one row per image token, the text model's width. Prompts carry an image's chunks as runs of
placeholder ids (`ImageEmbedding.tokens`): negative, so they never meet a vocabulary id, and derived
from the image's bytes, so the engine's prefix cache reuses an image it has already decoded and
never mistakes one image for another, framed by the text tokens the projector puts around each
image (Gemma 3's `<start_of_image>` and `<end_of_image>`; none for most). Encoding runs on the caller's thread (off the engine's),
one image at a time per projector: libmtmd's encoder is not thread-safe.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import threading
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import llama_cpp.mtmd_cpp as mtmd
import numpy as np

from backends.image_header import declared_size
from backends.jobs import IMAGE_OFFSET_BITS, PromptImage, image_placeholders
from backends.llama_model import LlamaModel, ModelLoadError

MARKER = b"<__fireside_media__>"  # the projector's media marker; only this module writes it
MAX_IMAGE_TOKENS = (1 << IMAGE_OFFSET_BITS) - 1
MAX_PIXELS = 64_000_000  # a decoded image larger than this is refused (a decompression bomb)


class ImageError(ValueError):
    """An image the projector cannot read, with the reason."""


@dataclass(frozen=True, slots=True, eq=False)
class ImageTile:
    """One image chunk of an image: `embeddings` (tokens x n_embd, float32)."""

    embeddings: np.ndarray
    non_causal: bool  # decoded with attention both ways within the chunk (Gemma 3's projector)


@dataclass(frozen=True, slots=True, eq=False)
class ImageEmbedding:
    """One image as the text model reads it: its image chunks (one, or an overview and slices
    for projectors that tile large images: MiniCPM-V, SmolVLM) and the text tokens the projector
    puts around and between them (Gemma 3's `<start_of_image>` ...), in order."""

    key: int  # from the image's bytes: equal keys, equal images
    parts: tuple[tuple[int, ...] | ImageTile, ...]

    @property
    def tiles(self) -> list[ImageTile]:
        return [part for part in self.parts if isinstance(part, ImageTile)]

    @property
    def tokens(self) -> tuple[int, ...]:
        """What a prompt holds for the image: its text tokens and each chunk's placeholders."""
        tokens: list[int] = []
        for index, part in enumerate(self.parts):
            tokens.extend(part if isinstance(part, tuple) else
                          image_placeholders(self.key << 8 | index, len(part.embeddings)))
        return tuple(tokens)

    def at(self, start: int) -> list[PromptImage]:
        """This image's chunks in a prompt whose `tokens` (see above) start at `start`."""
        placed, position = [], start
        for part in self.parts:
            if isinstance(part, ImageTile):
                placed.append(PromptImage(position, part.embeddings, part.non_causal))
                position += len(part.embeddings)
            else:
                position += len(part)
        return placed


class Projector:
    """An mmproj GGUF loaded beside its text model."""

    def __init__(self, model: LlamaModel, path: Path, *, threads: int):
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = False
        params.n_threads = threads
        params.print_timings = False
        params.warmup = False
        params.media_marker = MARKER
        self._marker = MARKER  # the params struct points at these bytes
        self._ctx = mtmd.mtmd_init_from_file(str(path).encode(), model.handle, params)
        if not self._ctx:
            raise ModelLoadError(f"cannot load the projector {path} for {model.path.name} (see the log above)")
        self.path = path
        self.vision = bool(mtmd.mtmd_support_vision(self._ctx))
        self.audio = bool(mtmd.mtmd_support_audio(self._ctx))
        self.n_embd = llama_cpp.llama_model_n_embd(model.handle)
        self.n_vocab = model.n_vocab
        if mtmd.mtmd_decode_use_mrope(self._ctx):
            self.close()
            raise ModelLoadError(f"{path.name} places image tokens in 2-D (M-RoPE, Qwen2-VL and later); "
                                 "this server does not decode such images yet")
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._ctx:
            mtmd.mtmd_free(self._ctx)
            self._ctx = None

    def encode(self, data: bytes, max_side: int | None = None) -> ImageEmbedding:
        """The image in `data` as embeddings, first scaled down to at most `max_side` pixels on its
        long side when it is larger; `ImageError` when it cannot be read."""
        if not self.vision:
            raise ImageError("this model's projector takes no images")
        declared = declared_size(data)
        if declared is not None and declared[0] * declared[1] > MAX_PIXELS:
            raise ImageError(f"the image declares {declared[0]}x{declared[1]} pixels; at most {MAX_PIXELS} are read")
        key = int.from_bytes(hashlib.blake2b(b"%d:" % (max_side or 0) + data, digest_size=6).digest(), "big")
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        with self._lock:
            bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self._ctx, buffer, len(data), False)
            if not bitmap:  # not a format libmtmd's stb_image reads (WebP, TIFF...): Pillow's turn
                bitmap = bitmap_of(pillow_pixels(data))
            chunks = mtmd.mtmd_input_chunks_init()
            try:
                width, height = mtmd.mtmd_bitmap_get_nx(bitmap), mtmd.mtmd_bitmap_get_ny(bitmap)
                if width * height > MAX_PIXELS:
                    raise ImageError(f"the image is {width}x{height} pixels; at most {MAX_PIXELS} pixels are read")
                if max_side is not None and max(width, height) > max_side:
                    bitmap = self._scaled(bitmap, width, height, max_side)
                return self._encode(chunks, bitmap, key)
            finally:
                mtmd.mtmd_input_chunks_free(chunks)
                mtmd.mtmd_bitmap_free(bitmap)

    def encode_pixels(self, pixels: np.ndarray) -> ImageEmbedding:
        """RGB pixels (height x width x 3, uint8; a video frame) as embeddings."""
        if not self.vision:
            raise ImageError("this model's projector takes no images")
        pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
        key = int.from_bytes(hashlib.blake2b(pixels.tobytes(), digest_size=6,
                                             person=b"%dx%d" % pixels.shape[:2]).digest(), "big")
        with self._lock:
            bitmap, chunks = bitmap_of(pixels), mtmd.mtmd_input_chunks_init()
            try:
                return self._encode(chunks, bitmap, key)
            finally:
                mtmd.mtmd_input_chunks_free(chunks)
                mtmd.mtmd_bitmap_free(bitmap)

    @staticmethod
    def _scaled(bitmap: mtmd.mtmd_bitmap_p, width: int, height: int, max_side: int) -> mtmd.mtmd_bitmap_p:
        """A new bitmap of `bitmap` scaled to `max_side` on its long side (the old one is freed)."""
        pixels = np.ctypeslib.as_array(mtmd.mtmd_bitmap_get_data(bitmap), shape=(height, width, 3))
        scale = max_side / max(width, height)
        size = (max(1, round(height * scale)), max(1, round(width * scale)))
        scaled = area_downscale(pixels, size)
        mtmd.mtmd_bitmap_free(bitmap)
        return bitmap_of(scaled)

    def _encode(self, chunks: mtmd.mtmd_input_chunks_p, bitmap: mtmd.mtmd_bitmap_p, key: int) -> ImageEmbedding:
        text = mtmd.mtmd_input_text(self._marker, len(self._marker), False, False)
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        status = mtmd.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), bitmaps, 1)
        if status != 0:
            raise ImageError(f"the projector could not preprocess the image (status {status})")
        parts: list[tuple[int, ...] | ImageTile] = []
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                count = ctypes.c_size_t()
                tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                ids = tuple(tokens[j] for j in range(count.value))
                if any(not 0 <= token < self.n_vocab for token in ids):
                    raise ImageError("the projector frames images with tokens this model's vocabulary lacks: it is "
                                     "not this model's projector")
                if ids:
                    parts.append(ids)
            else:
                parts.append(self._encode_chunk(chunk))
        if not any(isinstance(part, ImageTile) for part in parts) or len(parts) > 255:
            raise ImageError(f"the projector made {len(parts)} parts of the image, none or too many of them images")
        return ImageEmbedding(key, tuple(parts))

    def _encode_chunk(self, chunk: mtmd.mtmd_input_chunk_p) -> ImageTile:
        n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
        if mtmd.mtmd_input_chunk_get_type(chunk) != mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
            raise ImageError("the projector reads this data as audio, not as an image")
        if not 0 < n_tokens <= MAX_IMAGE_TOKENS:
            raise ImageError(f"the projector made {n_tokens} tokens of the image")
        if mtmd.mtmd_encode_chunk(self._ctx, chunk) != 0:
            raise ImageError("the projector failed to encode the image")
        output = mtmd.mtmd_get_output_embd(self._ctx)
        embeddings = np.ctypeslib.as_array(output, shape=(n_tokens * self.n_embd,)).reshape(n_tokens, self.n_embd)
        return ImageTile(embeddings.copy(), bool(mtmd.mtmd_decode_use_non_causal(self._ctx, chunk)))


def area_downscale(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """`pixels` (height x width x 3, uint8) scaled down to `size` (height, width): each output
    pixel the mean of the source pixels it covers."""
    height, width = pixels.shape[:2]
    rows = np.linspace(0, height, size[0] + 1).round().astype(np.intp)
    cols = np.linspace(0, width, size[1] + 1).round().astype(np.intp)
    sums = np.add.reduceat(np.add.reduceat(pixels, rows[:-1], axis=0, dtype=np.uint32), cols[:-1], axis=1)
    area = np.outer(np.diff(rows), np.diff(cols))[..., None]
    return (sums / area).round().astype(np.uint8)


def bitmap_of(pixels: np.ndarray) -> mtmd.mtmd_bitmap_p:
    """An mtmd bitmap of RGB pixels (height x width x 3, uint8)."""
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    buffer = (ctypes.c_uint8 * pixels.size).from_buffer_copy(pixels.tobytes())
    return mtmd.mtmd_bitmap_init(pixels.shape[1], pixels.shape[0], buffer)


def pillow_pixels(data: bytes) -> np.ndarray:
    """The RGB pixels of an image Pillow reads (WebP among others), its size checked before it is
    decoded; `ImageError` for anything else."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise ImageError(f"the image declares {width}x{height} pixels; at most {MAX_PIXELS} are read")
            return np.asarray(image.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as error:
        if isinstance(error, ImageError):
            raise
        raise ImageError("the data is not an image this server can read (PNG, JPEG, WebP, GIF, BMP...), or it is "
                         "corrupt or truncated") from None
