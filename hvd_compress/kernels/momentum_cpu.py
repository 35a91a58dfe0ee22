"""A momentum buffer folded into error-feedback memory, on the CPU (Numba). Used by DGC's
momentum correction and by Signum.

``acc`` holds residual + grad (the memory's buffer); ``accumulate`` turns it into
residual + u with u <- decay * u + gain * grad, in one pass. The residual is recovered as
acc - grad rather than kept apart, so with no residual (error feedback off: acc == grad) the
result is exactly u.
"""
import numpy as np
from numba import njit, prange

from .threads import serial_and_parallel

#: the functions momentum_cuda offers too (kernels/__init__.py checks), and those only here
SHARED = ('accumulate', 'mask')
CPU_ONLY = ()


@serial_and_parallel
def _accumulate(acc, grad, u, decay, gain):
    for i in prange(acc.size):
        g = grad[i]
        v = decay * u[i] + gain * g
        u[i] = v
        acc[i] = (acc[i] - g) + v


def accumulate(acc: np.ndarray, grad: np.ndarray, u: np.ndarray, decay: float, gain: float) -> None:
    """u = decay * u + gain * grad; acc = (acc - grad) + u; float32 throughout."""
    _accumulate(acc, grad, u, np.float32(decay), np.float32(gain))


@njit(cache=True)
def mask(u, indices):
    """u[indices] = 0: momentum factor masking, for the entries just sent."""
    for j in range(indices.size):
        u[indices[j]] = 0.0
