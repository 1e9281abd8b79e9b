"""The options of `fireside serve` that belong to one model: they apply to the `--model` before
them (`--alias`, `--chat-template`, `--mmproj`), or to the `--lora` before them (`--alias`,
`--lora-scale`), so their order on the command line matters."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path


class ForLastModel(argparse.Action):
    """An option of the `--model` given before it (of the first model when none was): a list
    with one entry per model, None where a model has none."""

    def __call__(self, parser, namespace, value, option_string=None):
        index = max(len(namespace.model) - 1, 0)
        values = list(getattr(namespace, self.dest) or [])
        values.extend([None] * (index + 1 - len(values)))
        if values[index] is not None:
            parser.error(f"{option_string} given twice for one --model")
        values[index] = value
        setattr(namespace, self.dest, values)


class ModelOption(argparse._AppendAction):
    """`--model`: one more model; the `--alias` after it names it (until a `--lora`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        namespace.after_lora = False


@dataclass
class LoraOption:
    """A `--lora`: an adapter on the `--model` before it (index 0, the embedded default, when none was)."""

    model: int
    path: Path
    alias: str | None = None
    scale: float = 1.0
    scaled: bool = False  # --lora-scale was given


class LoraAdapterOption(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        namespace.lora = [*(namespace.lora or []), LoraOption(max(len(namespace.model) - 1, 0), value)]
        namespace.after_lora = True


class AliasOption(ForLastModel):
    """`--alias`: names the `--lora` right before it, else the `--model` before it."""

    def __call__(self, parser, namespace, value, option_string=None):
        if not getattr(namespace, "after_lora", False):
            return super().__call__(parser, namespace, value, option_string)
        lora = namespace.lora[-1]
        if lora.alias is not None:
            parser.error(f"{option_string} given twice for one --lora")
        lora.alias = value


class LoraScaleOption(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        if not getattr(namespace, "after_lora", False):
            parser.error(f"{option_string} goes right after the --lora it scales")
        lora = namespace.lora[-1]
        if lora.scaled:
            parser.error(f"{option_string} given twice for one --lora")
        lora.scale, lora.scaled = value, True


def lora_scale(value: str) -> float:
    try:
        scale = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number such as 0.5, got {value!r}") from None
    if not math.isfinite(scale):
        raise argparse.ArgumentTypeError(f"a finite number, got {value!r}")
    return scale
