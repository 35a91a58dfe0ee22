"""Natural compression: each entry stochastically rounded to one of the two nearest powers of
two, unbiased, sign and exponent in one byte.

Horvath, Ho, Horvath, Sahu, Canini & Richtarik, "Natural Compression for Distributed Deep
Learning", arXiv 1905.10988 (2019). Per parameter (or two-phase piece), each step, for each
entry with 2**e <= |x| < 2**(e+1):

    C(x) = sign(x) 2**(e+1)  with probability |x| / 2**e - 1,   else sign(x) 2**e

E[C(x)] = x, with variance at most x**2 / 8 (the paper's Theorem 1). Receivers add every
rank's C(x).

Payload: 2**emax as float32, emax = floor(log2 max |x|) of the piece, then one byte per entry:
the two's complement of sign * k, k = emax + 2 - r for C(x) = sign 2**r (k = 1 .. 127: the 127
powers from 2**(emax+1) down to 2**(emax-125)), k = 0 for 0: 4 + n bytes (``expected_bytes``
is exact), 3.99x smaller than fp32. Cost: one pass for the max, one to round, one to decode a
payload; kernels/quantize.py.

Decisions where the paper is silent:

* One byte for sign and exponent, relative to the piece's max: the paper sends float32's sign
  and 8 exponent bits (9 bits an entry); a 7-bit offset from the largest exponent covers 126
  binades below the max, far more than float32 gradients use within one tensor.
* Entries below the smallest code, |x| < 2**(emax-125), round to 2**(emax-125) with probability
  |x| / 2**(emax-125), else to 0: stochastic flushing, so they stay unbiased (the paper's
  scheme would round them to powers the byte cannot hold).
* An entry in float32's top binade (|x| >= 2**127) rounds down to 2**127, since 2**128 is no
  float32: biased there, and only there. A piece holding NaN or Inf decodes to NaN.
* ``error_feedback=False`` by default, as in the paper (it is unbiased; the paper's theory is for
  unbiased compressors without memory). Seeds and noise: methods/quantized.py.
"""
from typing import Any

from ..kernels import quantize
from .quantized import Quantized


class Natural(Quantized):
    """``Natural(seed=0)``."""

    name = "natural"
    PAPER = 'Horváth et al., 2019'
    PAYLOAD = '2**emax of the tensor (float32), then one byte per entry: sign and a power of two below it, stochastically rounded, unbiased; no error feedback by default'
    EXAMPLES = ('natural', 'natural:communication=twophase', 'natural:error_feedback=true')

    def __init__(self, *, seed: int = 0, error_feedback: bool = False, **kwargs: Any) -> None:
        super().__init__(quantize.NATURAL_POWERS, 1, seed=seed, error_feedback=error_feedback, **kwargs)
