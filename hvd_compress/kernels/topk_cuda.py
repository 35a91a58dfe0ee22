"""Top-k selection with error feedback on CUDA (numba.cuda), the same functions as topk_cpu.

Selected entries are compacted through an atomic counter, so they come out in no particular
order; each index appears once, which keeps ``scatter_add`` race-free and deterministic.
Thresholds: exact mode finds the k-th largest magnitude by a 4-pass radix select over the float
bits (|x| as int32 orders like x); sampled mode estimates it from a strided 1% sample.
"""
import numpy as np
from numba import cuda

from .cuda_launch import THREADS, blocks, strided_blocks, zeros

_MAGNITUDE = 0x7FFFFFFF


@cuda.jit
def _histogram(bits, prefix, mask, shift, hist):
    local = cuda.shared.array(256, np.int32)
    t = cuda.threadIdx.x
    local[t] = 0  # THREADS == 256: one bin per thread
    cuda.syncthreads()
    for i in range(cuda.grid(1), bits.size, cuda.gridsize(1)):
        b = bits[i] & _MAGNITUDE
        if (b & mask) == prefix:
            cuda.atomic.add(local, (b >> shift) & 0xFF, 1)
    cuda.syncthreads()
    if local[t]:
        cuda.atomic.add(hist, t, local[t])


@cuda.jit
def _count_at_least(acc, thr, count):
    c = 0
    for i in range(cuda.grid(1), acc.size, cuda.gridsize(1)):
        if abs(acc[i]) >= thr:
            c += 1
    if c:
        cuda.atomic.add(count, 0, c)


@cuda.jit
def _take(acc, thr, inclusive, values, indices, counter):
    i = cuda.grid(1)
    if i < acc.size:
        m = abs(acc[i])
        if m > thr or (inclusive and m == thr):
            j = cuda.atomic.add(counter, 0, 1)
            if j < values.size:  # past capacity an entry stays in the residual
                values[j] = acc[i]
                indices[j] = i
                acc[i] = 0.0


@cuda.jit
def _gather_strided(acc, stride, sample):
    j = cuda.grid(1)
    if j < sample.size:
        sample[j] = abs(acc[j * stride])


def kth_largest_magnitude(acc, k: int, stream=0) -> np.float32:
    """The k-th largest |acc| (1-based), by radix select on the float bits."""
    bits = acc.view(np.int32)
    prefix = mask = 0
    for shift in (24, 16, 8, 0):
        hist = zeros(256, np.int32, stream)
        _histogram[strided_blocks(bits.size), THREADS, stream](
            bits, np.int32(prefix), np.int32(mask), shift, hist)
        counts = hist.copy_to_host(stream=stream)
        above = 0
        for b in range(255, -1, -1):
            if above + counts[b] >= k:
                break
            above += counts[b]
        k -= above
        prefix |= b << shift
        mask |= (0xFF << shift) & _MAGNITUDE
    return np.int32(prefix).view(np.float32)


def _take_all(acc, thr, inclusive: bool, capacity: int, stream, into=None):
    values, indices, counter = into or (cuda.device_array(capacity, np.float32, stream=stream),
                                        cuda.device_array(capacity, np.int32, stream=stream),
                                        zeros(1, np.int64, stream))
    _take[blocks(acc.size), THREADS, stream](acc, thr, inclusive, values, indices, counter)
    return values, indices, counter


def _trimmed(values, indices, counter, stream):
    count = min(int(counter.copy_to_host(stream=stream)[0]), values.size)
    return values[:count], indices[:count]


def select(acc, k: int, exact: bool, stream=0):
    """(values, indices) of about (sampled) or exactly (exact) the k largest |acc|; zeroes them
    in ``acc``. Sampled mode keeps 0.8k to 1.3k entries and otherwise falls back to exact."""
    if not exact:
        stride = 100
        sample = cuda.device_array((acc.size + stride - 1) // stride, np.float32, stream=stream)
        _gather_strided[blocks(sample.size), THREADS, stream](acc, stride, sample)
        magnitudes = sample.copy_to_host(stream=stream)
        ks = max(1, int(round(k * sample.size / acc.size)))
        thr = np.partition(magnitudes, magnitudes.size - ks)[magnitudes.size - ks]
        count = zeros(1, np.int64, stream)
        _count_at_least[strided_blocks(acc.size), THREADS, stream](acc, thr, count)
        c = int(count.copy_to_host(stream=stream)[0])
        if thr > 0 and 0.8 * k <= c <= 1.3 * k:
            return _trimmed(*_take_all(acc, thr, True, c, stream), stream)
    thr = kth_largest_magnitude(acc, k, stream)
    taken = _take_all(acc, thr, False, k, stream)  # everything strictly above: fewer than k
    if thr > 0:  # then ties at the threshold up to k; zeros are not worth sending
        taken = _take_all(acc, thr, True, k, stream, into=taken)
    return _trimmed(*taken, stream)
