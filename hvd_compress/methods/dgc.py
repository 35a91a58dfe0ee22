"""Deep Gradient Compression (DGC).

Lin, Han, Mao, Wang & Dally, "Deep Gradient Compression: Reducing the Communication Bandwidth
for Distributed Training", ICLR 2018. Per parameter, each step, with gradient g, velocity u and
accumulation v (the error-feedback residual) kept on each rank:

    g <- g * min(1, (clip_norm / sqrt(N)) / ||g||_2)     local gradient clipping (optional)
    u <- m * u + g                                      momentum correction
    v <- v + u
    send the entries of v of largest |v|, about k = ceil(density * n) of them, as (value, index)
    v[sent] <- 0;  u[sent] <- 0                         momentum factor masking

Receivers scatter-add every rank's pairs, as TopK's do. The selection is TopK's sampled one
(kernels/topk_cpu.py: threshold from a 1% strided sample, 0.8k to 1.3k of the largest entries),
which is the paper's. Sparsity warm-up: during the first ``warmup_steps`` encodes of a parameter
the density goes 25%, 6.25%, 1.5625%, 0.4% (a quarter of ``warmup_steps`` each, never below
``ratio``), then stays at ``ratio``.

Momentum correction replaces the optimizer's momentum. Build the optimizer with momentum=0 and
give the momentum to DGC (an optimizer with momentum is refused when the DistributedOptimizer
is built: the two would compound, measured 2.30 -> 41 in 40 steps):

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0, weight_decay=1e-4)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=hvd_compress.DGC(ratio=0.001, momentum=0.9))

The sum of u over ranks is the momentum of the summed gradient. Momentum factor masking clears
u wherever v is sent, so an entry's momentum only builds up while it waits: with everything
sent (``ratio=1``: every entry, the selection is exact there) u is cleared every step and
DGC is plain SGD, not momentum SGD (tests/test_api.py pins it). Weight
decay in the optimizer is applied without momentum.

Payload: c float32 values then c int32 indices (TopK's): 8 bytes an entry, 0.8k to 1.3k
entries. Parameters with fewer than ``dense_below`` elements (biases, norm layers) send u whole:
n float32, 4n bytes. Cost: one pass for the momentum (none when momentum=0 and no clipping),
TopK's selection, O(c) for the masking, O(c p) to decode on p ranks.

Decisions where the paper is silent:

* State: the memory hands ``encode`` gradient + residual, i.e. v + g; u lives in
  ``self.states`` (state.py), one fp32 buffer per parameter with its encode count, keyed by the
  parameter's name. v = (v + g) - g + u is formed in place (kernels/momentum_cpu.py), so after
  ``encode`` the memory holds v with the sent entries zeroed: the residual. ``state_dict()``
  saves u and the count, so a resume is bitwise. With ``error_feedback=False`` v is not carried
  over: u alone is sparsified each step.
* Small parameters: the reference implementation (github.com/synxlin/deep-gradient-compression)
  compresses only parameters of 2 or more dimensions and applies plain momentum, unmasked, to
  the others. We do the same by size: below ``dense_below`` elements (1024, the other methods'
  ``min_numel``) u is sent whole and not masked. For that every gradient must reach ``encode``,
  so ``min_numel`` defaults to 0: a tensor routed to Horovod's dense allreduce would get no
  momentum at all, since the optimizer has none.
* ``communication="allgather"`` only, as in the paper: the two-phase allreduce encodes the
  reduced chunk a second time, which would apply momentum again, and the dense route none.
* Clipping is per parameter (``encode`` sees one parameter), by the L2 norm of this rank's
  gradient, with the threshold scaled by 1/sqrt(N), N = Horovod's world size, as the paper says;
  ``None`` (default) turns it off. It needs the norm on the host: one device sync per parameter
  on a GPU.
* Warm-up counts encodes per parameter on each rank, and a stage's density never goes below
  ``ratio``. The paper warms up over epochs; give ``warmup_steps`` = 4 epochs' worth of steps
  for its schedule. No Nesterov momentum.
"""
import math
from typing import Any

import numpy as np
import torch

from ..compressor import Compressor
from ..options import is_int, is_number, position, require
from ..kernels import arrays
from ..payload import add_pairs, exact_length

WARMUP_DENSITIES = (0.25, 0.0625, 0.015625, 0.004)


