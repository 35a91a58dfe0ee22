"""AdaComp selection on CUDA (numba.cuda), the same functions and codes as adacomp_cpu.

One thread per bin. Each bin reserves its slots with one atomic add, so bins come out in no
particular order, in index order within a bin; every index appears once, which keeps
``decode_add`` race-free and deterministic.
"""
import numpy as np
from numba import cuda

from .cuda_launch import THREADS, blocks, zeros


@cuda.jit
def _bin_max_and_count(acc, grad, bin_size, gmax, sent, totals):
    b = cuda.grid(1)
    if b < gmax.size:
        lo = b * bin_size
        hi = min(acc.size, lo + bin_size)
        m = np.float32(0.0)
        for i in range(lo, hi):
            m = max(m, abs(acc[i]))
        count = 0
        if m > 0:
            for i in range(lo, hi):
                if abs(acc[i] + grad[i]) >= m:
                    count += 1
        gmax[b] = m
        sent[b] = count
        cuda.atomic.add(totals, 0, np.float64(m))
        cuda.atomic.add(totals, 1, np.float64(count))


@cuda.jit
def _emit(acc, grad, bin_size, gmax, sent, scale, codes, counter):
    b = cuda.grid(1)
    if b < gmax.size and sent[b] > 0:
        m = gmax[b]
        j = cuda.atomic.add(counter, 0, sent[b])
        for i in range(b * bin_size, min(acc.size, (b + 1) * bin_size)):
            if abs(acc[i] + grad[i]) >= m:
                if acc[i] >= 0:
                    codes[j] = i
                    acc[i] -= scale
                else:
                    codes[j] = ~i
                    acc[i] += scale
                j += 1


@cuda.jit
def _decode_add(scale, codes, out, bad):
    j = cuda.grid(1)
    if j < codes.size:
        c = codes[j]
        i = c if c >= 0 else ~c
        if i >= out.size:  # a damaged payload: skipped and counted
            cuda.atomic.add(bad, 0, 1)
        elif c >= 0:
            out[i] += scale[0]
        else:
            out[i] -= scale[0]


def select(acc, grad, bin_size: int, stream=0):
    """(scale, codes) with the scale as a host float32; leaves the residual in ``acc``."""
    bins = (acc.size + bin_size - 1) // bin_size
    gmax = cuda.device_array(bins, np.float32, stream=stream)
    sent = cuda.device_array(bins, np.int32, stream=stream)
    totals = zeros(2, np.float64, stream)
    _bin_max_and_count[blocks(bins), THREADS, stream](acc, grad, bin_size, gmax, sent, totals)
    gmax_sum, count = totals.copy_to_host(stream=stream)
    scale = np.float32(gmax_sum / bins)
    codes = cuda.device_array(int(count), np.int32, stream=stream)
    _emit[blocks(bins), THREADS, stream](acc, grad, bin_size, gmax, sent, scale, codes,
                                         zeros(1, np.int32, stream))
    return scale, codes


def decode_add(scale, codes, out, stream=0) -> int:
    """out[i] += scale[0] for code i >= 0; out[~code] -= scale[0] otherwise. A code whose index
    is outside ``out`` is skipped, never written; returns how many were (adacomp_cpu), counted
    on the device and copied back: one stream synchronization a call."""
    if not codes.size:
        return 0
    bad = zeros(1, np.int64, stream)
    _decode_add[blocks(codes.size), THREADS, stream](scale, codes, out, bad)
    return int(bad.copy_to_host(stream=stream)[0])
