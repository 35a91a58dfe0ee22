"""1-bit quantization with error feedback on CUDA (numba.cuda), the same functions as
onebit_cpu and the same bit layout (element 8b+j in bit j of byte b; group of i is i % groups).
"""
import numpy as np
from numba import cuda

from .cuda_launch import MAX_STRIDED_THREADS, THREADS, blocks, zeros
from .onebit_cpu import group_sizes, scales


@cuda.jit
def _sums(acc, groups, lanes, sums):
    """Thread t sums group t % groups over every ``lanes``-th member, then adds its partial
    sums once (few atomics, whatever the group count)."""
    t = cuda.grid(1)
    if t >= groups * lanes:
        return
    g = t % groups
    negatives = 0.0
    non_negatives = 0.0
    count = 0.0
    for i in range(g + groups * (t // groups), acc.size, groups * lanes):
        v = acc[i]
        if v >= 0:
            non_negatives += v
            count += 1
        else:
            negatives += v
    cuda.atomic.add(sums, (g, 0), negatives)
    cuda.atomic.add(sums, (g, 1), non_negatives)
    cuda.atomic.add(sums, (g, 2), count)


@cuda.jit
def _pack(acc, low, high, bits):
    b = cuda.grid(1)
    if b < bits.size:
        byte = 0
        for j in range(min(8, acc.size - 8 * b)):
            i = 8 * b + j
            g = i % low.size
            if acc[i] >= 0:
                byte |= 1 << j
                acc[i] -= high[g]
            else:
                acc[i] -= low[g]
        bits[b] = byte


@cuda.jit
def _unpack_add(bits, low, high, out):
    i = cuda.grid(1)
    if i < out.size:
        g = i % low.size
        out[i] += high[g] if (bits[i >> 3] >> (i & 7)) & 1 else low[g]


def quantize(acc, groups: int, scaling: str, stream=0):
    """(low, high, bits) on the device; leaves the residual in ``acc`` (see onebit_cpu)."""
    n = acc.size
    lanes = max(1, min(n // groups, MAX_STRIDED_THREADS // groups))
    sums = zeros((groups, 3), np.float64, stream)
    _sums[blocks(groups * lanes), THREADS, stream](acc, groups, lanes, sums)
    negatives, non_negatives, count_high = sums.copy_to_host(stream=stream).T
    low, high = scales(negatives, non_negatives, count_high, group_sizes(n, groups), scaling)
    low, high = cuda.to_device(low, stream=stream), cuda.to_device(high, stream=stream)
    bits = cuda.device_array((n + 7) // 8, np.uint8, stream=stream)
    _pack[blocks(bits.size), THREADS, stream](acc, low, high, bits)
    return low, high, bits


def dequantize_add(bits, low, high, out, stream=0) -> None:
    """onebit_cpu.dequantize_add: the caller checks the sizes."""
    _unpack_add[blocks(out.size), THREADS, stream](bits, low, high, out)
