"""PowerSGD: low-rank gradient compression by one step of power iteration, with error feedback.

Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
Optimization", NeurIPS 2019. Per matrix-shaped parameter (a tensor of more than 2 dimensions is
viewed as (shape[0], rest)), with M_i rank i's gradient + residual (n x m) and Q (m x r) the
previous step's Q (warm start) or, the first time, a random matrix every rank draws alike:

    P   = sum_i M_i Q                  allreduce of the n x r factors
    P^  = orthogonalize(P)             Gram-Schmidt (QR) in fp32
    Q_i = M_i^T P^                     rank i's share of Q
    Q   = sum_i Q_i (or mean)          allreduce of the m x r factors
    aggregate = P^ Q^T
    residual_i = M_i - P^ Q_i^T        what rank i's own approximation missed

The residual is each rank's own error (the paper's error feedback on the local compressed
gradient); torch DDP's hook keeps M_i minus the averaged approximation instead. Ours satisfies
the error-feedback invariant every other method does: what a rank sent (P^ Q_i^T) plus its new
residual is its gradient plus its old residual.

Payload: the factors, r (n + m) float32 for an n x m matrix, summed by Horovod's own allreduce,
which fuses the P (then the Q) factors of every tensor of a step into one collective. Vectors,
and matrices where r (n + m) is not smaller than n m / 2, go dense. Before ``start_step`` steps
of a parameter its gradient goes dense too (the DDP hook's start_powerSGD_iter).

Cost per matrix: 2 products of n m r multiply-adds and one more for the residual, plus an
n x r QR. These are dense linear algebra, which torch's BLAS does at the machine's peak, so this
method has no Numba kernel of its own: a hand-written one would only be slower.
"""
import zlib
from typing import Any

import torch

from ..compressor import Compressor
from ..options import is_int, require


class PowerSGD(Compressor):
    """``PowerSGD(rank=1, warm_start=True, start_step=0)``."""

    name = "powersgd"
    PAPER = 'Vogels et al., NeurIPS 2019'
    PAYLOAD = "the rank-r factors P (n x r) and Q (m x r) of each matrix, float32, summed by Horovod's own fused allreduce; vectors dense"
    EXAMPLES = ('powersgd:rank=2', 'powersgd:rank=1,start_step=2')
    #: the factors travel through Horovod's allreduce (communication/lowrank.py)
    ROUTES = ("lowrank",)

    def __init__(self, *, rank: int = 1, warm_start: bool = True, start_step: int = 0,
                 error_feedback: bool = True, min_numel: int = 1024) -> None:
        super().__init__(error_feedback=error_feedback, min_numel=min_numel)
        require(is_int(rank) and rank >= 1, "rank", "an int >= 1", rank)
        require(isinstance(warm_start, bool), "warm_start", "True or False", warm_start)
        require(is_int(start_step) and start_step >= 0, "start_step", "an int >= 0", start_step)
        self.rank, self.warm_start, self.start_step = rank, warm_start, start_step

    def options(self) -> dict[str, Any]:
        return {"error_feedback": self.error_feedback, "min_numel": self.min_numel,
                "rank": self.rank, "warm_start": self.warm_start, "start_step": self.start_step}

    @staticmethod
    def matrix(shape: torch.Size) -> tuple[int, int]:
        return shape[0], shape.numel() // shape[0]

    def compressible(self, grad: torch.Tensor) -> bool:
        if grad.dim() < 2 or not super().compressible(grad):
            return False
        rows, cols = self.matrix(grad.shape)
        return self.rank * (rows + cols) < rows * cols / 2

    def expected_bytes(self, numel: int, shape: torch.Size) -> float:
        rows, cols = self.matrix(shape)
        return 4 * self.rank * (rows + cols)

    def compressing(self, name: str) -> bool:
        """Counts a step of ``name``; False while it is still in its dense start."""
        state = self.states.get(name, lambda: {"steps": 0})
        step, state["steps"] = state["steps"], state["steps"] + 1
        return step >= self.start_step

    def q(self, name: str, cols: int, device: torch.device) -> torch.Tensor:
        """This step's Q for ``name``: the last aggregate (warm start), or a random one that
        every rank draws alike (seeded by the parameter's name)."""
        kept = self.states.get(name, lambda: {"steps": 0}).get("q")
        if self.warm_start and kept is not None and kept.shape == (cols, self.rank):
            return kept.to(device)
        seed = zlib.crc32(name.encode())
        return torch.randn(cols, self.rank, generator=torch.Generator().manual_seed(seed)).to(device)

    def keep_q(self, name: str, q: torch.Tensor) -> None:
        """Keeps the step's aggregate Q (every rank's is the same) for the next step's warm
        start; ``state_dict()`` saves it with the step count."""
        if self.warm_start:
            self.states.get(name, lambda: {"steps": 0})["q"] = q
