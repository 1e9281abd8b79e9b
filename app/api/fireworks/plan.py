"""Fireworks (and OpenAI) request bodies turned into the one request plan (DESIGN step 2), with
the checks of meaning that a schema cannot carry (400): aliases resolved (`max_completion_tokens`,
`functions` / `function_call`, `prediction`, `thinking` and boolean efforts), the spec's rules
between fields applied. Nothing here needs the model; `app.pipeline.prepare` does what does."""

from __future__ import annotations

from typing import Any

import msgspec

from app.api.common.reasoning import reasoning_request
from app.api.common.turns import DETAIL_SIDES, Turns, audio_ref, joined, long_side
from app.api.fireworks.requests import (
    ChatCompletionRequest,
    ChatMessage,
    ChatMessageContent,
    CompletionRequest,
    GenerationFields,
    PredictedOutput,
)
from app.api.fireworks.tools import tool_plan
from app.pipeline.errors import BadRequest, RequestValidationError
from app.pipeline.plan import (
    ECHO_ALL,
    IMAGE_PLACEHOLDER,
    Caller,
    Conversation,
    ImageRef,
    OutputOptions,
    Prompts,
    RequestPlan,
    ResponseFormat,
    Sampling,
    StreamPlan,
)
from app.pipeline.stream_buffer import BufferPolicy
from backends.jobs import CacheKeys, LogprobOptions
from templates.reasoning import ReasoningRequest, ThinkingControl

MAX_STOP_SEQUENCES = 4
LOGIT_BIAS_RANGE = 100.0
VIDEO_DETAIL_SIDES = {"low": 512, "default": None, "high": None}
DEFAULT_FPS, MAX_FPS = 1.0, 30.0  # video frames sampled per second
DEFAULT_MAX_FRAMES, MAX_VIDEO_FRAMES = 8, 64
# OpenAI's (and Fireworks') default for the legacy completions endpoint.
DEFAULT_COMPLETION_TOKENS = 16
ROLES = ("system", "developer", "user", "assistant", "tool")


def chat_plan(request: ChatCompletionRequest, max_logprobs: int) -> RequestPlan:
    """`POST /v1/chat/completions` as a plan."""
    check_meaning(request)
    if request.prompt_token_ids is not None:
        if request.safe_tokenization:
            raise BadRequest("safe_tokenization cannot apply to prompt_token_ids: there is no text to tokenize",
                             param="safe_tokenization")
        if request.prompt_truncate_len is not None:
            raise BadRequest("prompt_truncate_len evicts messages; it cannot apply to prompt_token_ids",
                             param="prompt_truncate_len")
    if request.prompt_truncate_len is not None and request.prompt_truncate_len < 1:
        raise BadRequest(f"prompt_truncate_len must be 1 or more, got {request.prompt_truncate_len}",
                         param="prompt_truncate_len")
    output = output_options(request, max_logprobs)
    tools = tool_plan(request)
    turns = chat_turns(request.messages) if request.messages is not None else None
    conversation = Conversation(
        messages=turns.messages if turns is not None else None,
        token_ids=tuple(request.prompt_token_ids) if request.prompt_token_ids is not None else None,
        tools=tools, safe_tokenization=request.safe_tokenization, truncate_to=request.prompt_truncate_len,
        images=tuple(turns.images) if turns is not None else ())
    if conversation.images and request.prompt_truncate_len is not None:
        raise BadRequest("prompt_truncate_len counts text tokens; it cannot apply to a chat with images yet",
                         param="prompt_truncate_len")
    return _plan(request, conversation, output, reasoning_controls(request), default_max_tokens=None)


