"""Two-phase compressed allreduce: traffic per rank near 2x the compressed size, whatever p is.

The scheme of DeepSpeed's error-compensated compressed allreduce (Tang et al., "1-bit Adam",
ICML 2021), over Horovod's alltoall and allgather. With n elements on p ranks:

1. each rank compresses gradient + worker residual chunk by chunk (p chunks of about n/p
   elements, each with its own scales) and an alltoall sends chunk j to rank j;
2. rank j decodes the p copies of its chunk, sums (or averages) them, adds its server residual
   for that chunk (n/p elements, kept per parameter), compresses the result again and keeps
   what that loses as the new server residual;
3. an allgather hands every rank every re-compressed chunk, which it decodes.

Each rank sends about (p-1)/p + 1/p compressed tensors and decodes 2 (against p-1 and p for an
allgather of payloads). Phase 1 starts in the gradient hook; phases 2 and 3 run in
``synchronize()``. Tensors with fewer than 8 p elements take the allgather path.
"""
import threading

import horovod.torch as hvd
import torch

from ..compressor import Compressor
from . import allgather, framing


def chunk_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` consecutive ranges covering range(n), each a whole number of bytes of bits."""
    size = ((n + parts - 1) // parts + 7) // 8 * 8
    return [(min(n, j * size), min(n, (j + 1) * size)) for j in range(parts)]


class _Reduction:
    """One tensor's two-phase allreduce, from phase 1 in flight to the aggregate."""

    def __init__(self, compressor: Compressor, grad: torch.Tensor, name: str, average: bool,
                 process_set: hvd.ProcessSet) -> None:
        self.compressor, self.grad, self.name = compressor, grad, name
        self.average, self.process_set = average, process_set
        self.ranks = process_set.size()
        self.bounds = chunk_bounds(grad.numel(), self.ranks)
        acc, finite = allgather.compensated(compressor, name, grad)
        self.tag = framing.tag_of(compressor.spec(), tuple(grad.shape), "twophase")
        frames = [framing.frame(allgather.encoded(compressor, acc[lo:hi], acc[lo:hi], finite),
                                self.tag, finite) for lo, hi in self.bounds]
        self.sent = sum(f.numel() for f in frames)
        self.phase1 = hvd.alltoall_async(
            torch.cat(frames), splits=torch.tensor([f.numel() for f in frames], dtype=torch.int32),
            name=f"hvd_compress.{name}.scatter", process_set=process_set)
        self.phase2 = None

    def start_phase2(self) -> None:
        """Waits for this rank's chunk, reduces and re-compresses it, starts the allgather."""
        received, _ = hvd.synchronize(self.phase1)
        lo, hi = self.bounds[self.process_set.rank()]
        mine = torch.zeros(hi - lo, dtype=torch.float32, device=self.grad.device)
        bodies, finite = framing.unframe(received, self.tag, self.ranks, repr(self.name))
        for body in bodies if finite else ():
            self.compressor.decode_add(body, mine, mine.shape)
        if self.average:
            mine.div_(self.ranks)
        body = torch.empty(0, dtype=torch.uint8, device=mine.device)
        if finite:  # else the server residual stays as it was, clean
            server = self.compressor.memory.compensate(f"{self.name}#server", mine)
            body = self.compressor.encode(server, server)
        reduced = framing.frame(body, self.tag, finite)
        self.sent += reduced.numel()
        self.phase2 = hvd.allgather_async(reduced, name=f"hvd_compress.{self.name}.gather",
                                          process_set=self.process_set)

    def result(self) -> torch.Tensor:
        gathered = hvd.synchronize(self.phase2)
        self.compressor._count(self.name, self.grad.numel(), self.sent)
        bodies, finite = framing.unframe(gathered, self.tag, self.ranks, repr(self.name))
        if not finite:
            return torch.full_like(self.grad, float("nan"))
        total = torch.zeros(self.grad.numel(), dtype=torch.float32, device=self.grad.device)
        for (lo, hi), body in zip(self.bounds, bodies):
            self.compressor.decode_add(body, total[lo:hi], total[lo:hi].shape)
        return total.view(self.grad.shape).to(self.grad.dtype)


# Reductions whose phase 2 has not started. Before any rank blocks on a phase 2 it starts the
# phase 2 of every pending reduction: ranks finish tensors in different orders (a parameter
# without a gradient is submitted late on one rank), and a rank waiting on the allgather of
# tensor A while another waits on that of B would otherwise hang both.
_pending: list[_Reduction] = []
_lock = threading.Lock()


def _finish(reduction: _Reduction) -> torch.Tensor:
    with _lock:
        ready, _pending[:] = list(_pending), []
    for other in ready:
        other.start_phase2()
    return reduction.result()


def start(compressor: Compressor, grad: torch.Tensor, name: str, average: bool,
          process_set: hvd.ProcessSet) -> allgather.Wait:
    """Compresses ``grad`` and starts phase 1; the handle finishes the allreduce and yields the
    aggregate in ``grad``'s shape and dtype."""
    last_lo, last_hi = chunk_bounds(grad.numel(), process_set.size())[-1]
    if last_lo == last_hi:  # too small to give every rank a chunk
        return allgather.start(compressor, grad, name, average, process_set)
    reduction = _Reduction(compressor, grad, name, average, process_set)
    with _lock:
        _pending.append(reduction)
    return allgather.Wait(lambda: _finish(reduction))
