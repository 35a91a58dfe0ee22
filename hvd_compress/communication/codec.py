"""The codec layer both front doors share (Horovod's DistributedOptimizer, horovod_hook.py, and
torch DDP's communication hook, ddp.py): a rank's contribution, the decoding of what the ranks
sent, and the arithmetic of the routes between their collectives. Nothing here starts a
collective, so nothing here imports a framework: the Horovod routes (allgather.py,
twophase.py, lowrank.py) and the DDP hook wrap these same functions in their own collectives.

A rank's contribution for one tensor and step is one of three things:

* present: gradient + residual, compressed; the residual keeps what was not sent;
* absent: the parameter got no gradient on this rank this step (a frozen layer, a branch this
  rank's forward pass did not take). Horovod would zero-fill it; compressing that zero would send
  the stored residual and move a parameter nobody computed a gradient for. Instead the rank sends
  an empty body and leaves its residual alone. An empty body adds nothing when decoded (every
  method's real payload is at least one byte long);
* non-finite: the gradient holds NaN or Inf. The residual is cleared (else the poison stays there
  for every later step) and the rank sends a flagged empty body; every rank's aggregate for the
  tensor is then NaN for this step.
"""
from typing import Iterable

import torch

from ..compressor import Compressor
from ..payload import PayloadError
from ..state import piece_key
from . import framing


def contribution(compressor: Compressor, name: str, grad: torch.Tensor,
                 absent: bool) -> tuple[torch.Tensor | None, bool]:
    """(gradient + residual, whether the gradient is finite) for a present gradient; (None,
    True) for an absent one, whose residual stays untouched. See the module docstring."""
    if absent:
        return None, True
    acc, finite = compressor.memory.compensate_checked(name, grad)
    if not finite:
        acc.zero_()
    return acc, finite


def compressed(compressor: Compressor, name: str, grad: torch.Tensor, absent: bool,
               pieces: list[tuple[int, int]] | None = None) -> tuple[list[torch.Tensor], bool]:
    """(the bodies a rank sends for ``grad``, one per piece ``(lo, hi)`` of its flat elements,
    or one for the whole tensor; whether it is finite). Each piece of gradient + residual is
    folded, checked and encoded in one call (``Compressor.fold_encode``: one pass over the
    data where the method fuses them). Absent or non-finite: empty bodies, and a non-finite
    gradient's residual cleared. See the module docstring."""
    n = grad.numel()
    pieces = pieces or [(0, n)]
    empty = [torch.empty(0, dtype=torch.uint8, device=grad.device)] * len(pieces)
    if absent:
        return empty, True
    acc = compressor.memory.buffer(name, grad)
    flat = grad.reshape(-1)
    bodies = []
    for lo, hi in pieces:
        body = compressor.fold_encode(acc[lo:hi], flat[lo:hi], grad.shape, compressor.memory.keeps,
                                      piece_key(name, lo, hi, n))
        if body is None:
            acc.zero_()
            return empty, False
        bodies.append(body)
    return bodies, True


def output_for(grad: torch.Tensor, zeroed: bool = True) -> torch.Tensor:
    """A flat fp32 buffer for ``grad``'s aggregate, zeroed unless told not to: ``grad``'s own memory when it is a
    contiguous fp32 tensor, else a new one. By the time the aggregate is decoded the gradient
    is in the residual (or in the payload), and Horovod's synchronize() sets ``p.grad`` to
    the result anyway, so its storage can carry the result: no gradient-sized allocation per
    tensor and step (which, at ResNet-18's 45 MB, page-faults fresh memory every step)."""
    if grad.dtype == torch.float32 and grad.is_contiguous():
        return grad.view(-1).zero_() if zeroed else grad.view(-1)
    return torch.zeros(grad.numel(), dtype=torch.float32, device=grad.device)


