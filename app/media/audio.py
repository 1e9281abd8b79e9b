"""Sound in requests: the container formats libmtmd's own reader lacks (OGG/Opus, WebM, M4A/AAC...)
decoded with PyAV (FFmpeg's decoders, in its wheel) to mono float samples at the projector's rate;
libmtmd reads WAV, MP3 and FLAC itself (backends/vision.py).

PyAV is optional (`pip install 'fireside[audio]'`, the same package as the video extra); without it
those formats answer 400 saying so.
"""

from __future__ import annotations

import io

import numpy as np

from backends import image_data
from backends.audio_header import check_rate, sound_header
from backends.image_data import ImageError

# `input_audio.format` values a client may name (OpenAI's `wav` and `mp3`, and the containers we read)
AUDIO_FORMATS = frozenset({"wav", "mp3", "flac", "ogg", "opus", "webm", "m4a", "mp4", "mpeg", "mpga", "aac"})


def audio_samples(data: bytes, rate: int, max_seconds: float) -> np.ndarray:
    """The first audio stream of `data` as mono float32 samples at `rate` Hz; `ImageError` (the
    media error the projector raises) for data that holds none, is corrupt, or runs past
    `max_seconds`."""
    try:
        import av
    except ImportError:
        raise ImageError("reading this audio format needs PyAV, which this install lacks (pip install "
                         "'fireside[audio]'); WAV, MP3 and FLAC are read without it") from None
    limit = int(max_seconds * rate)
    pieces: list[np.ndarray] = []
    count = 0
    try:
        with av.open(io.BytesIO(data)) as container:
            if not container.streams.audio:
                raise ImageError("the data holds no audio stream")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
            for frame in container.decode(stream):
                check_rate(frame.sample_rate)  # resampled from 1 Hz, each sample would be 16,000
                for out in resampler.resample(frame):
                    pieces.append(out.to_ndarray().reshape(-1))
                    count += pieces[-1].size
                if count > limit:
                    raise ImageError(f"the audio is over {max_seconds:g} s long; at most {max_seconds:g} s are read")
            pieces.extend(out.to_ndarray().reshape(-1) for out in resampler.resample(None))
    except ImageError:
        raise
    except (av.error.FFmpegError, OSError, ValueError):
        raise ImageError("the data is not audio this server can read (WAV, MP3, FLAC, OGG/Opus, WebM, M4A...), "
                         "or it is corrupt or truncated") from None
    samples = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    if not samples.size:
        raise ImageError("the audio holds no samples")
    return samples


def check_length(data: bytes) -> None:
    """`ImageError` with the numbers for sound whose header says it plays past the limit, or is
    inconsistent (backends/audio_header.py), before anything is decoded."""
    seconds = audio_seconds(data)
    if seconds is not None:
        image_data.check_audio_seconds(seconds)


def audio_seconds(data: bytes) -> float | None:
    """How long the sound in `data` plays, from its container's header (no decoding); None when
    it does not say (or PyAV is missing and the data is neither WAV nor FLAC); `ImageError` for a
    WAV, MP3 or FLAC header that does not hold together."""
    header = sound_header(data)
    if header is not None and header.container != "mp3":  # an MP3's header gives only a bound
        return header.seconds
    try:
        import av
    except ImportError:
        return header.seconds if header is not None else None
    try:
        with av.open(io.BytesIO(data)) as container:
            if container.duration:
                return container.duration / 1e6  # microseconds
            stream = container.streams.audio[0] if container.streams.audio else None
            if stream is not None and stream.duration and stream.time_base:
                return float(stream.duration * stream.time_base)
    except (av.error.FFmpegError, OSError, ValueError):
        return None
    return None
