"""A model's multimodal projector (`mmproj` GGUF) through llama.cpp's libmtmd: image or audio bytes
in, the embeddings the text model decodes in their place out.

`Projector.encode` reads an image (PNG, JPEG, BMP, GIF's first frame with libmtmd's stb_image;
WebP and what else Pillow reads with Pillow), runs the projector's own preprocessing and vision
encoder, and returns an `ImageEmbedding` (backends/image_data.py): its chunks, one row per image
token at the text model's width, and the text tokens the projector puts around them (Gemma 3's
`<start_of_image>` ...). Prompts hold a chunk as a run of placeholder ids, negative (never a
vocabulary id) and derived from the image's bytes, so the engine's prefix cache reuses an image
it has decoded and never mistakes one image for another. For M-RoPE models (Qwen2-VL and later)
each chunk carries its tokens' 2-D positions as libmtmd lays them out. Encoding runs on the
caller's thread (off the engine's), one image at a time per projector: libmtmd's encoder is not
thread-safe.

Audio (projectors whose encoder hears: Ultravox, Qwen2-Audio, Voxtral...) takes the same road:
`encode_audio` reads WAV, MP3 and FLAC with libmtmd's own helper (miniaudio, resampled to the
projector's rate) once their headers pass backends/audio_header.py (the helper allocates what a
header says before it decodes), and anything else through the decoder it is given (PyAV,
app/media/audio.py, which counts samples as it decodes);
libmtmd's preprocessor cuts the sound into its encoder's windows (Whisper's 30 s), each one chunk
of the `ImageEmbedding`, in order, prefilled and cached exactly like an image's chunks.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import llama_cpp
import llama_cpp.mtmd_cpp as mtmd
import numpy as np

from backends import image_data
from backends.audio_header import sound_header
from backends.image_data import (
    MAX_PIXELS,
    ImageEmbedding,
    ImageError,
    fit_within,
    pillow_pixels,
)
from backends.image_header import declared_size
from backends.image_prefill import MROPE_SECTIONS
from backends.jobs import IMAGE_OFFSET_BITS, ImageTile
from backends.llama_model import LlamaModel, ModelLoadError

MARKER = b"<__fireside_media__>"  # the projector's media marker; only this module writes it
MAX_IMAGE_TOKENS = (1 << IMAGE_OFFSET_BITS) - 1
AudioDecoder = Callable[[bytes, int, float], np.ndarray]  # (data, rate, most seconds) -> mono float32 samples


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
        self.n_embd = llama_cpp.llama_model_n_embd_inp(model.handle)  # wider than n_embd with deepstack (Qwen3-VL)
        self.n_vocab = model.n_vocab
        self.mrope = bool(mtmd.mtmd_decode_use_mrope(self._ctx))  # 2-D image positions (Qwen2-VL and later)
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._ctx:
            mtmd.mtmd_free(self._ctx)
            self._ctx = None

    def encode(self, data: bytes, max_side: int | None = None) -> ImageEmbedding:
        """The image in `data` as embeddings, first scaled down to at most `max_side` pixels on its
        long side when it is larger; `ImageError` when it cannot be read."""
        key = int.from_bytes(hashlib.blake2b(b"%d:" % (max_side or 0) + data, digest_size=6).digest(), "big")
        return self._from_bytes(data, max_side, lambda parts: self._embedding(parts, key))

    def count(self, data: bytes, max_side: int | None = None) -> int:
        """How many prompt tokens `encode` makes of the image in `data` (its chunks and the text
        tokens around them), from the projector's preprocessing alone: the encoder does not run."""
        return self._from_bytes(data, max_side, _token_count)

    def encode_pixels(self, pixels: np.ndarray) -> ImageEmbedding:
        """RGB pixels (height x width x 3, uint8; a video frame) as embeddings."""
        pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
        key = int.from_bytes(hashlib.blake2b(pixels.tobytes(), digest_size=6,
                                             person=b"%dx%d" % pixels.shape[:2]).digest(), "big")
        return self._from_pixels(pixels, lambda parts: self._embedding(parts, key))

    def count_pixels(self, pixels: np.ndarray) -> int:
        """How many prompt tokens `encode_pixels` makes of these pixels (see `count`)."""
        return self._from_pixels(np.ascontiguousarray(pixels, dtype=np.uint8), _token_count)

    def encode_audio(self, data: bytes, decode: AudioDecoder) -> ImageEmbedding:
        """The sound in `data` as embeddings, one chunk per encoder window; `ImageError` when it
        cannot be read (`decode` reads what libmtmd's helper does not)."""
        key = int.from_bytes(hashlib.blake2b(data, digest_size=6, person=b"audio").digest(), "big")
        return self._from_audio(data, decode, lambda parts: self._embedding(parts, key))

    def count_audio(self, data: bytes, decode: AudioDecoder) -> int:
        """How many prompt tokens `encode_audio` makes of the sound in `data` (the encoder does not run)."""
        return self._from_audio(data, decode, _token_count)

    def _from_audio(self, data: bytes, decode: AudioDecoder, read: Callable[[list[_Part]], _T]) -> _T:
        if not self.audio:
            raise ImageError("this model's projector takes no audio")
        rate = mtmd.mtmd_get_audio_sample_rate(self._ctx)
        bitmap = None
        # the helper allocates what the header says before it decodes: only a checked header reaches it
        # (anything else would also go on to its image and video readers)
        if sound_header(data) is not None:
            buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
            # off the lock: for sound the helper reads only the projector's sample rate
            bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self._ctx, buffer, len(data), False)
        if not bitmap:  # not WAV, MP3 or FLAC (or not one we vouch for): the counting decoder's turn
            samples = np.ascontiguousarray(decode(data, rate, image_data.MAX_AUDIO_SECONDS), dtype=np.float32)
            if not samples.size:
                raise ImageError("the audio holds no samples")
            bitmap = mtmd.mtmd_bitmap_init_from_audio(samples.size, samples.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            if not mtmd.mtmd_bitmap_get_nx(bitmap):
                raise ImageError("the audio holds no samples")
            image_data.check_audio_seconds(mtmd.mtmd_bitmap_get_nx(bitmap) / rate)
            with self._lock:
                return read(self._parts(chunks, bitmap, audio=True))
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)

    def _from_bytes(self, data: bytes, max_side: int | None, read: Callable[[list[_Part]], _T]) -> _T:
        if not self.vision:
            raise ImageError("this model's projector takes no images")
        declared = declared_size(data)
        if declared is not None and declared[0] * declared[1] > MAX_PIXELS:
            raise ImageError(f"the image declares {declared[0]}x{declared[1]} pixels; at most {MAX_PIXELS} are read")
        with self._lock:
            bitmap = None
            if _stb_reads(data):  # the helper hands anything else to its audio reader, or to ffmpeg as video
                buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
                bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self._ctx, buffer, len(data), False)
            if not bitmap:  # not a format libmtmd's stb_image reads (WebP, TIFF...): Pillow's turn
                bitmap = bitmap_of(pillow_pixels(data))
            return self._tokenized(bitmap, max_side, read)

    def _from_pixels(self, pixels: np.ndarray, read: Callable[[list[_Part]], _T]) -> _T:
        if not self.vision:
            raise ImageError("this model's projector takes no images")
        with self._lock:
            return self._tokenized(bitmap_of(pixels), None, read)

    def _tokenized(self, bitmap: mtmd.mtmd_bitmap_p, max_side: int | None, read: Callable[[list[_Part]], _T]) -> _T:
        """`bitmap` (freed here) checked, scaled to `max_side`, preprocessed into its parts, and
        those parts read by `read`; under the lock."""
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            width, height = mtmd.mtmd_bitmap_get_nx(bitmap), mtmd.mtmd_bitmap_get_ny(bitmap)
            if width * height > MAX_PIXELS:
                raise ImageError(f"the image is {width}x{height} pixels; at most {MAX_PIXELS} pixels are read")
            if max_side is not None and max(width, height) > max_side:
                pixels = np.ctypeslib.as_array(mtmd.mtmd_bitmap_get_data(bitmap), shape=(height, width, 3))
                scaled = fit_within(pixels, max_side)
                mtmd.mtmd_bitmap_free(bitmap)
                bitmap = bitmap_of(scaled)
            return read(self._parts(chunks, bitmap))
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)

    def _parts(self, chunks: mtmd.mtmd_input_chunks_p, bitmap: mtmd.mtmd_bitmap_p, audio: bool = False) -> list[_Part]:
        """The image (or sound) preprocessed (`mtmd_tokenize`: no encoder run) into its text tokens
        and its media chunks, in order, each checked."""
        noun = "audio" if audio else "image"
        media_chunk = mtmd.MTMD_INPUT_CHUNK_TYPE_AUDIO if audio else mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE
        text = mtmd.mtmd_input_text(self._marker, len(self._marker), False, False)
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        status = mtmd.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), bitmaps, 1)
        if status != 0:
            raise ImageError(f"the projector could not preprocess the {noun} (status {status})")
        parts: list[_Part] = []
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                count = ctypes.c_size_t()
                tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                ids = tuple(tokens[j] for j in range(count.value))
                if any(not 0 <= token < self.n_vocab for token in ids):
                    raise ImageError(f"the projector frames {noun} with tokens this model's vocabulary lacks: it is "
                                     "not this model's projector")
                if ids:
                    parts.append(ids)
                continue
            if mtmd.mtmd_input_chunk_get_type(chunk) != media_chunk:
                raise ImageError(f"the projector did not read this data as {'audio' if audio else 'an image'}")
            n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
            if not 0 < n_tokens <= MAX_IMAGE_TOKENS:
                raise ImageError(f"the projector made {n_tokens} tokens of the {noun}")
            parts.append(_Chunk(chunk, n_tokens))
        if not any(isinstance(part, _Chunk) for part in parts) or len(parts) > 255:
            raise ImageError(f"the projector made {len(parts)} parts of the {noun}, none or too many of them {noun}")
        return parts

    def _embedding(self, parts: list[_Part], key: int) -> ImageEmbedding:
        return ImageEmbedding(key, tuple(part if isinstance(part, tuple) else self._encode_chunk(part)
                                         for part in parts))

    def _encode_chunk(self, part: _Chunk) -> ImageTile:
        chunk, n_tokens = part.chunk, part.n_tokens
        if mtmd.mtmd_encode_chunk(self._ctx, chunk) != 0:
            raise ImageError("the projector failed to encode the media")
        output = mtmd.mtmd_get_output_embd(self._ctx)
        embeddings = np.ctypeslib.as_array(output, shape=(n_tokens * self.n_embd,)).reshape(n_tokens, self.n_embd)
        non_causal = bool(mtmd.mtmd_decode_use_non_causal(self._ctx, chunk))
        if not self.mrope:
            return ImageTile(embeddings.copy(), non_causal)
        if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_AUDIO:
            sections = _mrope_1d(n_tokens)
        else:
            sections = _mrope_sections(chunk, n_tokens)
        return ImageTile(embeddings.copy(), non_causal, sections, mtmd.mtmd_input_chunk_get_n_pos(chunk))