def decode_sum(compressor: Compressor, bodies: Iterable[torch.Tensor], out: torch.Tensor,
               shape: torch.Size, *, what: str = "", first_rank: int = 0) -> int:
    """Adds every non-empty body to ``out``, in order; returns how many there were.

    ``bodies`` are in rank order, empty ones included: body i came from rank ``first_rank + i``.
    A body that cannot be what its rank's encode made (a length it never makes, an index
    outside ``out``: payload.py) is not decoded past its bounds; it raises PayloadError naming
    that rank and the tensor, ``what``. The rank is found on that error path only, by decoding
    the bodies again one at a time into a scratch buffer (``out`` holds a partial sum then)."""
    bodies = list(bodies)
    present = [body for body in bodies if body.numel()]
    if present:
        try:
            compressor.decode_add_all(present, out, shape)
        except PayloadError as err:
            raise _culprit(compressor, bodies, out, shape, what, first_rank, err) from err
    return len(present)


def _culprit(compressor: Compressor, bodies: list[torch.Tensor], out: torch.Tensor,
             shape: torch.Size, what: str, first_rank: int, err: PayloadError) -> PayloadError:
    """decode_sum's error, naming the first rank whose body alone does not decode."""
    scratch = torch.zeros_like(out)
    who = f"one of ranks {first_rank}..{first_rank + len(bodies) - 1}"  # if none fails alone
    for rank, body in enumerate(bodies, first_rank):
        try:
            if body.numel():
                compressor.decode_add(body, scratch, shape)
        except PayloadError as found:
            who, err = f"rank {rank}", found
            break
    return PayloadError(f"hvd_compress: {who} sent a payload for {what or 'a tensor'} that "
                        f"cannot be decoded: {err}")


def _nan_like(grad: torch.Tensor) -> torch.Tensor:
    return output_for(grad, zeroed=False).fill_(float("nan")).view(grad.shape).to(grad.dtype)


def gathered_aggregate(compressor: Compressor, grad: torch.Tensor, bodies: list[torch.Tensor],
                       finite: bool, average: bool, what: str) -> torch.Tensor:
    """The allgather route's aggregate of ``grad`` from every rank's body (in rank order): their
    decoded sum, averaged over the ranks when ``average``, then the method's ``aggregate``; NaN
    when a rank's gradient was not finite. In ``grad``'s shape and dtype (``output_for``)."""
    if not finite:
        return _nan_like(grad)
    total = output_for(grad)
    decode_sum(compressor, bodies, total, grad.shape, what=what)
    if average:
        total.div_(len(bodies))
    compressor.aggregate(total)
    return total.view(grad.shape).to(grad.dtype)


# --- the two-phase allreduce's arithmetic (twophase.py has the scheme) --------------------