def completion_plan(request: CompletionRequest, max_logprobs: int) -> RequestPlan:
    """`POST /v1/completions` as a plan: prompts used as written. Of the reasoning controls only a
    token budget can apply to them (see `app.pipeline.prepare.written_reasoning_budget`)."""
    check_meaning(request)
    output = output_options(request, max_logprobs)
    prompt = request.prompt
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif isinstance(prompt[0], int):
        items = [prompt]
    else:
        items = prompt
    prompts = Prompts(tuple(item if isinstance(item, str) else tuple(item) for item in items),
                      _completion_images(request.images, items))
    if request.reasoning_history is not None:
        raise BadRequest("reasoning_history chooses how chat messages are rendered; /v1/completions uses its "
                         "prompt as written (use /v1/chat/completions)", param="reasoning_history")
    reasoning = None
    if request.reasoning_effort is not None or request.thinking is not None:
        reasoning = reasoning_controls(request)
    return _plan(request, prompts, output, reasoning, default_max_tokens=DEFAULT_COMPLETION_TOKENS)


def _completion_images(images: list[str | list[str]] | None, prompts: list[Any]) -> tuple[tuple[ImageRef, ...], ...]:
    """`images` per prompt: one list for one prompt, a list per prompt for several; each image
    takes the place of one `<image>` in its (text) prompt, in order."""
    if not images:
        return ()
    per_prompt = [images] if all(isinstance(image, str) for image in images) else images
    if len(per_prompt) != len(prompts) or not all(isinstance(group, list) for group in per_prompt):
        raise BadRequest(f"images holds {len(per_prompt)} lists for {len(prompts)} prompts; give one list of "
                         "images per prompt", param="images")
    refs = []
    for i, (prompt, group) in enumerate(zip(prompts, per_prompt, strict=True)):
        if group and not isinstance(prompt, str):
            raise BadRequest(f"prompt {i} is token ids; give it as text with an {IMAGE_PLACEHOLDER} where each image "
                             "goes", param="images")
        if group and prompt.count(IMAGE_PLACEHOLDER) != len(group):
            raise BadRequest(f"prompt {i} has {prompt.count(IMAGE_PLACEHOLDER)} {IMAGE_PLACEHOLDER} placeholders for "
                             f"{len(group)} images", param="images")
        refs.append(tuple(ImageRef(url, f"images[{i}][{j}]" if len(prompts) > 1 else f"images[{j}]")
                          for j, url in enumerate(group)))
    return tuple(refs)


def _plan(request: GenerationFields, prompt: Conversation | Prompts, output: OutputOptions,
          reasoning: ReasoningRequest | None, *, default_max_tokens: int | None) -> RequestPlan:
    """What both endpoints share."""
    stop = request.stop
    stream = None
    if request.stream:
        options = request.stream_options
        stream = StreamPlan(
            include_usage=options is None or options.include_usage is not False,  # the spec's default: included
            buffer=BufferPolicy.of(options.buffer_tokens, options.buffer_ms, options.buffer_mode) if options else None)
    return RequestPlan(
        model=request.model,
        input=prompt,
        n=request.n,
        max_tokens=requested_max_tokens(request),
        default_max_tokens=default_max_tokens,
        overflow=request.context_length_exceeded_behavior,
        sampling=_sampling(request),
        stop=((stop,) if isinstance(stop, str) else tuple(stop)) if stop is not None else None,
        response_format=_response_format(request),
        reasoning=reasoning,
        draft=_draft(request),
        # `prompt_cache_isolation_key` partitions reuse; `prompt_cache_key`, else `user`, steers
        cache=CacheKeys(isolation=request.prompt_cache_isolation_key,
                        affinity=request.prompt_cache_key if request.prompt_cache_key is not None else request.user),
        output=output,
        stream=stream,
        priority=request.service_tier == "priority",
        caller=Caller(request.user, request.metadata),
    )


