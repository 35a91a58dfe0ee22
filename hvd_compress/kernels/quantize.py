"""Byte-code quantization shared by QSGD, TernGrad, u8bit and natural compression.

Each of the four turns a piece of n float32 entries into one float32 scale per bucket of
``bucket`` consecutive entries and one signed code per entry, ``bits`` = 8 or 2 bits wide
(two's complement), packed ``8 // bits`` to a byte: entry ``per * b + j`` in bits
``[bits * j, bits * (j + 1))`` of byte b. A method is a ``Scheme``: how the scales are
computed, how an entry becomes a code, and the magnitudes M[0] = 0 < M[1] < ... its codes
stand for. Code c decodes to

    v = float32(sign(c) * M[|c|] * float64(scale of its bucket))        (``table[field]``)

computed in float64 and rounded once, on every device: the CPU build, the CUDA build and the
numpy reference (tests/references.py) give the same bits, and no device can fuse the product
into its add (a float32 multiply-add would on CUDA). Encoding leaves ``acc - v`` in ``acc``
(the new residual, whether or not error feedback keeps it).

How an entry x of a bucket with scale s becomes a code (``element``), a = |x|:

* LINEAR (QSGD, TernGrad), ``levels`` L: q = a * (L / s) in float64, level = floor(q) + 1 with
  probability q - floor(q) (else floor(q)), capped at L; M[l] = l / L. Unbiased:
  E[v] = x up to the float rounding and the 2**-24 resolution of the uniform draws.
  ``clip`` caps a first (TernGrad's gradient clipping; infinity: off).
* NEAREST (u8bit): the code of the magnitude nearest to a / s (ties to the smaller one), by
  binary search over the midpoints of M. Deterministic, biased.
* NATURAL: s = 2**emax, emax the exponent of the piece's largest |x|. a in [2**e, 2**(e+1))
  rounds to 2**(e+1) with probability a / 2**e - 1, else to 2**e (unbiased); code k = emax + 2
  - r stands for 2**r, k = 1 .. 127, M[k] = 2**(2 - k). Entries below the smallest code,
  2**(emax - 125), round to it with probability a / 2**(emax - 125), else to 0 (unbiased
  too). 2**128 is no float32: an entry of float32's top binade rounds down to 2**127 (biased,
  only within a factor 2 of float32's max).

Non-finite input: the communicators never encode a gradient holding NaN or Inf
(communication/base.py); an ``acc`` that overflowed its residual still gives a defined
result: a NaN or Inf entry makes its bucket's scale non-finite (NaN for natural), every code of
that bucket 0, and the whole bucket decodes to NaN. A scale of 0 (an all-zero bucket) gives
codes 0, decoding to 0.

The element function is plain Python (``make_element``), like ``counter_rng.uniform``: the
CUDA build compiles it; the CPU build has a loop of its own per mode that LLVM can vectorize
(kernels/quantize_cpu.py says why), bitwise the same codes and values. ``encode`` and
``decode_add`` are written once over a build's primitives (``bucket_scales``, ``host``,
``device``, ``codes``, ``scaled_codes``: a bucketed scheme's scales and codes in one call, one
pass over the data on the CPU; ``decode``).
"""
import math
from dataclasses import dataclass

import numpy as np