def chunk_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` consecutive ranges covering range(n), each a whole number of bytes of bits."""
    size = ((n + parts - 1) // parts + 7) // 8 * 8
    return [(min(n, j * size), min(n, (j + 1) * size)) for j in range(parts)]


def fits(n: int, parts: int) -> bool:
    """Whether ``n`` elements give each of ``parts`` ranks a non-empty chunk."""
    lo, hi = chunk_bounds(n, parts)[-1]
    return lo < hi


def reduced_region(compressor: Compressor, name: str, grad: torch.Tensor, region: tuple[int, int],
                   bodies: list[torch.Tensor], finite: bool, average: bool, tag: int) -> torch.Tensor:
    """Phase 2 on the rank that serves ``region`` of ``grad``'s flat elements: the ranks'
    ``bodies`` for that chunk decoded and summed (averaged), the method's ``aggregate``, plus
    the server residual, re-compressed and framed (empty when non-finite or absent
    everywhere)."""
    lo, hi = region
    mine = torch.zeros(hi - lo, dtype=torch.float32, device=grad.device)
    present = decode_sum(compressor, bodies, mine, grad.shape, what=repr(name)) if finite else 0
    if average:
        mine.div_(len(bodies))
    compressor.aggregate(mine)
    # Non-finite: the server residual stays as it was, clean. No rank had a gradient: it
    # stays too, so that a frozen parameter does not move.
    body = None
    if finite and present:
        memory = compressor.memory
        server = memory.buffer(f"{name}#server", mine)
        body = compressor.fold_encode(server, mine, grad.shape, memory.keeps, f"{name}#server")
        if body is None:  # the region's sum overflowed fp32
            server.zero_()
            finite = False
    if body is None:
        body = torch.empty(0, dtype=torch.uint8, device=mine.device)
    return framing.frame(body, tag, finite)


def regions_aggregate(compressor: Compressor, grad: torch.Tensor, bodies: list[torch.Tensor],
                      finite: bool, bounds: list[tuple[int, int]], what: str) -> torch.Tensor:
    """Phase 3: ``grad``'s aggregate from every rank's re-compressed region (body j holds
    ``bounds[j]``), in ``grad``'s shape and dtype; NaN when any region was not finite."""
    if not finite:
        return _nan_like(grad)
    total = output_for(grad)
    for rank, ((lo, hi), body) in enumerate(zip(bounds, bodies)):
        decode_sum(compressor, [body], total[lo:hi], grad.shape, what=what, first_rank=rank)
    compressor.aggregate(total)
    return total.view(grad.shape).to(grad.dtype)


# --- PowerSGD's step between its two allreduces (lowrank.py has the policy) --------------

class PowerStep:
    """One matrix's PowerSGD step (methods/powersgd.py) without its collectives: ``p`` is this
    rank's P = M Q, to be summed over the ranks; ``q_of(P summed)`` orthogonalizes it, keeps
    this rank's residual and returns its Q_i, to be summed (or averaged); ``aggregate(Q
    summed)`` is P^ Q^T in the gradient's shape and dtype. A non-finite gradient makes ``p``
    all NaN; a summed P that is not finite folds nothing (lowrank.py's docstring)."""

    def __init__(self, compressor: Compressor, grad: torch.Tensor, name: str, absent: bool) -> None:
        self.compressor, self.grad, self.name = compressor, grad, name
        self.rows, self.cols = compressor.matrix(grad.shape)
        with compressor.accounting.timed("compress"):
            acc, self.finite = contribution(compressor, name, grad, absent)
            # An absent gradient contributes zero factors; its residual (acc is None) stays.
            self.m = (acc if acc is not None else torch.zeros(grad.numel(), device=grad.device)
                      ).view(self.rows, self.cols)
            self.q = compressor.q(name, self.cols, grad.device)
            self.p = self.m @ self.q
            if not self.finite:
                self.p.fill_(float("nan"))
        self.residual = acc is not None

    def q_of(self, p: torch.Tensor) -> torch.Tensor:
        with self.compressor.accounting.timed("compress"):
            # Any rank's non-finite gradient makes the sum non-finite: fold nothing from it.
            finite = bool(torch.isfinite(p).all())
            self.p_hat = torch.linalg.qr(p).Q if finite else p
            q_mine = self.m.t() @ self.p_hat
            if self.residual and finite:
                self.m.addmm_(self.p_hat, q_mine.t(), alpha=-1)  # residual_i = M_i - P^ Q_i^T
        return q_mine

    def aggregate(self, q: torch.Tensor) -> torch.Tensor:
        self.compressor.accounting.count(self.name, self.grad.numel(), 4 * (self.p_hat.numel() + q.numel()))
        with self.compressor.accounting.timed("decode"):
            if torch.isfinite(q).all() and q.any():  # a zero Q (no rank had a gradient) would stay zero
                self.compressor.keep_q(self.name, q)
            total = output_for(self.grad, zeroed=False).view(self.rows, self.cols)
            torch.mm(self.p_hat, q.t(), out=total)
            return total.view(self.grad.shape).to(self.grad.dtype)