def check_meaning(request: GenerationFields) -> None:
    """Rules between fields and ranges that the spec states in prose (400)."""
    if request.max_tokens is not None and request.max_completion_tokens is not None:
        raise BadRequest(
            "max_tokens and max_completion_tokens are aliases; give one of them", param="max_tokens"
        )
    limit = requested_max_tokens(request)
    if limit is not None and limit < 0:
        raise BadRequest(f"max_tokens must be 0 or more, got {limit}", param="max_tokens")
    if isinstance(request.stop, list) and len(request.stop) > MAX_STOP_SEQUENCES:
        raise BadRequest(f"stop takes at most {MAX_STOP_SEQUENCES} sequences, got {len(request.stop)}", param="stop")
    if request.repetition_penalty is not None and request.repetition_penalty <= 0:
        # the penalty divides positive logits: 0 has no meaning (vLLM refuses it too)
        raise BadRequest("repetition_penalty must be greater than 0", param="repetition_penalty")
    if request.mirostat_target is not None and request.mirostat_target <= 0:
        raise BadRequest("mirostat_target must be greater than 0", param="mirostat_target")
    if request.mirostat_lr is not None and not 0 < request.mirostat_lr <= 1:
        raise BadRequest("mirostat_lr must be in (0, 1]", param="mirostat_lr")
    if request.stream_options is not None and not request.stream:
        raise BadRequest("stream_options is only valid with stream=true", param="stream_options")
    if request.thinking is not None and request.thinking.type != "enabled":
        extra = [f for f in ("budget_tokens", "keep", "budget_end_str", "effort") if getattr(request.thinking, f) is not None]
        if extra:
            raise RequestValidationError.at(["thinking", extra[0]], f"not allowed when thinking.type is {request.thinking.type!r}", "extra_forbidden")
    if isinstance(request, ChatCompletionRequest):
        if request.messages is not None and request.prompt_token_ids is not None:
            raise BadRequest("give messages or prompt_token_ids, not both", param="messages")
        if request.messages is None and request.prompt_token_ids is None:
            # the schema leaves both optional; a chat needs one of them
            raise BadRequest("messages is required (or prompt_token_ids)", param="messages")
    elif isinstance(request, CompletionRequest):
        _check_prompt_shape(request.prompt)


def _check_prompt_shape(prompt: str | list[Any]) -> None:
    """`prompt` is a string, string[], int[] or int[][]: one kind of element throughout."""
    if isinstance(prompt, str):
        return
    if not prompt:
        raise RequestValidationError.at(["prompt"], "prompt must not be an empty list", "too_short")
    kind = type(prompt[0])
    for i, item in enumerate(prompt):
        if type(item) is not kind:
            raise RequestValidationError.at(
                ["prompt", i], "prompt must be a string, a list of strings, a list of token ids or a list of token-id lists", "type_error"
            )
        if kind is list and not item:
            raise RequestValidationError.at(["prompt", i], "a token-id prompt must not be empty", "too_short")


def requested_max_tokens(request: GenerationFields) -> int | None:
    """`max_tokens` or its alias `max_completion_tokens` (None: neither given)."""
    return request.max_tokens if request.max_tokens is not None else request.max_completion_tokens


