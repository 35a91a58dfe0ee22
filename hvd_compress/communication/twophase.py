"""Two-phase compressed allreduce: traffic per rank near 2x the compressed size, whatever p is.

The scheme of DeepSpeed's error-compensated compressed allreduce (Tang et al., "1-bit Adam",
ICML 2021) and, for sparse payloads, of Ok-Topk's reduce-scatter over index regions (Li &
Hoefler, PPoPP 2022), over Horovod's alltoall and allgather, for every method. With n
elements on p ranks:

1. each rank compresses gradient + worker residual chunk by chunk (p chunks of about n/p
   elements, each encoded on its own: OneBit gets a scale pair per chunk, TopK keeps the
   ratio of each chunk, AdaComp bins each chunk) and an alltoall sends chunk j to rank j
   (one alltoall per bucket of tensors: fusion.py);
2. rank j decodes the p copies of its chunk, sums (or averages) them, adds its server residual
   for that chunk (n/p elements, kept per parameter), compresses the result again with the
   same method and keeps what that loses as the new server residual;
3. an allgather hands every rank every re-compressed chunk, which it decodes.

Fill-in is bounded by the re-compression: the sum of p sparse chunks may hold up to p times a
chunk's entries, but rank j sends on only what its method selects from the sum (TopK: the same
ratio of the chunk), and the rest waits in its server residual. Selecting per chunk rather than
over the whole tensor balances the ranks' loads; a tensor whose large entries crowd into one
chunk sends them over more steps.

Each rank sends about (p-1)/p + 1/p compressed tensors and decodes 2 (against p-1 and p for an
allgather of payloads). Phase 1 starts in the gradient hook; phases 2 and 3 run in
``synchronize()``. Which tensors take this path: route.py.
"""
import horovod.torch as hvd
import torch

from ..compressor import Compressor
from . import framing
from .base import Exchange, Wait, in_two_rounds
from .codec import chunk_bounds, compressed, fits, reduced_region, regions_aggregate  # noqa: F401


class _Reduction:
    """One tensor's two-phase allreduce, from phase 1 in flight to the aggregate."""

    def __init__(self, compressor: Compressor, grad: torch.Tensor, name: str, exchange: Exchange,
                 absent: bool) -> None:
        self.compressor, self.grad, self.name, self.exchange = compressor, grad, name, exchange
        self.ranks = exchange.process_set.size()
        self.bounds = chunk_bounds(grad.numel(), self.ranks)
        with compressor.accounting.timed("compress"):
            bodies, finite = compressed(compressor, name, grad, absent, self.bounds)
            self.tag = framing.tag_of(compressor.spec(), tuple(grad.shape), "twophase")
            frames = [framing.frame(body, self.tag, finite) for body in bodies]
        self.sent = sum(f.numel() for f in frames)
        self.phase1 = exchange.buckets.scatter(name, frames, self.tag)
        self.phase2 = None

    def start_phase2(self) -> None:
        """Waits for this rank's chunk, reduces and re-compresses it, starts the allgather."""
        with self.compressor.accounting.timed("wait"):
            bodies, finite = self.phase1.received()
        with self.compressor.accounting.timed("decode"):
            reduced = reduced_region(self.compressor, self.name, self.grad,
                                     self.bounds[self.exchange.process_set.rank()], bodies, finite,
                                     self.exchange.average, self.tag)
        self.sent += reduced.numel()
        self.phase2 = hvd.allgather_async(reduced, name=self.exchange.name(self.name, ".gather"),
                                          process_set=self.exchange.process_set)

    def result(self) -> torch.Tensor:
        with self.compressor.accounting.timed("wait"):
            gathered = hvd.synchronize(self.phase2)
        self.compressor.accounting.count(self.name, self.grad.numel(), self.sent)
        with self.compressor.accounting.timed("decode"):
            bodies, finite = framing.unframe(gathered, self.tag, self.ranks, repr(self.name))
            return regions_aggregate(self.compressor, self.grad, bodies, finite, self.bounds,
                                     repr(self.name))


def start(compressor: Compressor, grad: torch.Tensor, name: str, exchange: Exchange,
          absent: bool = False) -> Wait:
    """Compresses ``grad`` (nothing when ``absent``: see codec.py) and starts phase 1; the handle
    finishes the allreduce and yields the aggregate in ``grad``'s shape and dtype. ``grad``
    must give every rank a chunk (``fits``)."""
    return in_two_rounds(_Reduction(compressor, grad, name, exchange, absent), exchange, name)
