"""u8bit: 8-bit quantization on Dettmers' dynamic tree, one float32 scale per bucket, with
error feedback.

Dettmers, "8-Bit Approximations for Parallelism in Deep Learning", ICLR 2016; GRACE's
TensorFlow ``u8bit`` compressor (Xu et al., ICDCS 2021). Per parameter (or two-phase piece),
each step: acc = gradient + residual; per bucket of ``bucket_size`` entries, s = max |acc_i|;
each entry is sent as the code of the magnitude nearest to |acc_i| / s among 128 values of
Dettmers' dynamic tree (0, and 127 values from 1e-6 to 1 spread over 7 decades), with its sign;
receivers add sign * value * s; residual = acc - what was sent.

Payload: per bucket one float32 scale, then one byte per entry (two's complement of +-code,
code 0..127): 4 ceil(n / bucket_size) + n bytes (``expected_bytes`` is exact), about 3.97x
smaller than fp32 at the defaults. Cost: one pass for the scales, one to encode (a 7-step
binary search per entry) and leave the residual, one to decode a payload; kernels/quantize.py.

Decisions where the sources leave a choice:

* Dettmers' dynamic (non-linear) codebook, not a linear one: gradients are heavy-tailed, and a
  linear 8-bit grid of the max sends most entries of a bucket as 0 (every entry below max/254),
  while the dynamic tree keeps about 2 significant digits down to 1e-6 of the max. GRACE's
  u8bit uses the same kind of 128-entry table. Our values are the upper ends of the tree's steps
  (Dettmers takes the middles), so that 1, the bucket's max, is exact; they are float32
  (kernels/quantize.py ``dynamic_magnitudes``).
* Deterministic rounding to the nearest value (ties to the smaller), as Dettmers and GRACE: it is
  biased, and error feedback (on by default here; GRACE's ``use_memory``) carries the rounding
  error to the next step, where stochastic rounding would only add variance.
* A scale per bucket (``bucket_size=512``, 0.8% overhead) rather than GRACE's one per tensor:
  one large entry then coarsens only its own bucket.
* A bucket holding NaN or Inf decodes to NaN; an all-zero bucket to zeros.
"""
from typing import Any

from ..kernels import quantize
from .quantized import Quantized


class U8Bit(Quantized):
    """``U8Bit(bucket_size=512)``; error feedback on by default."""

    name = "u8bit"
    PAPER = "Dettmers, ICLR 2016; GRACE's u8bit"
    PAYLOAD = "per bucket of 512 entries its max |x| (float32), then one byte per entry: sign and the nearest of 127 values of Dettmers' dynamic tree; error feedback"
    EXAMPLES = ('u8bit',)

    def __init__(self, *, bucket_size: int = 512, error_feedback: bool = True, **kwargs: Any) -> None:
        super().__init__(quantize.U8BIT, bucket_size, seed=None, error_feedback=error_feedback, **kwargs)

    def options(self) -> dict[str, Any]:
        return {**super().options(), "bucket_size": self.bucket_size}
