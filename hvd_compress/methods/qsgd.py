"""QSGD: stochastic quantization to s levels of each bucket's L2 norm, unbiased.

Alistarh, Grubic, Li, Tomioka & Vojnovic, "QSGD: Communication-Efficient SGD via Gradient
Quantization and Encoding", NeurIPS 2017. Per parameter (or two-phase piece), each step, for
each bucket of ``bucket_size`` consecutive entries v with norm ||v||_2 and s = ``levels``:

    Q_s(v_i) = ||v||_2 * sign(v_i) * xi_i / s,   xi_i = l + 1 with probability s|v_i|/||v||_2 - l,
                                                  else l, where l = floor(s|v_i| / ||v||_2)

E[Q_s(v)] = v (the paper's Lemma 3.1). Receivers add every rank's Q_s(v).

Payload: per bucket one float32 norm, then one int8 per entry (sign * level, two's complement):
4 ceil(n / bucket_size) + n bytes (``expected_bytes`` is exact), about 3.97x smaller than fp32
at the defaults. Cost: one pass for the norms, one to quantize (and leave the residual), one to
decode a payload; kernels/quantize.py.

Decisions where the paper is silent:

* One byte per entry instead of the paper's Elias coding of the levels: fixed-width codes
  decode in parallel and make the payload size known before encoding (which the route planner
  needs); ``levels`` = 127 (the default) is the most a level and its sign fit in a byte. Fewer
  levels send the same bytes with more variance; levels in [1, 127].
* ``bucket_size`` = 512, the bucket size of the paper's experiments: the variance bound
  min(d/s**2, sqrt(d)/s) grows with the bucket's length d, the norms cost 4 bytes a bucket.
* Rounding is in float64 from the float32 norm that travels (so the decoded value has mean v
  up to float rounding and the 2**-24 resolution of the uniform draws); a norm beyond float32's
  range saturates at its max (then the entries of that bucket round with a slight downward
  bias); a bucket holding NaN or Inf decodes to NaN.
* ``error_feedback=False`` by default, as in the paper (QSGD is unbiased; its guarantees need
  no memory); ``True`` keeps acc - Q(acc). Seeds and noise: methods/quantized.py.
"""
from typing import Any

from ..options import is_int, require
from ..kernels import quantize
from .quantized import Quantized


class QSGD(Quantized):
    """``QSGD(levels=127, bucket_size=512, seed=0)``."""

    name = "qsgd"
    PAPER = 'Alistarh et al., NeurIPS 2017'
    PAYLOAD = 'per bucket of 512 entries its L2 norm (float32), then one int8 per entry: sign * level, stochastically rounded, unbiased; no error feedback by default'
    EXAMPLES = ('qsgd', 'qsgd:error_feedback=true', 'qsgd:levels=3,bucket_size=7,error_feedback=true')

    def __init__(self, levels: int = 127, *, bucket_size: int = 512, seed: int = 0,
                 error_feedback: bool = False, **kwargs: Any) -> None:
        require(is_int(levels) and 1 <= levels <= 127, "levels", "an int in [1, 127]", levels)
        super().__init__(quantize.qsgd(levels), bucket_size, seed=seed, error_feedback=error_feedback, **kwargs)
        self.levels = levels

    def options(self) -> dict[str, Any]:
        return {**super().options(), "levels": self.levels, "bucket_size": self.bucket_size}
