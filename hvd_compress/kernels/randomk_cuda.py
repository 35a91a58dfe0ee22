"""Random-k on CUDA (numba.cuda): the same functions and the same indices as randomk_cpu.

One thread per sent entry. The seed stays on the device (``decode_add`` reads it from the
payload), so decoding needs no copy to the host; each thread derives the round keys itself.
"""
import numpy as np
from numba import cuda

from .cuda_launch import THREADS, blocks
from .randomk_cpu import ROUNDS

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ONE = np.uint64(1)


@cuda.jit(device=True)
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@cuda.jit(device=True)
def _index(j, n, seed):
    """randomk_cpu._index, with the round keys derived from ``seed`` here."""
    s = np.uint64(seed)
    bits = 0
    while (1 << bits) < n:
        bits += 1
    x = np.uint64(j)
    while True:
        lo_bits = bits // 2
        hi_bits = bits - lo_bits
        for r in range(ROUNDS):
            key = _mix(s + np.uint64(r + 1) * _GOLDEN)
            lo = x & ((_ONE << np.uint64(lo_bits)) - _ONE)
            hi = x >> np.uint64(lo_bits)
            f = _mix(lo ^ key) & ((_ONE << np.uint64(hi_bits)) - _ONE)
            x = (lo << np.uint64(hi_bits)) | (hi ^ f)
            lo_bits, hi_bits = hi_bits, lo_bits
        if x < np.uint64(n):
            return np.int64(x)


@cuda.jit
def _gather(acc, seed, values):
    j = cuda.grid(1)
    if j < values.size:
        i = _index(j, acc.size, seed[0])
        values[j] = acc[i]
        acc[i] = 0.0


@cuda.jit
def _scatter(seed, values, out):
    j = cuda.grid(1)
    if j < values.size:  # distinct indices: race-free
        i = _index(j, out.size, seed[0])
        out[i] += values[j]


@cuda.jit
def _indices(n, seed, out):
    j = cuda.grid(1)
    if j < out.size:
        out[j] = _index(j, n, seed[0])


def _seed(seed: int, stream):
    return cuda.to_device(np.int64([seed]), stream=stream)


def indices(n: int, k: int, seed: int, stream=0):
    out = cuda.device_array(k, np.int32, stream=stream)
    if k:
        _indices[blocks(k), THREADS, stream](n, _seed(seed, stream), out)
    return out


def select(acc, k: int, seed: int, stream=0):
    """The values at the k indices ``seed`` picks, zeroed in ``acc`` (see randomk_cpu)."""
    values = cuda.device_array(k, np.float32, stream=stream)
    if k:
        _gather[blocks(k), THREADS, stream](acc, _seed(seed, stream), values)
    return values


def decode_add(seed, values, out, stream=0) -> None:
    """out[index j of seed[0]] += values[j]; ``seed``: the payload's 1-element int64 array.
    values.size must be at most out.size (randomk_cpu.decode_add)."""
    if values.size:
        _scatter[blocks(values.size), THREADS, stream](seed, values, out)
