"""Sound and images checked before any native decoder sees them (backends/audio_header.py).

libmtmd's helper (miniaudio) allocates what a header says before it decodes: the crafted WAV of
issue 50 (1 MB of data that says 1 Hz with a byte rate of 2^30) aborts the process with
`std::bad_alloc`; an MP3 whose Xing tag says 2^32 frames or a FLAC whose STREAMINFO says 2^36
samples does the same. None of those may reach it: each is a 400 within a second that names the
part, through the transcription door and the chat door, with the server's peak memory unchanged.
A seeded fuzz of WAV headers (rate, channels, bits, sizes, chunk order) is refused or, where the
header holds together, decoded by the real helper into exactly the samples the check counted.
The real files (espeak-ng's speech re-encoded with PyAV) pass with their true lengths. Images
stb_image reads without a size check first (PNM, PSD) go to Pillow, which checks.
"""

from __future__ import annotations

import base64
import ctypes
import io
import random
import struct
import time
from pathlib import Path

import httpx
import pytest

from app.media.audio import audio_samples, audio_seconds
from backends import image_data
from backends.audio_header import MAX_RATE, MIN_RATE, SoundHeader, sound_header
from backends.image_data import ImageError
from tests.built import tiny_audio
from tests.conftest import POOL
from tests.sounds import encoded, speech

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def wav(rate: int, byte_rate: int, data: bytes, *, channels: int = 1, bits: int = 16, block_align: int | None = None,
        tag: int = 1, chunks: tuple[bytes, ...] | None = None, data_size: int | None = None) -> bytes:
    """A WAV written by hand: a `fmt ` chunk with exactly these fields, then `data` (or `chunks`
    in the order given)."""
    block_align = channels * bits // 8 if block_align is None else block_align
    fmt = b"fmt " + struct.pack("<IHHIIHH", 16, tag, channels, rate, byte_rate & 0xFFFFFFFF, block_align & 0xFFFF,
                                bits)
    body = b"data" + struct.pack("<I", len(data) if data_size is None else data_size) + data
    parts = (fmt, body) if chunks is None else chunks
    payload = b"WAVE" + b"".join(parts)
    return b"RIFF" + struct.pack("<I", len(payload)) + payload


CRAFTED = wav(1, 1 << 30, bytes(1 << 20))  # issue 50's: bad_alloc and an abort 1.6 s after the request
COUSINS = {"1 MB": CRAFTED, "40 KB": wav(1, 1 << 30, bytes(40_000)), "3.2 KB": wav(1, 1 << 30, bytes(3_200))}


def _refused(data: bytes, words: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ImageError, match=words):
        sound_header(data)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("name", sorted(COUSINS))
def test_the_crafted_wav_and_its_cousins_are_refused_by_their_header(name):
    _refused(COUSINS[name], "sample rate of 1 Hz")


@pytest.mark.parametrize(("data", "words"), [
    (wav(16000, 16000, bytes(3200)), "16000 bytes a second; 16000 Hz of 2-byte frames are 32000"),
    (wav(16000, 32000, bytes(3200), block_align=4), "4 bytes a frame; 1 channels of 16 bits are 2"),
    (wav(16000, 32000, bytes(3200), channels=0, block_align=2), "0 channels"),
    (wav(16000, 32000, bytes(3200), bits=12, block_align=2), "12 bits a sample"),
    (wav(500_000, 1_000_000, bytes(3200)), "500000 Hz"),
    (wav(16000, 32000, bytes(3200), tag=0x55), "format tag is 0x0055"),
    (wav(16000, 32000, b"", chunks=(b"data" + struct.pack("<I", 4) + bytes(4),
                                    b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16))),
     "data chunk comes before its fmt chunk"),
    (wav(16000, 32000, b"", chunks=(b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16),) * 2),
     "two fmt chunks"),
    (wav(16000, 32000, b"", chunks=(b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16),)),
     "no data chunk"),
    (wav(16000, 32000, b""), "holds no samples"),
    (wav(8000, 8000, bytes(8000 * 1801), bits=8), r"1801.0 s long; at most 1800 s"),
    (wav(16000, 32000, bytes(3198)), r"99.9 ms long; at least 100 ms"),
])
def test_inconsistent_wav_headers_are_refused_naming_what_is_wrong(data, words):
    _refused(data, words)