class DGC(Compressor):
    """``DGC(ratio=0.001, momentum=0.9, clip_norm=None, warmup_steps=0, dense_below=1024)``;
    build the optimizer with momentum=0."""

    name = "dgc"
    PAPER = 'Lin et al., ICLR 2018'
    PAYLOAD = "TopK's payload, of the momentum-corrected accumulation; the optimizer must have momentum=0"
    EXAMPLES = ('dgc:ratio=0.05', 'dgc:momentum=0,ratio=0.01', 'dgc:momentum=0,ratio=0.01,warmup_steps=4', 'dgc:momentum=0,dense_below=10000')
    ROUTES = ("allgather",)
    LOCAL_STATE = ("u",)

    def __init__(self, ratio: float = 0.001, *, momentum: float = 0.9, clip_norm: float | None = None,
                 warmup_steps: int = 0, dense_below: int = 1024, min_numel: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(min_numel=min_numel, **kwargs)
        require(is_number(ratio) and 0 < ratio <= 1, "ratio", "a number in (0, 1]", ratio)
        require(is_number(momentum) and 0 <= momentum < 1, "momentum", "a number in [0, 1)", momentum)
        require(clip_norm is None or (is_number(clip_norm) and clip_norm > 0),
                "clip_norm", "a number > 0 or None", clip_norm)
        require(is_int(warmup_steps) and warmup_steps >= 0, "warmup_steps", "an int >= 0", warmup_steps)
        require(is_int(dense_below) and dense_below >= 0, "dense_below", "an int >= 0", dense_below)
        self.ratio, self.momentum, self.clip_norm = ratio, momentum, clip_norm
        self.warmup_steps, self.dense_below = warmup_steps, dense_below

    def options(self) -> dict[str, Any]:
        return {**super().options(), "ratio": self.ratio, "momentum": self.momentum,
                "clip_norm": self.clip_norm, "warmup_steps": self.warmup_steps,
                "dense_below": self.dense_below}

    def density(self, step: int) -> float:
        """The fraction of entries sent at a parameter's ``step``-th encode (from 0)."""
        if step < self.warmup_steps:
            return max(self.ratio, WARMUP_DENSITIES[step * len(WARMUP_DENSITIES) // self.warmup_steps])
        return self.ratio

    def k(self, numel: int, step: int | None = None) -> int:
        density = self.ratio if step is None else self.density(step)
        return min(numel, max(1, int(np.ceil(density * numel))))

    def whole(self, shape: torch.Size) -> bool:
        return shape.numel() < self.dense_below

    def expected_bytes(self, numel: int, shape: torch.Size) -> float:
        return 4 * numel if self.whole(shape) else 8 * self.k(numel)

    def _gain(self, grad: torch.Tensor) -> float:
        if self.clip_norm is None:
            return 1.0
        size = position()[1] or 1
        norm = float(torch.linalg.vector_norm(grad, dtype=torch.float32))
        return min(1.0, self.clip_norm / math.sqrt(size) / (norm + 1e-6))

    def encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
               key: str = "") -> torch.Tensor:
        state = self.states.get(key, lambda: {"steps": 0})
        step, state["steps"] = state["steps"], state["steps"] + 1
        gain = self._gain(grad)
        u = state.get("u")
        if self.momentum or gain != 1.0:  # else no pass over u is needed, nor u itself
            if u is None:
                u = state["u"] = torch.zeros_like(acc)
            arrays.kernels("momentum", acc).accumulate(acc, grad.to(torch.float32), u, self.momentum, gain)
        if self.whole(shape):
            values = acc.clone()
            acc.zero_()
            return values.view(torch.uint8)
        k = self.k(acc.numel(), step)
        # k = n (ratio=1): every entry, which only the exact selection guarantees
        values, indices = arrays.kernels("topk", acc).select(acc, k, k == acc.numel())
        if u is not None:
            arrays.kernels("momentum", acc).mask(u, indices)
        return arrays.join([values, indices])

    def decode_add(self, payload: torch.Tensor, out: torch.Tensor, shape: torch.Size) -> None:
        """Checks the length before adding (PayloadError otherwise, payload.py): exactly 4n
        bytes for a tensor sent whole; else TopK's checks (the length, and each index in the
        kernel: methods/topk.py)."""
        if self.whole(shape):
            exact_length(payload, 4 * out.numel(), out)
            out.add_(payload.view(torch.float32))
            return
        add_pairs(payload, 0, out)  # TopK's decoder: it checks the length and the indices

    def check_optimizer(self, param_groups: list[dict[str, Any]]) -> None:
        with_momentum = sorted({g["momentum"] for g in param_groups if g.get("momentum")})
        if with_momentum:
            raise ValueError(
                f"hvd_compress: DGC applies its own momentum (momentum={self.momentum}), and this "
                f"optimizer has momentum={with_momentum[0]} too: the two would compound and "
                "training diverges. Build the optimizer with momentum=0 and give the momentum to "
                f"DGC: hvd_compress.DGC(ratio={self.ratio}, momentum={with_momentum[0]})")
