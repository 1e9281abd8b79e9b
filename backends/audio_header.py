"""What a sound's header says, checked before any native decoder sees the bytes.

libmtmd's helper (miniaudio's dr_wav, dr_mp3 and dr_flac) sizes its output from the header alone:
it allocates `frames x projector rate / file rate` floats and only then decodes. A 1 MB WAV that
says 1 Hz asks it for 8 billion samples (`std::bad_alloc`, the process aborts); an MP3 whose Xing
tag says 2^32 frames, or a FLAC whose STREAMINFO says 2^36 samples, does the same in a few hundred
bytes. So each of the three formats the helper reads is checked here first, and handed to it only
when its header is consistent and the samples it would make are bounded:

- WAV: `fmt ` before `data`, one of each; PCM (8/16/24/32-bit), float (32/64-bit), A-law or mu-law
  (plain or WAVE_FORMAT_EXTENSIBLE); `block_align` = channels x bytes per sample and `byte_rate` =
  rate x `block_align`; the length counted from the bytes the `data` chunk really has (a streamed
  WAV, espeak-ng's, says 0x7FFFF000 there: dr_wav reads to the end of the file, and so do we).
- MP3: an upper bound on the frames in the file (every position that starts a valid frame header,
  whichever chain the decoder follows), at the rate of the first frame the decoder syncs on; a
  Xing/Info tag's frame count (which dr_mp3 trusts for its allocation) may not exceed it.
- FLAC: STREAMINFO's rate, channels, bits and total samples; the total may not exceed the samples
  of the frames the file holds (frame headers with a valid CRC-8): a 100-byte FLAC that says it
  plays 30 minutes would otherwise cost 30 minutes of encoder time on silence.

Rates are miniaudio's standard range (8 to 384 kHz). Sound the helper does not read, or a variant
this module does not vouch for (ADPCM WAV, a FLAC that does not say its length), is `None`: the
bounded streaming decoder (PyAV, app/media/audio.py) reads it instead, counting samples as it goes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from backends.image_data import MAX_AUDIO_SECONDS, ImageError, check_audio_seconds

MIN_RATE, MAX_RATE = 8_000, 384_000  # miniaudio's ma_standard_sample_rate_min / _max
MAX_CHANNELS = 32


@dataclass(frozen=True)
class SoundHeader:
    """A sound libmtmd's helper may decode: its container, rate, channels and (at most) frames."""

    container: str  # "wav", "mp3" or "flac"
    rate: int  # Hz, as the decoder will read it
    channels: int
    frames: int  # samples per channel the decoder makes at `rate` (an upper bound for MP3)

    @property
    def seconds(self) -> float:
        return self.frames / self.rate

    def resampled(self, rate: int) -> int:
        """How many mono samples the helper allocates when it resamples to `rate`."""
        return -(-self.frames * rate // self.rate)


def sound_header(data: bytes) -> SoundHeader | None:
    """The header of a WAV, MP3 or FLAC that libmtmd's helper may decode, its length checked
    against `MAX_AUDIO_SECONDS`; None for anything the helper should not see (other formats, and
    the variants named in the module's text); `ImageError` naming what is wrong for a header that
    is inconsistent, out of range, or says more than the file holds."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        header = _wav(data)
    elif data[:4] == b"fLaC":
        header = _flac(data)
    elif data[:3] == b"ID3" or len(data) >= 2 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:
        header = _mp3(data)
    else:
        return None
    if header is not None:
        if header.frames <= 0:
            raise ImageError(f"the {header.container.upper()} holds no samples")
        if header.container != "mp3":
            check_audio_seconds(header.seconds)
        elif header.seconds > MAX_AUDIO_SECONDS:  # an MP3's count is a bound: it may be shorter
            raise ImageError(f"the MP3's frames may play up to {header.seconds:.1f} s; at most {MAX_AUDIO_SECONDS} s "
                             "are read")
    return header


def check_rate(rate: int, what: str = "audio") -> None:
    """`ImageError` for a sample rate outside what the decoders are asked to resample."""
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ImageError(f"the {what} says a sample rate of {rate} Hz; {MIN_RATE} to {MAX_RATE} Hz are read")


# WAV ------------------------------------------------------------------------------------------

_PCM, _FLOAT, _ALAW, _MULAW, _EXTENSIBLE = 0x1, 0x3, 0x6, 0x7, 0xFFFE
_ADPCM = frozenset({0x2, 0x11})  # dr_wav decodes these, sized from a `fact` chunk it trusts: not vouched for
_BITS = {_PCM: (8, 16, 24, 32), _FLOAT: (32, 64), _ALAW: (8,), _MULAW: (8,)}


def _wav(data: bytes) -> SoundHeader | None:
    offset, fmt = 12, None
    while offset + 8 <= len(data):
        kind, size = data[offset:offset + 4], struct.unpack_from("<I", data, offset + 4)[0]
        body = offset + 8
        if kind == b"fmt ":
            if fmt is not None:
                raise ImageError("the WAV has two fmt chunks")
            fmt = _wav_format(data[body:body + min(size, len(data) - body)])
        elif kind == b"data":
            if fmt is None:
                raise ImageError("the WAV's data chunk comes before its fmt chunk (the header must say how to "
                                 "read the samples before them)")
            if fmt is _NOT_VOUCHED:
                return None
            tag, channels, rate, block_align = fmt
            present = min(size, len(data) - body)  # a streamed WAV says more than it has: read what it has
            return SoundHeader("wav", rate, channels, present // block_align)
        offset = body + size + (size & 1)
    if fmt is None:
        raise ImageError("the WAV has no fmt chunk")
    raise ImageError("the WAV has no data chunk")


_NOT_VOUCHED = (0, 0, 0, 0)


def _wav_format(chunk: bytes) -> tuple[int, int, int, int]:
    """(tag, channels, rate, block_align) of a `fmt ` chunk, each checked against the others."""
    if len(chunk) < 16:
        raise ImageError(f"the WAV's fmt chunk has {len(chunk)} bytes; it needs 16")
    tag, channels, rate, byte_rate, block_align, bits = struct.unpack_from("<HHIIHH", chunk)
    if tag == _EXTENSIBLE:
        if len(chunk) < 40 or struct.unpack_from("<H", chunk, 16)[0] != 22:
            raise ImageError("the WAV says WAVE_FORMAT_EXTENSIBLE but its fmt chunk lacks the extension")
        tag = struct.unpack_from("<H", chunk, 24)[0]  # the sub-format GUID's first two bytes
    if tag in _ADPCM:
        return _NOT_VOUCHED
    if tag not in _BITS:
        raise ImageError(f"the WAV's format tag is 0x{tag:04x}; PCM, float, A-law and mu-law WAV are read")
    if not 1 <= channels <= MAX_CHANNELS:
        raise ImageError(f"the WAV says {channels} channels; 1 to {MAX_CHANNELS} are read")
    if bits not in _BITS[tag]:
        raise ImageError(f"the WAV says {bits} bits a sample, which its format does not have "
                         f"({', '.join(map(str, _BITS[tag]))} are)")
    check_rate(rate, "WAV")
    if block_align != channels * bits // 8:
        raise ImageError(f"the WAV says {block_align} bytes a frame; {channels} channels of {bits} bits are "
                         f"{channels * bits // 8}")
    if byte_rate != rate * block_align:
        raise ImageError(f"the WAV says {byte_rate} bytes a second; {rate} Hz of {block_align}-byte frames are "
                         f"{rate * block_align}")
    return tag, channels, rate, block_align


# MP3 ------------------------------------------------------------------------------------------

_MP3_KBPS = {  # (MPEG-1?, layer) -> kbit/s by bitrate index 1..14
    (True, 1): (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}  # by version bits
_SYNC_MATCHES = 10  # minimp3 syncs on a frame followed by this many matching ones (or the end of the data)


def _mp3(data: bytes) -> SoundHeader:
    start = _id3_end(data)
    arr = np.frombuffer(data, dtype=np.uint8)
    if len(arr) - start < 4:
        raise ImageError("the MP3 holds no frames")
    b0, b1, b2 = arr[start:-3], arr[start + 1:-2], arr[start + 2:-1]
    version, layer = (b1 >> 3) & 3, (b1 >> 1) & 3
    valid = ((b0 == 0xFF) & ((b1 & 0xE0) == 0xE0) & (version != 1) & (layer != 0)
             & ((b2 >> 4) != 15) & (((b2 >> 2) & 3) != 3))
    positions = np.flatnonzero(valid) + start
    if not positions.size:
        raise ImageError("the MP3 holds no frames")
    v, lay = (arr[positions + 1] >> 3) & 3, 4 - ((arr[positions + 1] >> 1) & 3)  # layer 1, 2 or 3
    per_frame = np.where(lay == 1, 384, np.where((lay == 3) & (v != 3), 576, 1152))
    bound = int(per_frame.sum())  # every frame the decoder makes starts at one of these positions
    first = _mp3_sync(data, positions)
    rate = _mp3_rate(data, first)
    xing = _xing_frames(data, first)
    if xing is not None:
        declared = xing * int(per_frame[np.searchsorted(positions, first)])
        if declared > bound:
            raise ImageError(f"the MP3's Xing/Info tag says {xing} frames ({declared} samples); the file holds "
                             f"at most {bound} samples")
        bound = declared
    channels = 1 if data[first + 3] & 0xC0 == 0xC0 else 2
    return SoundHeader("mp3", rate, channels, bound)


def _id3_end(data: bytes) -> int:
    """Where an ID3v2 tag at the start ends (its size is 4 bytes of 7 bits), else 0."""
    if data[:3] != b"ID3" or len(data) < 10:
        return 0
    size = 0
    for byte in data[6:10]:
        size = size << 7 | (byte & 0x7F)
    return 10 + size + (10 if data[5] & 0x10 else 0)


def _mp3_header(data: bytes, at: int) -> tuple[int, int, tuple[int, int, bool]] | None:
    """(frame bytes or 0 for free format, rate, what must match in the next frame) of a valid
    frame header at `at`, else None."""
    if at + 4 > len(data) or data[at] != 0xFF or data[at + 1] & 0xE0 != 0xE0:
        return None
    version, layer = (data[at + 1] >> 3) & 3, 4 - ((data[at + 1] >> 1) & 3)
    index, rate_index, padding = data[at + 2] >> 4, (data[at + 2] >> 2) & 3, (data[at + 2] >> 1) & 1
    if version == 1 or layer == 4 or index == 15 or rate_index == 3:
        return None
    rate = _MP3_RATES[version][rate_index]
    key = (data[at + 1] & 0xFE, data[at + 2] & 0x0C, index == 0)  # what minimp3 compares across frames
    if index == 0:
        return 0, rate, key
    bits = _MP3_KBPS[(version == 3, layer)][index - 1] * 1000
    if layer == 1:
        return (12 * bits // rate + padding) * 4, rate, key
    size = (72 if layer == 3 and version != 3 else 144) * bits // rate + padding
    return size, rate, key


def _mp3_sync(data: bytes, positions: np.ndarray) -> int:
    """The first frame the decoder syncs on: a valid header followed by matching frames (the same
    version, layer and rate) up to `_SYNC_MATCHES` or the end; the first candidate when none is."""
    for at in positions[:4096].tolist():
        header = _mp3_header(data, at)
        if header is None:
            continue
        size, _, key = header
        if not size:
            continue
        here, matched = at + size, 0
        while matched < _SYNC_MATCHES and here < len(data):
            follower = _mp3_header(data, here)
            if follower is None or follower[2] != key or not follower[0]:
                break
            here, matched = here + follower[0], matched + 1
        if matched == _SYNC_MATCHES or here >= len(data):
            return at
    return int(positions[0])


def _mp3_rate(data: bytes, at: int) -> int:
    header = _mp3_header(data, at)
    assert header is not None
    return header[1]


def _xing_frames(data: bytes, at: int) -> int | None:
    """The frame count of a Xing/Info tag in the frame at `at` (where dr_mp3 reads it: after the
    header, the CRC and the layer III side information), None when there is none."""
    mpeg1, mono, crc = data[at + 1] & 0x08, data[at + 3] & 0xC0 == 0xC0, not data[at + 1] & 1
    side = (17 if mono else 32) if mpeg1 else (9 if mono else 17)
    tag = at + 4 + (2 if crc else 0) + side
    if data[tag:tag + 4] not in (b"Xing", b"Info") or tag + 12 > len(data) or not data[tag + 7] & 1:
        return None
    return struct.unpack_from(">I", data, tag + 8)[0]


# FLAC -----------------------------------------------------------------------------------------

_FLAC_BLOCK = {1: 192, **{n: 576 << (n - 2) for n in range(2, 6)}, **{n: 256 << (n - 8) for n in range(8, 16)}}


def _flac(data: bytes) -> SoundHeader | None:
    if len(data) < 8 + 34 or data[4] & 0x7F != 0 or int.from_bytes(data[5:8], "big") < 34:
        raise ImageError("the FLAC does not start with its STREAMINFO block")
    info = int.from_bytes(data[18:26], "big")
    rate, channels, bits, total = info >> 44, (info >> 41 & 7) + 1, (info >> 36 & 31) + 1, info & (1 << 36) - 1
    check_rate(rate, "FLAC")
    if bits < 4:
        raise ImageError(f"the FLAC says {bits} bits a sample; 4 to 32 are read")
    if not total:
        return None  # the length is unknown (a FLAC written to a pipe): the counting decoder's turn
    offset = 4
    while offset + 4 <= len(data):  # the metadata blocks, to where the frames start
        last, size = data[offset] & 0x80, int.from_bytes(data[offset + 1:offset + 4], "big")
        offset += 4 + size
        if last:
            break
    held = _flac_frame_samples(data, offset)
    if total > held:
        raise ImageError(f"the FLAC says {total} samples; its frames hold at most {held}")
    return SoundHeader("flac", rate, channels, total)


def _flac_frame_samples(data: bytes, start: int) -> int:
    """An upper bound on the samples of the frames from `start`: the block sizes of every frame
    header (sync code, valid fields and CRC-8) found there."""
    arr = np.frombuffer(data, dtype=np.uint8)
    if len(arr) - start < 6:
        return 0
    candidates = np.flatnonzero((arr[start:-1] == 0xFF) & ((arr[start + 1:] & 0xFE) == 0xF8)) + start
    return sum(_flac_frame_block(data, at) for at in candidates.tolist())


def _flac_frame_block(data: bytes, at: int) -> int:
    """The block size of a valid FLAC frame header at `at`, else 0."""
    if at + 6 > len(data):
        return 0
    block_code, rate_code = data[at + 2] >> 4, data[at + 2] & 15
    channel_code, size_code = data[at + 3] >> 4, (data[at + 3] >> 1) & 7
    if block_code == 0 or rate_code == 15 or channel_code > 10 or size_code == 3 or data[at + 3] & 1:
        return 0
    here = at + 4
    first = data[here]  # the frame or sample number, UTF-8 coded (1 to 7 bytes)
    extra = next((n for n, mask in enumerate((0x80, 0xE0, 0xF0, 0xF8, 0xFC, 0xFE, 0xFF)) if first & mask == (
        (mask << 1) & 0xFF)), None)
    if extra is None:
        return 0
    here += 1 + extra
    block = _FLAC_BLOCK.get(block_code, 0)
    if block_code in (6, 7):
        width = block_code - 5
        if here + width > len(data):
            return 0
        block = int.from_bytes(data[here:here + width], "big") + 1
        here += width
    here += {12: 1, 13: 2, 14: 2}.get(rate_code, 0)
    if here >= len(data) or _crc8(data[at:here]) != data[here]:
        return 0
    return block


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = _CRC8[crc ^ byte]
    return crc


def _crc8_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc << 1 ^ 0x07 if crc & 0x80 else crc << 1) & 0xFF
        table.append(crc)
    return tuple(table)


_CRC8 = _crc8_table()
