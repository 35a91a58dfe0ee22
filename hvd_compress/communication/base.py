"""What every communicator shares: the per-optimizer exchange, the handle Horovod's
``synchronize()`` calls, a rank's contribution (gradient + residual, with the finite check,
compressed: ``compressed``; uncompressed, for PowerSGD's products: ``contribution``), the
buffer the aggregate is decoded into and the decoding of received bodies.

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
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

import horovod.torch as hvd
import torch
from horovod.common.exceptions import HorovodInternalError

from ..compressor import Compressor
from ..payload import PayloadError
from ..state import piece_key
from .fusion import Buckets


@dataclass
class Exchange:
    """One DistributedOptimizer's compressed collectives.

    ``prefix`` names them (``f"{prefix}.{parameter}"``): it holds the optimizer's ID
    (agreement.optimizer_id: a digest of its parameter names and its place among this process's
    optimizers with the same names), so two optimizers whose models share parameter names
    ("0.weight" in two nn.Sequential) never submit collectives of the same name. ``pending`` holds this optimizer's
    reductions in two rounds whose second round has not started (``in_two_rounds``); it is per
    optimizer, so one optimizer's synchronize() never waits on another's collectives.
    ``buckets`` fuses its two-phase alltoalls (fusion.py); the hook plans them per world."""

    prefix: str
    process_set: hvd.ProcessSet
    average: bool
    pending: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    buckets: Buckets | None = None

    def __post_init__(self) -> None:
        if self.buckets is None:
            self.buckets = Buckets([], self)

    def name(self, parameter: str, phase: str = "") -> str:
        return f"{self.prefix}.{parameter}{phase}"


class Wait:
    """A handle Horovod's ``synchronize()`` can call: finishes the collective at most once.

    A Horovod error while finishing (a rank died, or stopped on an error of its own, such as
    hvd_compress refusing ``hvd.join()``) is re-raised as a HorovodInternalError, the type
    Horovod elastic recovers from, that names the tensor and says where to look."""

    def __init__(self, finish: Callable[[], torch.Tensor], what: str = "") -> None:
        self._finish = finish
        self._what = what
        self._result: torch.Tensor | None = None

    def __call__(self) -> torch.Tensor:
        if self._result is None:
            try:
                self._result = self._finish()
            except HorovodInternalError as err:
                raise HorovodInternalError(
                    f"hvd_compress: the collective for {self._what!r} failed: {err}. Another rank "
                    "has probably stopped; its own output names the cause") from err
            self._finish = None
        return self._result


class TwoRounds(Protocol):
    """A reduction whose second collective needs the first one's result (twophase.py,
    lowrank.py)."""

    def start_phase2(self) -> None: ...

    def result(self) -> torch.Tensor: ...


def in_two_rounds(reduction: TwoRounds, exchange: Exchange, what: str) -> Wait:
    """The handle of ``reduction``, whose first round is in flight: it starts the second round
    in synchronize(). Before any rank blocks on a second round it starts the second round of
    every pending reduction of its optimizer: ranks finish tensors in different orders (a
    parameter without a gradient is submitted late on one rank), and a rank waiting on tensor
    A's second round while another waits on B's would otherwise hang both."""
    with exchange.lock:
        exchange.pending.append(reduction)

    def finish() -> torch.Tensor:
        with exchange.lock:
            ready, exchange.pending[:] = list(exchange.pending), []
        for other in ready:
            other.start_phase2()
        return reduction.result()

    return Wait(finish, what)


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