def test_a_streamed_wav_is_read_to_the_end_of_its_bytes():
    """espeak-ng writes its WAV to a pipe: the data chunk says 0x7FFFF000 bytes; what counts is
    what the file holds (as dr_wav reads it)."""
    data = speech()
    assert struct.unpack_from("<I", data, 40)[0] > len(data)
    header = sound_header(data)
    assert header == SoundHeader("wav", 22050, 1, (len(data) - 44) // 2)
    assert audio_seconds(data) == pytest.approx((len(data) - 44) / 44100)


def _fuzzed_wavs(count: int, seed: int = 50) -> list[bytes]:
    """WAV headers with one to three fields changed at random: rates, channels, bits, byte rates,
    block sizes, data sizes, truncations, chunks moved, doubled or dropped."""
    chance = random.Random(seed)
    rates = [0, 1, 7999, 8000, 11025, 16000, 22050, 44100, 96000, 384000, 384001, 1 << 30, 0xFFFFFFFF]
    made = []
    for _ in range(count):
        rate, channels, bits = 16000, 1, 16
        fields: dict = {}
        body = bytes(chance.choice([0, 1, 3, 320, 3200, 32000]))
        for _ in range(chance.randint(1, 3)):
            change = chance.choice(["rate", "channels", "bits", "byte_rate", "block", "size", "order", "cut", "tag"])
            if change == "rate":
                rate = chance.choice(rates)
            elif change == "channels":
                channels = chance.choice([0, 1, 2, 6, 33, 255, 65535])
            elif change == "bits":
                bits = chance.choice([0, 1, 8, 12, 16, 24, 32, 64, 65535])
            elif change == "byte_rate":
                fields["byte_rate"] = chance.choice([0, 1, 2, 1 << 30, 0xFFFFFFFF])
            elif change == "block":
                fields["block_align"] = chance.choice([0, 1, 3, 65535])
            elif change == "size":
                fields["data_size"] = chance.choice([0, 1, len(body) + 1, 0x7FFFF000, 0xFFFFFFFF])
            elif change == "tag":
                fields["tag"] = chance.choice([0, 3, 6, 7, 0x55, 0xFFFE])
            elif change == "order":
                fmt = b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
                data = b"data" + struct.pack("<I", len(body)) + body
                junk = b"LIST" + struct.pack("<I", 5) + b"12345\0"
                fields["chunks"] = chance.choice([(data, fmt), (fmt, fmt, data), (junk, fmt, data), (fmt, junk),
                                                  (data,), (fmt, junk, data)])
        block = channels * bits // 8
        made_wav = wav(rate, fields.pop("byte_rate", rate * block), body, channels=channels, bits=bits,
                       **fields)
        if chance.random() < 0.15:
            made_wav = made_wav[:chance.randrange(12, len(made_wav))]
        made.append(made_wav)
    return made


FUZZED = _fuzzed_wavs(400)


def test_fuzzed_wav_headers_are_refused_or_hold_together():
    held = 0
    for data in FUZZED:
        started = time.perf_counter()
        try:
            header = sound_header(data)
        except ImageError:
            assert time.perf_counter() - started < 0.1
            continue
        assert header is not None and header.container == "wav"
        held += 1
        assert MIN_RATE <= header.rate <= MAX_RATE and header.frames > 0
        assert header.seconds <= image_data.MAX_AUDIO_SECONDS
        assert header.resampled(16000) <= image_data.MAX_AUDIO_SECONDS * 16000 + 1
    assert 10 <= held < len(FUZZED) // 2  # the fuzz reaches both sides


@pytest.fixture(scope="module")
def projector():
    from backends.llama_model import LlamaModel, ModelOptions
    from backends.registry import default_model_path
    from backends.vision import Projector

    model = LlamaModel(default_model_path(), ModelOptions())
    loaded = Projector(model, tiny_audio()[1], threads=1)
    yield loaded
    loaded.close()
    model.close()


def test_what_the_fuzz_lets_through_decodes_to_the_samples_counted(projector):
    """The helper (miniaudio) on every fuzzed header that passed: the samples it makes are the
    ones the check counted, at the projector's rate."""
    import llama_cpp.mtmd_cpp as mtmd

    rate = mtmd.mtmd_get_audio_sample_rate(projector._ctx)
    for data in FUZZED:
        try:
            header = sound_header(data)
        except ImageError:
            continue
        assert header is not None
        try:
            tokens = projector.count_audio(data, audio_samples)
        except ImageError as error:
            assert "samples" in str(error) or "preprocess" in str(error)
            continue
        assert tokens > 0
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(projector._ctx, buffer, len(data), False)
        assert bitmap, "a header that passed must be one the helper reads"
        assert abs(mtmd.mtmd_bitmap_get_nx(bitmap) - header.resampled(rate)) <= 2
        mtmd.mtmd_bitmap_free(bitmap)


def _xing_offset(data: bytes) -> int:
    at = data.index(b"Xing") if b"Xing" in data[:4096] else data.index(b"Info")
    assert data[at + 7] & 1  # the frame count is there
    return at + 8


def test_an_mp3_whose_xing_tag_says_more_frames_than_it_holds_is_refused():
    real = encoded("mp3")
    header = sound_header(real)
    assert header is not None and header.container == "mp3" and header.rate == 22050
    true_seconds = audio_seconds(real)
    assert true_seconds is not None and true_seconds <= header.seconds < true_seconds + 0.2
    at = _xing_offset(real)
    bomb = real[:at] + struct.pack(">I", 0xFFFFFFF0) + real[at + 4:]  # dr_mp3 would allocate 4.9e12 samples
    _refused(bomb, "Xing/Info tag says 4294967280 frames")
    no_frames = b"ID3\x04\x00\x00\x00\x00\x00\x10" + bytes(16) + b"\x00" * 400
    _refused(no_frames, "holds no frames")


def _streaminfo_total(data: bytes, total: int) -> bytes:
    info = int.from_bytes(data[18:26], "big")
    info = info & ~((1 << 36) - 1) | total
    return data[:18] + info.to_bytes(8, "big") + data[26:]


def test_a_flac_whose_streaminfo_says_more_samples_than_its_frames_hold_is_refused():
    real = encoded("flac")
    header = sound_header(real)
    assert header is not None and header.container == "flac" and header.rate == 22050
    assert header.seconds == pytest.approx(audio_seconds(speech()), abs=0.05)
    _refused(_streaminfo_total(real, (1 << 36) - 1), "says 68719476735 samples")  # 36 bits of them: bad_alloc
    _refused(_streaminfo_total(real, 22050 * 600), "its frames hold at most")  # 10 minutes of silence to encode
    unknown = _streaminfo_total(real, 0)  # the length is unknown: the counting decoder reads it
    assert sound_header(unknown) is None
    assert audio_samples(unknown, 16000, 60).size == pytest.approx(header.seconds * 16000, rel=0.01)
    _refused(real[:18] + b"\x00\x00\x01" + real[21:], "sample rate of 0 Hz")


def test_adpcm_wav_goes_to_the_counting_decoder():
    import av

    target = io.BytesIO()
    with av.open(io.BytesIO(speech())) as source, av.open(target, "w", format="wav") as out:
        stream = out.add_stream("adpcm_ms", rate=22050)
        stream.layout = "mono"
        for frame in source.decode(audio=0):
            frame.pts = None
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    adpcm = target.getvalue()
    assert sound_header(adpcm) is None
    # ADPCM fills its last block: a little more than the speech
    assert audio_samples(adpcm, 16000, 60).size == pytest.approx(audio_seconds(speech()) * 16000, rel=0.05)


# --- through the doors of a real server ---------------------------------------------------------

@pytest.fixture(scope="module")
def audio_server(model_path: Path):
    _, projector_path = tiny_audio()
    return POOL.get("--model", str(model_path), "--alias", "audio", "--mmproj", str(projector_path),
                    "--model", str(model_path), "--alias", "plain", "--ctx-size", "512", "--parallel", "2")


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


BOMBS = {**COUSINS, "mp3 Xing": None, "flac STREAMINFO": None}


def _bomb(name: str) -> tuple[bytes, str, str]:
    """(data, file name, chat format) of each crafted file."""
    if name == "mp3 Xing":
        real = encoded("mp3")
        at = _xing_offset(real)
        return real[:at] + struct.pack(">I", 0xFFFFFFF0) + real[at + 4:], "x.mp3", "mp3"
    if name == "flac STREAMINFO":
        return _streaminfo_total(encoded("flac"), (1 << 36) - 1), "x.flac", "flac"
    return COUSINS[name], "x.wav", "wav"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's peak memory from /proc")
def test_crafted_files_get_a_400_at_once_through_both_doors_and_take_no_memory(audio_server):
    pid = audio_server.process.pid
    ok = httpx.get(f"{audio_server.base_url}/health", timeout=30)
    assert ok.status_code == 200
    before = _peak_rss(pid)
    for name in BOMBS:
        data, filename, audio_format = _bomb(name)
        started = time.perf_counter()
        heard = httpx.post(f"{audio_server.v1}/audio/transcriptions", timeout=30,
                           files={"file": (filename, data)}, data={"model": "audio"})
        transcribed = time.perf_counter() - started
        assert heard.status_code == 400, (name, heard.text)
        assert heard.json()["error"]["param"] == "file", name
        started = time.perf_counter()
        asked = httpx.post(f"{audio_server.v1}/chat/completions", timeout=30, json={
            "model": "audio", "max_tokens": 2, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What was said?"},
                {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(),
                                                        "format": audio_format}}]}]})
        chatted = time.perf_counter() - started
        assert asked.status_code == 400, (name, asked.text)
        assert "messages[0].content[1]" in asked.json()["error"]["message"], name
        assert transcribed < 1.0 and chatted < 1.0, (name, transcribed, chatted)
    assert _peak_rss(pid) - before < 64 << 20  # the 40 KB WAV alone used to take 3 GB
    assert audio_server.process.poll() is None
    assert httpx.get(f"{audio_server.base_url}/health", timeout=30).status_code == 200


@pytest.mark.parametrize("data", [
    b"P6\n100000 100000\n255\n" + bytes(64),  # PNM: 30 GB of pixels by its header
    b"8BPS\x00\x01" + bytes(6) + struct.pack(">HIIHH", 3, 100000, 100000, 8, 3) + bytes(64),  # PSD
])
def test_images_whose_size_stb_image_would_not_check_go_to_pillow(data):
    from backends.llama_model import LlamaModel, ModelOptions
    from backends.registry import default_model_path
    from backends.vision import Projector
    from tests.built import tiny_vlm

    model = LlamaModel(default_model_path(), ModelOptions())
    vlm = Projector(model, tiny_vlm()[1], threads=1)
    try:
        started = time.perf_counter()
        with pytest.raises(ImageError, match="at most|not an image"):
            vlm.count(data)
        assert time.perf_counter() - started < 1.0
    finally:
        vlm.close()
        model.close()
