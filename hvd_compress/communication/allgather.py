"""Sparse allgather: every rank's framed payload reaches every rank in one named collective.

Cost per rank for a payload of b bytes on p ranks: sends b, receives (p - 1) b, decodes p
payloads. Right for sparse payloads (TopK, AdaComp), whose b is a small fraction of the dense size.
"""
from typing import Callable

import horovod.torch as hvd
import torch

from ..compressor import Compressor
from . import framing


class Wait:
    """A handle Horovod's ``synchronize()`` can call: finishes the collective at most once."""

    def __init__(self, finish: Callable[[], torch.Tensor]) -> None:
        self._finish = finish
        self._result: torch.Tensor | None = None

    def __call__(self) -> torch.Tensor:
        if self._result is None:
            self._result = self._finish()
            self._finish = None
        return self._result


def compensated(compressor: Compressor, name: str, grad: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(grad + residual, whether grad is finite). A gradient holding NaN or Inf clears the
    residual, which would otherwise carry the poison into every later step; its rank sends a
    flagged empty payload and every rank's aggregate for that tensor is NaN this step."""
    finite = bool(torch.isfinite(grad).all())
    acc = compressor.memory.compensate(name, grad)
    if not finite:
        acc.zero_()
    return acc, finite


def encoded(compressor: Compressor, acc: torch.Tensor, grad: torch.Tensor, finite: bool) -> torch.Tensor:
    return compressor.encode(acc, grad) if finite else torch.empty(0, dtype=torch.uint8, device=acc.device)


def start(compressor: Compressor, grad: torch.Tensor, name: str, average: bool,
          process_set: hvd.ProcessSet) -> Wait:
    """Compresses ``grad`` and starts its allgather; the returned handle yields the aggregate
    (sum, or mean when ``average``) in ``grad``'s shape and dtype."""
    acc, finite = compensated(compressor, name, grad)
    tag = framing.tag_of(compressor.spec(), tuple(grad.shape))
    payload = framing.frame(encoded(compressor, acc, grad, finite), tag, finite)
    compressor._count(name, grad.numel(), payload.numel())
    handle = hvd.allgather_async(payload, name=f"hvd_compress.{name}", process_set=process_set)

    def finish() -> torch.Tensor:
        gathered = hvd.synchronize(handle)
        ranks = process_set.size()
        bodies, all_finite = framing.unframe(gathered, tag, ranks, repr(name))
        if not all_finite:
            return torch.full_like(grad, float("nan"))
        total = torch.zeros(grad.numel(), dtype=torch.float32, device=grad.device)
        for body in bodies:
            compressor.decode_add(body, total, grad.shape)
        if average:
            total.div_(ranks)
        return total.view(grad.shape).to(grad.dtype)

    return Wait(finish)
