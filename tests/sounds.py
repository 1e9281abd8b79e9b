"""Test speech: a sentence spoken by espeak-ng (Debian's `espeak-ng`, a WAV at 22.05 kHz), and the
same samples in other containers encoded with PyAV (FLAC, MP3, OGG/Opus, WebM/Opus, M4A/AAC)."""

from __future__ import annotations

import io
import shutil
import subprocess
from functools import cache

import numpy as np
import pytest

# container -> (PyAV format name, codec, sample rate the codec takes)
CONTAINERS = {
    "flac": ("flac", "flac", 22050),
    "mp3": ("mp3", "libmp3lame", 22050),
    "ogg": ("ogg", "libopus", 48000),
    "webm": ("webm", "libopus", 48000),
    "m4a": ("ipod", "aac", 22050),
}


@cache
def speech(text: str = "Hello, this is a test of the audio input.") -> bytes:
    """`text` spoken by espeak-ng, as WAV bytes (skips the test where espeak-ng is missing)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    return subprocess.run(["espeak-ng", "--stdout", text], check=True, capture_output=True, timeout=60).stdout


@cache
def encoded(container: str, text: str = "Hello, this is a test of the audio input.") -> bytes:
    """The speech of `text` re-encoded in `container` (a key of CONTAINERS) with PyAV."""
    import av

    form, codec, rate = CONTAINERS[container]
    with av.open(io.BytesIO(speech(text))) as source:
        resampler = av.AudioResampler(format="s16" if codec != "aac" else "fltp", layout="mono", rate=rate)
        frames = [out for frame in source.decode(audio=0) for out in resampler.resample(frame)]
        frames += resampler.resample(None)
    target = io.BytesIO()
    with av.open(target, "w", format=form) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = "mono"
        if codec == "libopus":
            stream.format = "s16"
        for frame in frames:
            frame.pts = None
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return target.getvalue()


def tone_wav(seconds: float, rate: int = 16000, frequency: float = 440.0, *more: tuple[float, float]) -> bytes:
    """A sine tone (then each further (seconds, frequency) tone of `more`) as 16-bit mono WAV
    bytes, written by hand."""
    import struct

    pieces = [np.sin(2 * np.pi * hz * np.arange(int(length * rate)) / rate)
              for length, hz in ((seconds, frequency), *more)]
    samples = (np.concatenate(pieces) * 12000).astype("<i2").tobytes()
    header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(samples), b"WAVE", b"fmt ", 16, 1, 1, rate,
                         rate * 2, 2, 16, b"data", len(samples))
    return header + samples
