"""Counter-based uniform random numbers for the stochastic kernels (QSGD, TernGrad, natural),
and the seeds of one encode (``step_seed``: Random-k's and the quantizers').

u(seed, i) is the i-th output of Vigna's splitmix64 generator started at ``seed``, its top 24
bits as a float32 in [0, 1) (multiples of 2**-24):

    z = seed + (i + 1) * 0x9E3779B97F4A7C15        (mod 2**64)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    z =  z ^ (z >> 31)
    u = (z >> 40) * 2**-24

A pure function of (seed, i): no state, so every element draws independently in any order, on
any thread, and the CPU build, the CUDA build and the numpy reference draw the same numbers.
``uniform`` is plain Python over numpy uint64 scalars, compiled by the kernels that use it
(``njit`` here, ``cuda.jit(device=True)`` in the CUDA modules).
"""
import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# Numba turns uint64 (op) int64 into float64: every constant stays uint64.
_ONE, _S30, _S27, _S31, _S40 = (np.uint64(v) for v in (1, 30, 27, 31, 40))
_ULP24 = np.float32(2.0 ** -24)


def uniform(seed: np.uint64, index: int) -> np.float32:
    z = seed + (np.uint64(index) + _ONE) * _GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    z = z ^ (z >> _S31)
    return np.float32(z >> _S40) * _ULP24


# Inlined into the element loops, which then still vectorize.
uniform_cpu = njit(inline="always", cache=True)(uniform)


_MASK64 = (1 << 64) - 1
#: seeds travel as a non-negative int64
SEED_MASK = (1 << 63) - 1


def _finalize(z: int) -> int:
    """splitmix64's finalizer on a Python int (mod 2**64)."""
    z = ((z ^ (z >> 30)) * int(_MIX1)) & _MASK64
    z = ((z ^ (z >> 27)) * int(_MIX2)) & _MASK64
    return z ^ (z >> 31)


def step_seed(seed: int, step: int, n: int) -> int:
    """The seed of one encode: a hash of the user's seed, the tensor's encode count and its
    length (so that tensors of different sizes in one step do not share a pattern), < 2**63.
    The same on every rank that made the same number of encodes of the tensor."""
    z = seed & _MASK64
    for word in (step, n):
        z = _finalize((z + (word & _MASK64) * int(_GOLDEN)) & _MASK64)
    return z & SEED_MASK
