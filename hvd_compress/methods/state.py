"""Per-buffer state for methods that keep more than the residual (a step count, a momentum).

``encode`` is handed the error-feedback memory's buffer for a parameter (or a slice of it), not
the parameter's name. That buffer lives as long as the parameter's residual does, with or
without error feedback, so it identifies the parameter: state is keyed by its device, address
and length. A memory that reallocates its buffers (``load_state_dict``, a size change) leaves
the old state unreachable; the methods clear it on load, and the state restarts from zero there.
It is not saved with ``state_dict``.
"""
import threading
from typing import Callable, Generic, TypeVar

import torch

T = TypeVar("T")


class PerBuffer(Generic[T]):
    def __init__(self) -> None:
        self._states: dict[tuple, T] = {}
        self._lock = threading.Lock()  # hooks may run on autograd's device threads

    def get(self, buffer: torch.Tensor, make: Callable[[], T]) -> T:
        key = (str(buffer.device), buffer.data_ptr(), buffer.numel())
        with self._lock:
            state = self._states.get(key)
            if state is None:
                state = self._states[key] = make()
            return state

    def clear(self) -> None:
        with self._lock:
            self._states.clear()
