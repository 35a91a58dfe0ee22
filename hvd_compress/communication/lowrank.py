"""Low-rank factors through Horovod's own allreduce: PowerSGD's communication
(methods/powersgd.py has the algorithm).

Round 1, in the gradient hook: P = M Q, allreduced (sum). Round 2, in ``synchronize()``: Q =
M^T orthogonalize(P), allreduced (sum or mean), and the aggregate P^ Q^T. Both rounds are plain
fp32 allreduces, so Horovod fuses every tensor's P (then Q) of one step into one collective:
the batching of many small factors into few messages costs no code here. Cost per rank for an
n x m matrix at rank r on p ranks: a ring allreduce of r n floats, then one of r m floats.

Contributions follow codec.py: a rank without a gradient adds zero factors and keeps its
residual; a non-finite gradient makes its P all NaN, so every rank's aggregate is NaN for that
tensor this step. No rank lets that step reach its state: the summed P is checked before
anything is folded from it, so a healthy rank keeps its whole gradient + residual as its
residual (it sent nothing that was applied), the non-finite rank's residual is cleared, and the
warm-start Q stays the last finite one. Before this check one overflow (GradScaler's usual
first steps) put the other ranks' NaN into every residual, and every later step was skipped.

Memory: the aggregate P^ Q^T is written into the gradient's own storage (codec.output_for), so a
step allocates only the factors.
"""
import horovod.torch as hvd
import torch

from ..compressor import Compressor
from . import dense
from .base import Exchange, Wait, in_two_rounds
from .codec import PowerStep


class _PowerStep:
    """One matrix's PowerSGD step (codec.PowerStep), from P's allreduce in flight to the aggregate."""

    def __init__(self, compressor: Compressor, grad: torch.Tensor, name: str, exchange: Exchange,
                 absent: bool) -> None:
        self.compressor, self.name, self.exchange = compressor, name, exchange
        self.step = PowerStep(compressor, grad, name, absent)
        self.phase1 = hvd.allreduce_async(self.step.p, name=exchange.name(name, ".P"), op=hvd.Sum,
                                          process_set=exchange.process_set)
        self.phase2 = None

    def start_phase2(self) -> None:
        with self.compressor.accounting.timed("wait"):
            p = hvd.synchronize(self.phase1)
        q_mine = self.step.q_of(p)
        op = hvd.Average if self.exchange.average else hvd.Sum
        self.phase2 = hvd.allreduce_async(q_mine, name=self.exchange.name(self.name, ".Q"), op=op,
                                          process_set=self.exchange.process_set)

    def result(self) -> torch.Tensor:
        with self.compressor.accounting.timed("wait"):
            q = hvd.synchronize(self.phase2)
        return self.step.aggregate(q)


def start(compressor: Compressor, grad: torch.Tensor, name: str, exchange: Exchange,
          absent: bool = False) -> Wait:
    """Starts the PowerSGD step of ``grad``, or, during its ``start_step`` dense steps, an
    fp32 allreduce of it; the handle yields the aggregate in ``grad``'s shape and dtype."""
    if not compressor.compressing(name):
        compressor.accounting.count(name, grad.numel(), 4 * grad.numel())
        return dense.start(grad, name, exchange)
    return in_two_rounds(_PowerStep(compressor, grad, name, exchange, absent), exchange, name)
