"""What every Horovod communicator shares: the per-optimizer exchange, the handle Horovod's
``synchronize()`` calls, and reductions in two rounds.

How a rank's contribution is made (present, absent or non-finite) and how received bodies are
decoded: codec.py, which the DDP hook (ddp.py) shares; its functions are imported here for
the Horovod routes.
"""
import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol

import horovod.torch as hvd
import torch
from horovod.common.exceptions import HorovodInternalError

from .codec import compressed, contribution, decode_sum, output_for  # noqa: F401 (the routes' imports)
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
    ``buckets`` fuses its two-phase and hierarchical alltoalls (fusion.py); the hook plans them
    per world. ``nodes`` is this rank's place among nodes (topology.py; None: flat routes only);
    ``batch`` the hierarchical route's open batch and ``after_round`` what sends a batch once
    every pending reduction started its second round (hierarchical.py)."""

    prefix: str
    process_set: hvd.ProcessSet
    average: bool
    pending: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    buckets: Buckets | None = None
    nodes: object | None = None
    batch: object | None = None
    after_round: list = field(default_factory=list)

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
    lowrank.py, hierarchical.py, whose third round waits in ``result``)."""

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
        with exchange.lock:
            batches, exchange.after_round[:] = list(exchange.after_round), []
        for send in batches:
            send()
        return reduction.result()

    return Wait(finish, what)
