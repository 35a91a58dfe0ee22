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
from .base import Exchange, Wait, compressed, decode_sum, in_two_rounds, output_for


def chunk_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` consecutive ranges covering range(n), each a whole number of bytes of bits."""
    size = ((n + parts - 1) // parts + 7) // 8 * 8
    return [(min(n, j * size), min(n, (j + 1) * size)) for j in range(parts)]


def fits(n: int, parts: int) -> bool:
    """Whether ``n`` elements give each of ``parts`` ranks a non-empty chunk."""
    lo, hi = chunk_bounds(n, parts)[-1]
    return lo < hi


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
            reduced = self._reduce(bodies, finite)
        self.sent += reduced.numel()
        self.phase2 = hvd.allgather_async(reduced, name=self.exchange.name(self.name, ".gather"),
                                          process_set=self.exchange.process_set)

    def _reduce(self, bodies: list[torch.Tensor], finite: bool) -> torch.Tensor:
        """This rank's region: the sum of the ranks' chunks, plus the server residual,
        re-compressed and framed (empty when non-finite or absent everywhere)."""
        lo, hi = self.bounds[self.exchange.process_set.rank()]
        mine = torch.zeros(hi - lo, dtype=torch.float32, device=self.grad.device)
        present = (decode_sum(self.compressor, bodies, mine, self.grad.shape, what=repr(self.name))
                   if finite else 0)
        if self.exchange.average:
            mine.div_(self.ranks)
        self.compressor.aggregate(mine)
        # Non-finite: the server residual stays as it was, clean. No rank had a gradient: it
        # stays too, so that a frozen parameter does not move.
        body = None
        if finite and present:
            memory = self.compressor.memory
            server = memory.buffer(f"{self.name}#server", mine)
            body = self.compressor.fold_encode(server, mine, self.grad.shape, memory.keeps,
                                               f"{self.name}#server")
            if body is None:  # the region's sum overflowed fp32
                server.zero_()
                finite = False
        if body is None:
            body = torch.empty(0, dtype=torch.uint8, device=mine.device)
        return framing.frame(body, self.tag, finite)

    def result(self) -> torch.Tensor:
        with self.compressor.accounting.timed("wait"):
            gathered = hvd.synchronize(self.phase2)
        self.compressor.accounting.count(self.name, self.grad.numel(), self.sent)
        with self.compressor.accounting.timed("decode"):
            return self._aggregate(gathered)

    def _aggregate(self, gathered: torch.Tensor) -> torch.Tensor:
        bodies, finite = framing.unframe(gathered, self.tag, self.ranks, repr(self.name))
        if not finite:
            return output_for(self.grad, zeroed=False).fill_(float("nan")).view(self.grad.shape).to(self.grad.dtype)
        total = output_for(self.grad)
        for rank, ((lo, hi), body) in enumerate(zip(self.bounds, bodies)):
            decode_sum(self.compressor, [body], total[lo:hi], self.grad.shape, what=repr(self.name),
                       first_rank=rank)
        self.compressor.aggregate(total)
        return total.view(self.grad.shape).to(self.grad.dtype)


def start(compressor: Compressor, grad: torch.Tensor, name: str, exchange: Exchange,
          absent: bool = False) -> Wait:
    """Compresses ``grad`` (nothing when ``absent``: see base.py) and starts phase 1; the handle
    finishes the allreduce and yields the aggregate in ``grad``'s shape and dtype. ``grad``
    must give every rank a chunk (``fits``)."""
    return in_two_rounds(_Reduction(compressor, grad, name, exchange, absent), exchange, name)
