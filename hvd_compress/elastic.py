"""Horovod elastic support: ``hvd.elastic.TorchState(model, optimizer, compressor=compressor)``
commits and restores the compressor's residuals with the rest of the state.

Policy when the world changes (every reset of ``hvd.elastic.run``, after a worker failed or
hosts were added or removed): each rank keeps its own worker residuals, since a rank's residual
is gradient it computed and has not sent yet and dropping it loses that signal; the two-phase
allreduce's server residuals, and any state of its chunks (state.py, ``of_partition``), are
dropped, because they belong to the old world's partition, which no longer exists (their sum is
at most one step's compression error). Ranks
that join start with empty residuals. Residuals are never broadcast: they are per rank by
definition. Every reset also re-arms the once-per-optimizer agreement check of
``horovod_hook``, so that old and new ranks run it together.

Horovod calls a handler's ``sync`` only after some resets (not when hosts were only removed),
so the policy hooks ``State.on_reset``, which runs after each.
"""
import functools

from horovod.common.elastic import State
from horovod.torch.elastic import state as elastic_state

from . import horovod_hook
from .compressor import Compressor
from .state import of_partition


class CompressorStateHandler(elastic_state.StateHandler):
    def __init__(self, value: Compressor) -> None:
        super().__init__(value)
        self.save()

    def save(self) -> None:
        self._saved = self.value.state_dict()

    def restore(self) -> None:
        # This process's own state, whatever its rank is now: no per-rank check.
        self.value.memory.load(self._saved["residuals"])
        self.value.states.load(self._saved["states"])

    def sync(self) -> None:
        self.save()  # nothing to broadcast: residuals are per rank

    def on_new_world(self) -> None:
        residuals = self.value.memory.residuals()
        self.value.memory.load({k: v for k, v in residuals.items() if not of_partition(k)})
        states = self.value.states.export()
        self.value.states.load({k: v for k, v in states.items() if not of_partition(k)})
        self.save()


_horovod_on_reset = State.on_reset


@functools.wraps(_horovod_on_reset)
def _on_reset(self: State) -> None:
    horovod_hook.new_world()
    for handler in getattr(self, "_handlers", {}).values():
        if isinstance(handler, CompressorStateHandler):
            handler.on_new_world()
    _horovod_on_reset(self)


def install() -> None:
    registry = elastic_state.get_handler_registry()
    if not any(handler is CompressorStateHandler for _, handler in registry):
        elastic_state.set_handler_registry([*registry, (Compressor, CompressorStateHandler)])
    State.on_reset = _on_reset
