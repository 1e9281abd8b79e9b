"""What every door's request Structs are built on: a base that refuses unknown fields (each door
renders that as its schema error), and the ranges OpenAI's sampling fields share."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta


class WireStruct(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base for request Structs: unknown fields are a schema error (422)."""


Temperature = Annotated[float, Meta(ge=0, le=2)]


Probability = Annotated[float, Meta(ge=0, le=1)]


Penalty = Annotated[float, Meta(ge=-2, le=2)]


RepetitionPenalty = Annotated[float, Meta(ge=0, le=2)]


TopK = Annotated[int, Meta(ge=0, le=100)]


ChoiceCount = Annotated[int, Meta(ge=1, le=128)]
