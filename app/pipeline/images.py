"""A chat's images: fetched (app/media/fetch.py), encoded by the model's projector, and put into the
prompt where the chat template placed each image's marker (a video's sampled frames, app/media/video.py,
one after another where its marker is). A sound (`input_audio`, app/media/audio.py) takes the same
road: its encoder windows are chunks like an image's.

Plans write `IMAGE_MARKER` into a message's text where an image part sat; the template renders
it like any text, and here each marker in the rendered prompt becomes the image's tokens (the
projector's text around its chunks and their placeholders, backends/vision.py). The marker holds a
random part made when the server starts, so text a user types never makes an image slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from app.media.audio import audio_samples, check_length
from app.media.fetch import MediaError, MediaPolicy, media_bytes
from app.media.video import VideoError, video_frames
from app.pipeline.errors import BadRequest
from app.pipeline.plan import IMAGE_MARKER, IMAGE_PLACEHOLDER, ImageRef
from app.pipeline.prompts import Prompt
from backends.image_data import ImageEmbedding, ImageError, ImageTile
from backends.jobs import PromptImage
from backends.llama_model import LlamaModel
from backends.registry import ServedModel
from templates.prompt_fragments import fragment_tokens

if TYPE_CHECKING:  # backends.vision loads libmtmd: only where a model has a projector
    from backends.vision import Projector

NO_IMAGES = "this model does not accept images"
NO_AUDIO = "this model does not accept audio"
HOLE = -1  # where an image goes in a prompt's tokens before they are filled (no vocabulary id is negative)
T = TypeVar("T")


async def encode_images(served: ServedModel, refs: tuple[ImageRef, ...],
                        policy: MediaPolicy) -> list[list[ImageEmbedding]]:
    """Each part's images (one, or a video's frames) read and encoded, in order; 400 naming the
    part for any that cannot be."""
    projector = _projector(served, refs)
    return await _read_images(refs, policy, projector.encode, projector.encode_pixels,
                              lambda data: projector.encode_audio(data, audio_samples))


async def count_images(served: ServedModel, refs: tuple[ImageRef, ...], policy: MediaPolicy) -> list[int]:
    """The prompt tokens each part's images (one, or a video's frames) take, as `encode_images`
    would make them, from the projector's preprocessing alone (its encoder does not run); the
    same 400s."""
    projector = _projector(served, refs)
    return [sum(group) for group in await _read_images(refs, policy, projector.count, projector.count_pixels,
                                                       lambda data: projector.count_audio(data, audio_samples))]


def _projector(served: ServedModel, refs: tuple[ImageRef, ...]) -> Projector:
    """The model's projector; 400 naming the first part it cannot read (a sound without an audio
    encoder, an image without a vision one)."""
    projector = served.projector
    for ref in refs:
        if ref.audio and (projector is None or not projector.audio):
            raise BadRequest(f"{NO_AUDIO} (serve it with a --mmproj projector that reads audio): {ref.where} is "
                             "audio", param=_param(ref))
        if not ref.audio and (projector is None or not projector.vision):
            kind = "a video" if ref.video else "an image"
            raise BadRequest(f"{NO_IMAGES} (serve it with its --mmproj projector): {ref.where} is {kind}",
                             param=_param(ref))
    assert projector is not None
    return projector


async def _read_images(refs: tuple[ImageRef, ...], policy: MediaPolicy, still: Callable[[bytes, int | None], T],
                       frame: Callable[[np.ndarray], T], sound: Callable[[bytes], T]) -> list[list[T]]:
    """Each part's images fetched and read by the projector (`still` for an image, `frame` for
    each of a video's sampled frames, `sound` for audio), in order; 400 naming the part for any
    that cannot be."""
    groups = []
    for ref in refs:
        try:
            data = await media_bytes(ref.url, policy)
            if ref.audio:
                await asyncio.to_thread(check_length, data)
                groups.append([await asyncio.to_thread(sound, data)])
                continue
            if ref.video is None:
                groups.append([await asyncio.to_thread(still, data, ref.max_side)])
                continue
            frames = await asyncio.to_thread(video_frames, data, *ref.video, ref.max_side)
            groups.append([await asyncio.to_thread(frame, pixels) for pixels in frames])
        except (MediaError, ImageError, VideoError) as error:
            raise BadRequest(f"{ref.where}: {error}", param=_param(ref)) from None
    return groups


def _param(ref: ImageRef) -> str:
    return ref.where.split("[", 1)[0]  # "messages" or "images"


def written_image_prompt(model: LlamaModel, prompt: Prompt, groups: list[list[ImageEmbedding]], index: int) -> Prompt:
    """A completions prompt with each `<image>` replaced by its image's tokens, in order."""
    pieces = prompt.text.split(IMAGE_PLACEHOLDER)
    tokens = model.tokenize(pieces[0], add_special=True, parse_special=True)
    for piece in pieces[1:]:
        tokens.append(HOLE)
        tokens.extend(model.tokenize(piece, add_special=False, parse_special=True))
    if tokens[-1] == HOLE and isinstance(groups[-1][-1].parts[-1], ImageTile):
        raise BadRequest(f"prompt {index} ends with an image; text must follow it (the answer starts from the "
                         "prompt's last text token)", param="images")
    expanded, placed = _fill(tokens, groups)
    return replace(prompt, tokens=expanded, images=placed)