LINEAR, NEAREST, NATURAL = 0, 1, 2
_INF = np.float32(np.inf)
_FLOAT32_MAX = np.float64(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Scheme:
    mode: int
    bits: int  # 8 or 2
    scale: str  # "l2" or "max" per bucket, or "pow2": 2**emax of the piece's max
    levels: int = 1  # LINEAR's L
    whole: bool = False  # one bucket for the whole piece

    @property
    def per_byte(self) -> int:
        return 8 // self.bits

    def magnitudes(self) -> np.ndarray:
        if self.mode == LINEAR:
            return np.arange(self.levels + 1) / np.float64(self.levels)
        if self.mode == NATURAL:
            return np.concatenate([[0.0], np.ldexp(1.0, 2 - np.arange(1, 128))])
        return dynamic_magnitudes()

    def table(self) -> np.ndarray:
        """float64 value of each ``bits``-wide field: sign(c) M[|c|], c the field as a signed
        integer; fields no encoder emits (|c| beyond M, e.g. -128) stand for 0."""
        m, size = self.magnitudes(), 1 << self.bits
        c = np.arange(size)
        c = np.where(c < size // 2, c, c - size)
        valid = np.abs(c) < m.size
        return np.where(valid, np.sign(c) * m[np.minimum(np.abs(c), m.size - 1)], 0.0)

    def midpoints(self) -> np.ndarray:
        m = self.magnitudes()
        return (m[:-1] + m[1:]) / 2 if self.mode == NEAREST else np.zeros(1)

    def buckets(self, n: int, bucket: int) -> int:
        return 1 if self.whole else -(-n // bucket)

    def payload_bytes(self, n: int, bucket: int) -> int:
        """Scales, then codes: exact."""
        return 4 * self.buckets(n, bucket) + -(-n // self.per_byte)


def qsgd(levels: int) -> Scheme:
    return Scheme(LINEAR, 8, "l2", levels)


TERNGRAD = Scheme(LINEAR, 2, "max", 1, whole=True)
U8BIT = Scheme(NEAREST, 8, "max")
NATURAL_POWERS = Scheme(NATURAL, 8, "pow2", whole=True)


def dynamic_magnitudes() -> np.ndarray:
    """Dettmers' dynamic tree (ICLR 2016) on 7 bits of magnitude (the 8th is the sign): a code's
    leading zeros E = 0..6 give the decade 10**-E, the first set bit ends them, and the 6 - E bits
    after it split [0.1, 1] linearly into 2**(6-E) steps. We take each step's upper end (Dettmers
    the middle) so that 1, a bucket's largest magnitude, is a code and travels exactly. 127 values
    from 1e-6 to 1, and 0 (all bits clear): 7 decades at a relative step of 0.9/2**(6-E)."""
    values = [0.0] + [10.0 ** -zeros * (0.1 + 0.9 * (j + 1) / 2 ** (6 - zeros))
                      for zeros in range(7) for j in range(2 ** (6 - zeros))]
    # float32 values: a product with a float32 scale is exact in float64
    return np.sort(np.float32(values)).astype(np.float64)


def make_element(uniform):
    """The code of one entry (see the module docstring), for a build whose compiled
    ``counter_rng.uniform`` is ``uniform``. ``inv`` is L / s (LINEAR), 1 / s (NEAREST, NATURAL),
    0 for a scale that is 0 or not finite; ``emax`` the exponent of s (NATURAL)."""

    def element(mode, x, inv, levels, clip, emax, seed, i, mids):
        a = abs(x)
        if mode == NATURAL:
            if not (a > 0 and inv > 0):
                return 0
            mantissa, exponent = math.frexp(a)  # a = mantissa 2**exponent, mantissa in [0.5, 1)
            e = exponent - 1
            lowest = emax - 125
            u = uniform(seed, i)
            if e >= lowest:
                r = e + (u < 2 * mantissa - 1)
                if r > 127:
                    r = 127
                k = emax + 2 - r
            else:
                k = 127 if u < math.ldexp(np.float64(a), int(-lowest)) else 0
            return -k if x < 0 else k
        if mode == LINEAR and a > clip:
            a = clip
        q = np.float64(a) * inv
        if not q > 0:  # zero, NaN, or a bucket with scale 0 or non-finite
            return 0
        if mode == NEAREST:  # how many midpoints lie below q
            lo = 0
            hi = mids.size
            while lo < hi:
                mid = (lo + hi) // 2
                if mids[mid] < q:
                    lo = mid + 1
                else:
                    hi = mid
            return -lo if x < 0 else lo
        if q >= levels:
            level = levels
        else:
            floor = math.floor(q)
            level = floor + (uniform(seed, i) < q - floor)
        return -level if x < 0 else level

    return element


def make_bucket_scale():
    """The scale of entries [lo, hi) of ``acc``: the L2 norm (float64 sum of squares in index
    order, saturated at float32's max unless infinite) or the largest |x| (NaN if any entry is
    NaN); plain Python, compiled by each build."""

    def bucket_scale(acc, lo, hi, l2):
        if l2:
            total = 0.0
            for i in range(lo, hi):
                v = np.float64(acc[i])
                total += v * v
            norm = math.sqrt(total)
            return _FLOAT32_MAX if norm > _FLOAT32_MAX and norm < np.inf else norm
        largest = np.float32(0)
        nan = False
        for i in range(lo, hi):
            a = abs(acc[i])
            if a > largest:
                largest = a
            nan |= a != a
        return np.nan if nan else np.float64(largest)

    return bucket_scale


def make_bucket_constants():
    """(inv, emax) of a bucket's scale for ``element``; plain Python, compiled by each build."""

    def constants(scale, levels):
        s = np.float64(scale)
        if not (s > 0 and s < np.inf):
            return 0.0, 0
        return np.float64(levels) / s, math.frexp(s)[1] - 1

    return constants


def whole_scale(scheme: Scheme, largest: float, clip: float) -> np.float32:
    """The one scale of a whole-piece scheme from the piece's largest |x|: TernGrad's max of the
    clipped entries, natural's 2**emax (NaN when an entry is not finite; 0 for all zeros)."""
    largest = np.float32(largest)
    if scheme.scale == "pow2":
        if not np.isfinite(largest):
            return np.float32(np.nan)
        return np.float32(0) if largest == 0 else np.ldexp(np.float32(1), np.frexp(largest)[1] - 1)
    return np.float32(clip) if largest > clip else largest  # a NaN max stays NaN


def encode(k, acc, scheme: Scheme, bucket: int, seed: int, clip: float = np.inf):
    """(scales, codes) of ``acc`` on build ``k`` (quantize_cpu, or quantize_cuda bound to a
    stream); leaves the residual in ``acc``. ``bucket`` is ignored by whole-piece schemes;
    ``seed`` (< 2**64) seeds the stochastic roundings."""
    mode_clip = np.float32(clip) if scheme.mode == LINEAR else _INF
    how = (scheme.bits, k.device(scheme.table()), scheme.mode, scheme.levels, mode_clip,
           np.uint64(seed), k.device(scheme.midpoints()))
    if not scheme.whole:
        return k.scaled_codes(acc, bucket, scheme.scale == "l2", *how)
    n = acc.size
    largest = k.host(k.bucket_scales(acc, n, False))[0]
    scales = k.device(np.float32([whole_scale(scheme, largest, clip)]))
    return scales, k.codes(acc, scales, n, *how)


def decode_add(k, scales, codes, out, scheme: Scheme, bucket: int) -> None:
    """out += the values (scales, codes) stand for. Every code is a field of the table, so
    only the sizes could reach outside the arrays: ``scales`` must hold one per bucket of
    ``out`` and ``codes`` out.size / (8 // bits) bytes (rounded up), which the caller checks
    (methods/quantized.py, the payload's exact length)."""
    bucket = out.size if scheme.whole else bucket
    k.decode(codes, scales, bucket, scheme.bits, k.device(scheme.table()), out)