def output_options(request: GenerationFields, max_logprobs: int) -> OutputOptions:
    """The request's output extras, checked against each other and `--max-logprobs` (400)."""
    logprobs, top = request.logprobs, request.top_logprobs
    if top is not None and not 0 <= top <= max_logprobs:
        raise BadRequest(f"top_logprobs must be between 0 and {max_logprobs} (--max-logprobs), got {top}",
                         param="top_logprobs")
    legacy = isinstance(logprobs, int) and not isinstance(logprobs, bool)
    if legacy:
        if not 0 <= logprobs <= max_logprobs:
            raise BadRequest(f"logprobs must be between 0 and {max_logprobs} (--max-logprobs), got {logprobs}",
                             param="logprobs")
        top = logprobs if top is None else top
    wanted = legacy or logprobs is True
    if not wanted and top:
        raise BadRequest("top_logprobs needs logprobs: set logprobs to true", param="top_logprobs")
    mask = request.sampling_mask
    if mask is not None:
        if legacy:
            raise BadRequest("sampling_mask comes with the OpenAI logprobs shape (logprobs: true), "
                             "not with logprobs as a number", param="sampling_mask")
        wanted = True  # the mask rides on each token's logprobs entry
    echo = _echo(request)
    engine_options = None
    if wanted:
        prompt_last = 0
        if echo is not None:
            prompt_last = (1 << 30) if echo == ECHO_ALL else echo
        engine_options = LogprobOptions(top=top or 0, sampling=not legacy, active_ids=mask not in (None, "count"),
                                        prompt_last=prompt_last)
    stream_options = request.stream_options
    return OutputOptions(
        logprobs=engine_options,
        legacy_logprobs=legacy,
        top_logprobs=top or 0,
        sampling_mask=mask,
        echo=echo,
        token_ids=bool(request.return_token_ids),
        internal_content=stream_options is not None and bool(stream_options.include_internal_content),
        raw_output=bool(request.raw_output),
        perf_in_body=bool(request.perf_metrics_in_response),
        timings=bool(request.timings_per_token),
    )


def _echo(request: GenerationFields) -> int | None:
    if request.echo_last is not None:
        if request.echo_last < 0:
            raise BadRequest(f"echo_last must be 0 or more, got {request.echo_last}", param="echo_last")
        if request.echo:
            raise BadRequest("give echo or echo_last, not both", param="echo_last")
        return request.echo_last
    return ECHO_ALL if request.echo else None


def _sampling(request: GenerationFields) -> Sampling:
    return Sampling(
        temperature=request.temperature, top_k=request.top_k, top_p=request.top_p, min_p=request.min_p,
        typical_p=request.typical_p, frequency_penalty=request.frequency_penalty,
        presence_penalty=request.presence_penalty, repetition_penalty=request.repetition_penalty,
        mirostat_target=request.mirostat_target, mirostat_lr=request.mirostat_lr, seed=request.seed,
        logit_bias=_logit_bias(request.logit_bias), ignore_eos=request.ignore_eos,
    )