def place_images(served: ServedModel, prompt: Prompt, groups: list[list[ImageEmbedding]],
                 refs: tuple[ImageRef, ...]) -> Prompt:
    """The chat prompt with each part's images (a video's frames one after another) where the
    template put the part's marker; its text shows `<image>` there (`<audio>` for a sound)."""
    expanded, placed = _fill(_holed_tokens(served, prompt, len(groups)), groups)
    text = _shown(prompt.text, _labels(refs))
    labels = _labels(refs)
    shown = [_shown(piece, labels) if isinstance(piece, str) else piece for piece in prompt.fragments]
    return replace(prompt, tokens=expanded, text=text, fragments=shown, images=placed)


def _labels(refs: tuple[ImageRef, ...]) -> Iterator[str]:
    return iter(["<audio>" if ref.audio else "<image>" for ref in refs])


def _shown(text: str, labels: Iterator[str]) -> str:
    """`text` with each media marker as the next of `labels` (the markers come in the parts' order)."""
    pieces = text.split(IMAGE_MARKER)
    return pieces[0] + "".join(next(labels, "<image>") + piece for piece in pieces[1:])


def placed_count(served: ServedModel, prompt: Prompt, counts: list[int]) -> int:
    """How many tokens `place_images` makes of the chat prompt, from each part's token count
    (`count_images`)."""
    tokens = _holed_tokens(served, prompt, len(counts))
    return len(tokens) - len(counts) + sum(counts)


def _holed_tokens(served: ServedModel, prompt: Prompt, parts: int) -> list[int]:
    """The chat prompt's tokens with a `HOLE` where the template put each part's marker; 400
    unless it put all `parts` of them."""
    fragments: list[str | int] = []
    for fragment in prompt.fragments:
        if not isinstance(fragment, str) or IMAGE_MARKER not in fragment:
            fragments.append(fragment)
            continue
        for k, piece in enumerate(fragment.split(IMAGE_MARKER)):
            if k:
                fragments.append(HOLE)
            fragments.append(piece)
    tokens = fragment_tokens(served.model, fragments)
    found = tokens.count(HOLE)
    if found != parts:
        raise BadRequest(f"the chat template placed {found} of the {parts} images; it drops images where it "
                         "puts them (in a message of a role it leaves out, say)", param="messages")
    return tokens


def _fill(tokens: list[int], groups: list[list[ImageEmbedding]]) -> tuple[list[int], tuple[PromptImage, ...]]:
    """`tokens` with each `HOLE` replaced by its group's images (a video's frames one after
    another), and where each image chunk now starts."""
    placed: list[PromptImage] = []
    expanded: list[int] = []
    slots = iter(groups)
    for token in tokens:
        if token != HOLE:
            expanded.append(token)
            continue
        for image in next(slots):
            placed.extend(image.at(len(expanded)))
            expanded.extend(image.tokens)
    return expanded, tuple(placed)
