"""Training state a compressor keeps between steps, keyed by name, checkpointed whole.

Two kinds, both keyed by the *piece* a payload is encoded from:

* the error-feedback residual of each piece (memory.py), and
* whatever else a method keeps per piece (``ParameterStates``): DGC's velocity and step count,
  Signum's momentum, Random-k's and the quantizers' encode counts (their seeds), PowerSGD's
  warm-start Q and step count. Each entry is a plain dict of ints and tensors.

A piece's key is the parameter's name (as the optimizer's ``named_parameters`` gives it) when a
payload carries the whole parameter, ``NAME[lo:hi]`` for a two-phase chunk of its flat
elements, ``NAME#server`` for the region a two-phase server reduces, and ``NAME#node`` for
the shard of its node's mean a rank compresses on the hierarchical route. Keys by name survive
whatever happens to the buffers (a checkpoint load, a size change, a device move); the old
keying by buffer address lost the state silently whenever a buffer was reallocated.

Chunk and server keys belong to one world size's partition (``of_partition``): a state saved at
another world size, or a world changed by Horovod elastic, drops them.

Objects here hold a lock (hooks may run on autograd's device threads); ``Guarded`` rebuilds it
when a compressor is pickled (``horovod.run`` ships the training function's closure) or copied.
"""
import threading
from typing import Any, Callable

import torch


def piece_key(name: str, lo: int, hi: int, numel: int) -> str:
    """The state key of elements ``lo:hi`` of parameter ``name`` (``numel`` elements in all)."""
    return name if (lo, hi) == (0, numel) else f"{name}[{lo}:{hi}]"


def of_partition(key: str) -> bool:
    """Whether ``key`` names a piece of one world size's two-phase partition, or the shard of
    a node a hierarchical route's rank serves (``NAME#node``: one node size's)."""
    return key.endswith("]") or key.endswith("#server") or key.endswith("#node")


class Guarded:
    """An object whose ``_lock`` is not part of its state: copies and unpickled objects get a
    new one (a lock cannot be pickled)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _copy(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


class ParameterStates(Guarded):
    """A method's per-piece state beyond the residual: ``get(key, make)`` returns the piece's
    dict (made by ``make`` at first use), ``export``/``load`` copy them all for a checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self._states: dict[str, dict[str, Any]] = {}

    def get(self, key: str, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        with self._lock:
            state = self._states.get(key)
            if state is None:
                state = self._states[key] = make()
            return state

    def export(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {key: {field: _copy(v) for field, v in state.items()}
                    for key, state in self._states.items()}

    def load(self, states: dict[str, dict[str, Any]]) -> None:
        """Replaces every state by a copy of the given ones."""
        with self._lock:
            self._states = {key: {field: _copy(v) for field, v in state.items()}
                            for key, state in states.items()}
