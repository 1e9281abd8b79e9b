"""Images as the text model reads them (what `backends/vision.py` makes of an image), and the
pixel work around decoding: scaling down, and decoding with Pillow what libmtmd cannot. Nothing
here needs libmtmd, so the server loads it only when a model has a projector."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from backends.jobs import ImageTile, PromptImage, image_placeholders

MAX_PIXELS = 64_000_000  # a decoded image larger than this is refused (a decompression bomb)
MAX_AUDIO_SECONDS = 1800  # longer sound is refused (60 of Whisper's 30 s windows)
# shorter sound is refused: libmtmd's preprocessors assert on a few samples (a one-sample WAV
# aborts the process in mtmd_tokenize), and no encoder hears anything in less
MIN_AUDIO_SECONDS = 0.1


class ImageError(ValueError):
    """An image (or sound) the projector cannot read, with the reason."""


def check_audio_seconds(seconds: float) -> None:
    """`ImageError` with the numbers for sound longer than `MAX_AUDIO_SECONDS` or shorter than
    `MIN_AUDIO_SECONDS`."""
    if seconds > MAX_AUDIO_SECONDS:
        raise ImageError(f"the audio is {seconds:.1f} s long; at most {MAX_AUDIO_SECONDS} s are read")
    if seconds < MIN_AUDIO_SECONDS:
        raise ImageError(f"the audio is {seconds * 1000:.1f} ms long; at least {MIN_AUDIO_SECONDS * 1000:.0f} ms "
                         "are read")


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
                placed.append(PromptImage(position, part))
                position += len(part.embeddings)
            else:
                position += len(part)
        return placed


def fit_within(pixels: np.ndarray, max_side: int | None) -> np.ndarray:
    """`pixels` scaled down (area averaging) to at most `max_side` on the long side; as they are
    when they already fit, or when there is no limit."""
    height, width = pixels.shape[:2]
    if max_side is None or max(width, height) <= max_side:
        return pixels
    scale = max_side / max(width, height)
    return area_downscale(pixels, (max(1, round(height * scale)), max(1, round(width * scale))))


def area_downscale(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """`pixels` (height x width x 3, uint8) scaled down to `size` (height, width): each output
    pixel the mean of the source pixels it covers."""
    height, width = pixels.shape[:2]
    rows = np.linspace(0, height, size[0] + 1).round().astype(np.intp)
    cols = np.linspace(0, width, size[1] + 1).round().astype(np.intp)
    sums = np.add.reduceat(np.add.reduceat(pixels, rows[:-1], axis=0, dtype=np.uint32), cols[:-1], axis=1)
    area = np.outer(np.diff(rows), np.diff(cols))[..., None]
    return (sums / area).round().astype(np.uint8)


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
