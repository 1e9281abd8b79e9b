"""A transcription or translation as the one request plan: a chat of one user turn that holds the
instruction and the sound (where `input_audio` parts put theirs), answered by the model's own chat
template, sampling and engine.

The instruction is llama-server's (`Transcribe audio to text`, with the language named when the
request names one); a `prompt` takes its place, as llama-server takes it, since an audio language
model is steered by what it is told. A translation asks for English text, as OpenAI's does.
Reasoning is switched off where the template can (a transcript is the answer)."""

from __future__ import annotations

import base64

from app.api.audio.form import AudioRequest
from app.api.common.turns import Turns
from app.pipeline.plan import ImageRef, OutputOptions, RequestPlan, Sampling, StreamPlan
from backends.jobs import LogprobOptions
from templates.reasoning import ReasoningRequest

TRANSCRIBE = "Transcribe audio to text"  # llama-server's (common_chat_get_asr_prompt)
TRANSLATE = "Translate the audio into English text"


def audio_plan(request: AudioRequest, reasons: bool) -> RequestPlan:
    """The plan; `reasons`: the model's chat format has a reasoning switch (set to none)."""
    instruction = request.prompt or (TRANSCRIBE if request.task == "transcribe" else TRANSLATE)
    if request.language:
        instruction += f" (language: {request.language})"
    turns = Turns()
    sound = ImageRef("data:application/octet-stream;base64," + base64.b64encode(request.data).decode(), "file",
                     audio=True)
    turns.add("user", instruction + "\n" + turns.image(sound))
    scored = request.response_format == "verbose_json" or request.logprobs
    return RequestPlan(
        model=request.model,
        input=turns.conversation(),
        max_tokens=request.max_tokens,
        sampling=Sampling(temperature=request.temperature),
        reasoning=ReasoningRequest(effort="none") if reasons else None,
        # verbose_json's segment carries its tokens' mean log-probability
        output=OutputOptions(logprobs=LogprobOptions(top=0, sampling=False) if scored else None),
        stream=StreamPlan(include_usage=False) if request.stream else None,
    )
