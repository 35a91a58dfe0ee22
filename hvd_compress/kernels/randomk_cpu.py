"""Random-k on the CPU (Numba): the k indices a seed picks out of n, gathered and scattered.

The indices are the images of 0, 1, ..., k-1 under a pseudo-random permutation of range(n): a
4-round Feistel network on ``bits = (n-1).bit_length()``-bit integers, its round function the
splitmix64 finalizer keyed by the seed, brought into range(n) by cycle walking (apply it again
while the result is >= n; since 2**bits < 2n that is under 2 applications on average). Images of
a permutation are distinct, so the k indices are a sample without replacement, and each one is a
pure function of (seed, j): any rank, on CPU or GPU, regenerates them from the 8-byte seed, and
every j is independent work (no sort, no hash set, as Floyd's algorithm would need). They come
out in no particular order; sorting them for locality would cost more than the k cache misses it
saves (k is small next to n).

Seeds are below 2**63 so that they travel as a non-negative int64.
"""
import numpy as np
from numba import njit, prange

from .threads import serial_and_parallel

#: the functions randomk_cuda offers too (kernels/__init__.py checks), and those only here
SHARED = ('select', 'decode_add')
CPU_ONLY = ()

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ONE = np.uint64(1)
ROUNDS = 4


@njit(cache=True, inline="always")
def _mix(z):
    """splitmix64's finalizer: a bijection of uint64 that scrambles every bit into every bit."""
    z = (z ^ (z >> 30)) * _M1
    z = (z ^ (z >> 27)) * _M2
    return z ^ (z >> 31)


@njit(cache=True, inline="always")
def _key(seed, r):
    return _mix(np.uint64(seed) + np.uint64(r + 1) * _GOLDEN)


@njit(cache=True, inline="always")
def _index(j, n, bits, k0, k1, k2, k3):
    """The image of j < n under the seed's permutation of range(n)."""
    x = np.uint64(j)
    while True:
        lo_bits = bits // 2
        hi_bits = bits - lo_bits
        for r in range(ROUNDS):
            key = k0 if r == 0 else (k1 if r == 1 else (k2 if r == 2 else k3))
            lo = x & ((_ONE << np.uint64(lo_bits)) - _ONE)
            hi = x >> np.uint64(lo_bits)
            f = _mix(lo ^ key) & ((_ONE << np.uint64(hi_bits)) - _ONE)
            x = (lo << np.uint64(hi_bits)) | (hi ^ f)
            lo_bits, hi_bits = hi_bits, lo_bits
        if x < np.uint64(n):
            return np.int64(x)


@serial_and_parallel
def _gather(acc, k, seed, values):
    n = acc.size
    bits = np.int64(0)
    while (np.int64(1) << bits) < n:
        bits += 1
    k0, k1, k2, k3 = _key(seed, 0), _key(seed, 1), _key(seed, 2), _key(seed, 3)
    for j in prange(k):
        i = _index(j, n, bits, k0, k1, k2, k3)
        values[j] = acc[i]
        acc[i] = 0.0


@serial_and_parallel
def _scatter(out, values, seed):
    n = out.size
    bits = np.int64(0)
    while (np.int64(1) << bits) < n:
        bits += 1
    k0, k1, k2, k3 = _key(seed, 0), _key(seed, 1), _key(seed, 2), _key(seed, 3)
    for j in prange(values.size):  # distinct indices: no two iterations touch one element
        out[_index(j, n, bits, k0, k1, k2, k3)] += values[j]


@njit(cache=True)
def _indices(n, k, seed, out):
    bits = np.int64(0)
    while (np.int64(1) << bits) < n:
        bits += 1
    k0, k1, k2, k3 = _key(seed, 0), _key(seed, 1), _key(seed, 2), _key(seed, 3)
    for j in range(k):
        out[j] = _index(j, n, bits, k0, k1, k2, k3)



def indices(n: int, k: int, seed: int) -> np.ndarray:
    """The k distinct indices (int32) ``seed`` picks out of range(n), in payload order."""
    out = np.empty(k, np.int32)
    _indices(n, k, np.int64(seed), out)
    return out


def select(acc: np.ndarray, k: int, seed: int) -> np.ndarray:
    """The values at the k indices ``seed`` picks, in payload order; zeroes them in ``acc``,
    which leaves the new residual there."""
    values = np.empty(k, np.float32)
    _gather(acc, k, np.int64(seed), values)
    return values


def decode_add(seed: np.ndarray, values: np.ndarray, out: np.ndarray) -> None:
    """out[index j of seed[0]] += values[j]; ``seed`` is the payload's 1-element int64 array.
    Any seed's indices lie inside ``out`` (images of a permutation of range(out.size)); only
    values.size must be at most out.size, which the caller checks (methods/randomk.py)."""
    _scatter(out, values, np.int64(seed[0]))
