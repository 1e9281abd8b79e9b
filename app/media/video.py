"""A `video_url` part's frames: decoded with PyAV (FFmpeg's decoders, in its wheel), sampled at
`fps` (or its older name `sample_fps`), at most `max_frames` of them, each scaled down to
`spatial_limit` / `max_long_side_pixel` pixels on its long side; the model reads them as images.

PyAV is optional (`pip install fireside[video]`); without it a video part answers 400 saying so.
"""

from __future__ import annotations

import io

import numpy as np

from backends.image_data import MAX_PIXELS, fit_within

MAX_DECODED_FRAMES = 20_000  # frames decoded to find the sampled ones, at most


class VideoError(ValueError):
    """A video that gives no frames, with the reason."""


def video_frames(data: bytes, fps: float, max_frames: int, max_side: int | None) -> list[np.ndarray]:
    """RGB frames (height x width x 3, uint8), one every 1/fps seconds from the start, at most
    `max_frames`, each at most `max_side` pixels on its long side."""
    try:
        import av
    except ImportError:
        raise VideoError("reading video needs PyAV, which this install lacks (pip install 'fireside[video]')") from None
    frames: list[np.ndarray] = []
    try:
        with av.open(io.BytesIO(data)) as container:
            if not container.streams.video:
                raise VideoError("the data holds no video stream")
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            if width * height > MAX_PIXELS:
                raise VideoError(f"the video's frames are {width}x{height} pixels; at most {MAX_PIXELS} are read")
            next_time = 0.0
            for decoded, frame in enumerate(container.decode(stream)):
                if decoded >= MAX_DECODED_FRAMES:
                    break
                time = float(frame.time) if frame.time is not None else decoded / float(stream.average_rate or 1)
                if time + 1e-6 < next_time:
                    continue
                frames.append(fit_within(frame.to_ndarray(format="rgb24"), max_side))
                next_time += 1.0 / fps
                if len(frames) >= max_frames:
                    break
    except VideoError:
        raise
    except (av.error.FFmpegError, OSError, ValueError):
        raise VideoError("the data is not a video this server can read, or it is corrupt or truncated") from None
    if not frames:
        raise VideoError("the video has no frames")
    return frames

