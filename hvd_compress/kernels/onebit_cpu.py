"""1-bit quantization with error feedback on the CPU (Numba).

``acc`` (gradient + residual) is viewed as ``groups`` interleaved groups: element i belongs to
group ``i % groups`` (1 group: the whole tensor; ``cols`` groups: the columns of a row-major
(rows, cols) matrix). Each element becomes one bit, set when acc[i] >= 0, packed 8 to a byte,
element 8b+j in bit j of byte b. It is rebuilt from two values per group, ``low`` (bit clear)
and ``high`` (bit set). ``acc`` is left holding acc - rebuilt: the new residual.
"""
import numpy as np
from numba import njit, prange

from .threads import serial_and_parallel

_CHUNKS = 64  # partial sums per chunk, added up afterwards, keep the passes parallel


@serial_and_parallel
def _partial_sums(acc, groups):
    n = acc.size
    step = (n + _CHUNKS - 1) // _CHUNKS
    sums = np.zeros((_CHUNKS, groups, 3))  # sum of negatives, sum of non-negatives, count of non-negatives
    for c in prange(_CHUNKS):
        for i in range(c * step, min(n, (c + 1) * step)):
            g = i % groups
            v = acc[i]
            if v >= 0:
                sums[c, g, 1] += v
                sums[c, g, 2] += 1
            else:
                sums[c, g, 0] += v
    return sums


@njit(cache=True)
def _group_sums(sums, n):
    """Per group: (sum of negatives, sum of non-negatives, count of non-negatives, size)."""
    groups = sums.shape[1]
    total = np.zeros((groups, 4))
    for c in range(sums.shape[0]):
        for g in range(groups):
            for j in range(3):
                total[g, j] += sums[c, g, j]
    for g in range(groups):
        total[g, 3] = n // groups + (1 if g < n % groups else 0)
    return total


@serial_and_parallel
def _pack(acc, low, high, bits):
    n = acc.size
    groups = low.size
    for b in prange(bits.size):
        byte = 0
        for j in range(min(8, n - 8 * b)):
            i = 8 * b + j
            g = i % groups
            if acc[i] >= 0:
                byte |= 1 << j
                acc[i] -= high[g]
            else:
                acc[i] -= low[g]
        bits[b] = byte


def quantize(acc: np.ndarray, groups: int, scaling: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (low, high, packed bits) and leaves the residual in ``acc``.

    scaling="means" (Seide et al. 2014): low = mean of the negative entries, high = mean of the
    non-negative ones. scaling="l1" (Karimireddy et al. 2019, EF-SignSGD): high = ||acc||_1 / n,
    low = -high, per group.
    """
    total = _group_sums(_partial_sums(acc, groups), acc.size)
    negatives, non_negatives, count_high, size = total.T
    if scaling == "means":
        high = np.divide(non_negatives, count_high, out=np.zeros(groups), where=count_high > 0)
        count_low = size - count_high
        low = np.divide(negatives, count_low, out=np.zeros(groups), where=count_low > 0)
    else:
        high = (non_negatives - negatives) / size
        low = -high
    low, high = low.astype(np.float32), high.astype(np.float32)
    bits = np.empty((acc.size + 7) // 8, np.uint8)
    _pack(acc, low, high, bits)
    return low, high, bits


@serial_and_parallel
def dequantize_add(bits, low, high, out):
    """out[i] += high[g] if bit i is set else low[g], g = i % groups."""
    n = out.size
    groups = low.size
    for b in prange(bits.size):
        byte = bits[b]
        for j in range(min(8, n - 8 * b)):
            i = 8 * b + j
            if (byte >> j) & 1:
                out[i] += high[i % groups]
            else:
                out[i] += low[i % groups]
