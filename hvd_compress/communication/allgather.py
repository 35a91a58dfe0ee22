"""Sparse allgather: every rank's framed payload reaches every rank in one named collective.

Cost per rank for a payload of b bytes on p ranks: sends b, receives (p - 1) b, decodes p
payloads. Right for sparse payloads (TopK, AdaComp), whose b is a small fraction of the dense size.
"""
import horovod.torch as hvd
import torch

from ..compressor import Compressor
from . import framing
from .base import Exchange, Wait
from .codec import compressed, gathered_aggregate


def start(compressor: Compressor, grad: torch.Tensor, name: str, exchange: Exchange,
          absent: bool = False) -> Wait:
    """Compresses ``grad`` (nothing when ``absent``: see codec.py) and starts its allgather; the
    returned handle yields the aggregate (sum, or mean when the exchange averages) in ``grad``'s
    shape and dtype."""
    with compressor.accounting.timed("compress"):
        (body,), finite = compressed(compressor, name, grad, absent)
        tag = framing.tag_of(compressor.spec(), tuple(grad.shape))
        payload = framing.frame(body, tag, finite)
    compressor.accounting.count(name, grad.numel(), payload.numel())
    process_set = exchange.process_set
    handle = hvd.allgather_async(payload, name=exchange.name(name), process_set=process_set)

    def finish() -> torch.Tensor:
        with compressor.accounting.timed("wait"):
            gathered = hvd.synchronize(handle)
        with compressor.accounting.timed("decode"):
            bodies, finite = framing.unframe(gathered, tag, process_set.size(), repr(name))
            return gathered_aggregate(compressor, grad, bodies, finite, exchange.average, repr(name))

    return Wait(finish, name)