# stb_image also reads PSD, HDR and PNM, but their sizes are not checked before it allocates
# (backends/image_header.py): Pillow, which checks, reads those
STB_MAGIC = (b"\x89PNG", b"\xff\xd8", b"GIF8", b"BM")


def _stb_reads(data: bytes) -> bool:
    """Whether `data` starts as an image libmtmd's stb_image may read: one whose declared size
    `declared_size` checks first (PNG, JPEG, GIF, BMP)."""
    return data.startswith(STB_MAGIC)


@dataclass(frozen=True)
class _Chunk:
    """A media chunk of the preprocessed image or sound (valid until its chunk list is freed)."""

    chunk: mtmd.mtmd_input_chunk_p
    n_tokens: int


_Part = tuple[int, ...] | _Chunk
_T = TypeVar("_T")


def _token_count(parts: list[_Part]) -> int:
    """The prompt tokens an image's parts take: its text tokens and one placeholder per embedding."""
    return sum(len(part) if isinstance(part, tuple) else part.n_tokens for part in parts)


def bitmap_of(pixels: np.ndarray) -> mtmd.mtmd_bitmap_p:
    """An mtmd bitmap of RGB pixels (height x width x 3, uint8)."""
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    buffer = (ctypes.c_uint8 * pixels.size).from_buffer_copy(pixels.tobytes())
    return mtmd.mtmd_bitmap_init(pixels.shape[1], pixels.shape[0], buffer)


def _mrope_sections(chunk: mtmd.mtmd_input_chunk_p, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Each token's 4 M-RoPE positions (t, y, x, z, as llama.cpp's helper lays them out) as
    base + slope * the image's first position: libmtmd's layout read at first positions 0 and 1."""
    image = mtmd.mtmd_input_chunk_get_tokens_image(chunk)
    at = [[mtmd.mtmd_image_tokens_get_decoder_pos(image, pos_0, i) for i in range(n_tokens)] for pos_0 in (0, 1)]
    table = np.array([[[p.t, p.y, p.x, p.z] for p in row] for row in at], dtype=np.int64)  # 2 x tokens x 4
    base = table[0].T
    return np.ascontiguousarray(base), np.ascontiguousarray(table[1].T - base)


def _mrope_1d(n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """M-RoPE positions of an audio chunk: its tokens in a line, the same in all 4 sections (as
    llama.cpp's helper lays them out, `set_position_mrope_1d`)."""
    base = np.tile(np.arange(n_tokens, dtype=np.int64), (MROPE_SECTIONS, 1))
    return base, np.ones_like(base)
