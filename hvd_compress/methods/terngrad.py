"""TernGrad: stochastic ternary gradients {-s, 0, +s}, s = max |g| per tensor, unbiased.

Wen, Xu, Yan, Wu, Wang, Chen & Li, "TernGrad: Ternary Gradients to Reduce Communication in
Distributed Deep Learning", NeurIPS 2017. Per parameter (layer-wise, as the paper's
"layer-wise ternarizing"; a two-phase piece has its own s), each step:

    s = max_i |g_i|;   t_i = s * sign(g_i) * b_i,   b_i ~ Bernoulli(|g_i| / s)

E[t] = g. Receivers add every rank's t. With ``clip=c > 0``, the paper's gradient clipping
comes first: g_i is clipped to [-c sigma, c sigma], sigma the standard deviation of the
tensor's (or piece's) entries; the paper uses c = 2.5.

Payload: s (float32), then 2 bits per entry, packed 4 to a byte (entry 4b + j in bits 2j, 2j+1
of byte b: 00 = 0, 01 = +s, 11 = -s): 4 + ceil(n / 4) bytes (``expected_bytes`` is exact), about
16x smaller than fp32. Cost: one pass for the max (and one for sigma with clipping), one to
ternarize, one to decode a payload; kernels/quantize.py (QSGD's rounding with one level and
the max instead of the norm).

Decisions where the paper is silent:

* ``clip=0`` (off) by default: TernGrad's unbiasedness and its convergence argument are for
  the unclipped ternarization; clipping biases every entry beyond c sigma (the paper shows it
  is what keeps the variance low on large models, and uses c = 2.5 for them), and without error
  feedback what it cuts is lost. Turn it on with ``clip=2.5``; it costs one more pass (sigma).
  sigma is the population standard deviation of the entries (float64); a sigma of 0 or not
  finite clips nothing.
* The scale is the max of the clipped entries, so a clipped entry travels as +-c sigma.
* ``error_feedback=False`` by default, as in the paper; a NaN or Inf makes the piece decode to
  NaN. Seeds and noise: methods/quantized.py.
"""
import math
from typing import Any

import numpy as np
import torch

from ..options import require
from ..kernels import quantize
from .quantized import Quantized


class TernGrad(Quantized):
    """``TernGrad(clip=0.0, seed=0)``; ``clip=2.5`` is the paper's gradient clipping."""

    name = "terngrad"
    PAPER = 'Wen et al., NeurIPS 2017'
    PAYLOAD = 'max |g| per tensor (float32) and 2 bits per entry (-s, 0, +s), stochastic, unbiased; no error feedback by default'
    EXAMPLES = ('terngrad', 'terngrad:clip=2.5,communication=twophase', 'terngrad:clip=2.5,error_feedback=true')

    def __init__(self, *, clip: float = 0.0, seed: int = 0, error_feedback: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(quantize.TERNGRAD, 1, seed=seed, error_feedback=error_feedback, **kwargs)
        require(isinstance(clip, (int, float)) and not isinstance(clip, bool) and 0 <= clip < math.inf,
                "clip", "a number >= 0 (0: no clipping)", clip)  # NaN fails too
        self.clip = clip

    def options(self) -> dict[str, Any]:
        return {**super().options(), "clip": self.clip}

    def clip_bound(self, acc: torch.Tensor) -> float:
        if not self.clip:
            return np.inf
        bound = self.clip * float(acc.double().std(unbiased=False)) if acc.numel() > 1 else 0.0
        return float(np.float32(bound)) if 0 < bound < np.inf else np.inf
