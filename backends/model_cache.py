"""Things computed once per loaded model (token texts, the special-token table) and dropped with it."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from backends.llama_model import LlamaModel

T = TypeVar("T")


def per_model(build: Callable[[LlamaModel], T]) -> Callable[[LlamaModel], T]:
    """`build(model)` memoized per model object, safe from any thread; an unloaded model's entry
    goes with it."""
    cache: weakref.WeakKeyDictionary[LlamaModel, T] = weakref.WeakKeyDictionary()
    lock = threading.Lock()

    def get(model: LlamaModel) -> T:
        with lock:
            value = cache.get(model)
            if value is None:
                value = cache[model] = build(model)
            return value

    get.__doc__ = f"{build.__name__} of the model, built on first use and dropped with the model."
    return get