def _logit_bias(bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """Token ids and biases (the ids are checked against the vocabulary when prepared)."""
    if not bias:
        return ()
    pairs = []
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            raise BadRequest(f"logit_bias key {key!r} is not a token id", param="logit_bias") from None
        if not -LOGIT_BIAS_RANGE <= value <= LOGIT_BIAS_RANGE:
            raise BadRequest(f"logit_bias value {value} for token {token} is outside -100..100", param="logit_bias")
        pairs.append((token, float(value)))
    return tuple(pairs)


def _response_format(request: GenerationFields) -> ResponseFormat | None:
    given = request.response_format
    if given is None:
        return None
    if given.type == "text":
        extra = [name for name in ("schema", "json_schema", "grammar") if getattr(given, name) is not None]
        if extra:
            raise BadRequest(f"response_format: response_format.{min(extra)} does not go with type `text`",
                             param="response_format")
        return None
    return ResponseFormat(given.type, schema=given.schema, json_schema=given.json_schema, grammar=given.grammar)


def _draft(request: GenerationFields) -> str | tuple[int, ...]:
    """The predicted output (`speculation`, or OpenAI's `prediction`), as text or token ids."""
    speculation, prediction = request.speculation, request.prediction
    if speculation is not None and prediction is not None:
        raise BadRequest("give speculation or prediction, not both", param="prediction")
    if isinstance(speculation, list):
        return tuple(speculation)
    if prediction is not None:
        return prediction if isinstance(prediction, str) else _prediction_text(prediction)
    return speculation or ()


def _prediction_text(prediction: PredictedOutput) -> str:
    if isinstance(prediction.content, str):
        return prediction.content
    texts = []
    for i, part in enumerate(prediction.content):
        if part.type != "text" or part.text is None:
            raise BadRequest(f"prediction.content[{i}] must be a text part", param="prediction")
        texts.append(part.text)
    return "".join(texts)


def reasoning_controls(request: GenerationFields) -> ReasoningRequest:
    """`reasoning_effort`, `thinking` and `reasoning_history` in one shape (400 for contradictions)."""
    thinking = request.thinking
    control = ThinkingControl(**msgspec.structs.asdict(thinking)) if thinking is not None else None
    return reasoning_request(request.reasoning_effort, control, request.reasoning_history)


def _content_text(message: ChatMessage, index: int, turns: Turns) -> str | None:
    """The message's text; an image (or video) part becomes its marker there (see `Turns.image`)."""
    content = message.content
    if content is None or isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        where = f"messages[{index}].content[{j}]"
        if part.type == "text":
            if part.text is None:
                raise BadRequest(f"{where} is a text part without text", param="messages")
            texts.append(part.text)
        elif part.type == "image_url":
            texts.append(turns.image(_image(part, where)))
        elif part.type == "video_url":
            texts.append(turns.image(_video(part, where)))
        elif part.type == "input_audio":
            texts.append(turns.image(_audio(part, where)))
        else:
            raise BadRequest(f"messages[{index}].content[{j}] has unknown type {part.type!r}", param="messages")
    return joined(texts)


def _image(part: ChatMessageContent, where: str) -> ImageRef:
    image = part.image_url
    if image is None:
        raise BadRequest(f"{where} is an image_url part without image_url", param="messages")
    side = long_side(f"{where}.image_url", image.detail, DETAIL_SIDES, {"max_long_side_pixel": image.max_long_side_pixel})
    return ImageRef(image.url, where, side)


def _audio(part: ChatMessageContent, where: str) -> ImageRef:
    """An `input_audio` part: base64 data in a format the server reads; the sound goes where its marker is."""
    sound = part.input_audio
    if sound is None:
        raise BadRequest(f"{where} is an input_audio part without input_audio", param="messages")
    return audio_ref(sound.data, sound.format, f"{where}.input_audio", where)


def _video(part: ChatMessageContent, where: str) -> ImageRef:
    """A video part: its frames, sampled as its fields ask, go where its marker is."""
    video = part.video_url
    if video is None:
        raise BadRequest(f"{where} is a video_url part without video_url", param="messages")
    at = f"{where}.video_url"
    if video.fps is not None and video.sample_fps is not None and video.fps != video.sample_fps:
        raise BadRequest(f"{at}: fps and sample_fps are one setting; they disagree", param="messages")
    fps = video.fps if video.fps is not None else video.sample_fps if video.sample_fps is not None else DEFAULT_FPS
    if not 0 < fps <= MAX_FPS:
        raise BadRequest(f"{at}: fps must be above 0 and at most {MAX_FPS}, got {fps}", param="messages")
    frames = video.max_frames if video.max_frames is not None else DEFAULT_MAX_FRAMES
    if not 1 <= frames <= MAX_VIDEO_FRAMES:
        raise BadRequest(f"{at}.max_frames must be 1 to {MAX_VIDEO_FRAMES}, got {frames}", param="messages")
    side = long_side(at, video.detail, VIDEO_DETAIL_SIDES,
                     {"spatial_limit": video.spatial_limit, "max_long_side_pixel": video.max_long_side_pixel})
    return ImageRef(video.url, where, side, (fps, frames))


def chat_turns(messages: list[ChatMessage]) -> Turns:
    """The conversation as the message dicts that chat templates read, with its images."""
    if not messages:
        raise BadRequest("messages must hold at least one message", param="messages")
    turns = Turns(ROLES)
    for i, message in enumerate(messages):
        role = turns.role(message.role, i)
        calls = msgspec.to_builtins(message.tool_calls) if message.tool_calls is not None else None
        turns.add(role, _content_text(message, i, turns) or "", reasoning=message.reasoning_content,
                  tool_calls=calls, tool_call_id=message.tool_call_id)
    return turns
