"""A momentum buffer folded into error-feedback memory, on CUDA: the same functions as
momentum_cpu."""
import numpy as np
from numba import cuda

from .cuda_launch import THREADS, blocks


@cuda.jit
def _accumulate(acc, grad, u, decay, gain):
    i = cuda.grid(1)
    if i < acc.size:
        g = grad[i]
        v = decay * u[i] + gain * g
        u[i] = v
        acc[i] = (acc[i] - g) + v


@cuda.jit
def _mask(u, indices):
    j = cuda.grid(1)
    if j < indices.size:
        u[indices[j]] = 0.0


def accumulate(acc, grad, u, decay: float, gain: float, stream=0) -> None:
    """u = decay * u + gain * grad; acc = (acc - grad) + u; float32 throughout."""
    _accumulate[blocks(acc.size), THREADS, stream](acc, grad, u, np.float32(decay), np.float32(gain))


def mask(u, indices, stream=0) -> None:
    """u[indices] = 0."""
    if indices.size:
        _mask[blocks(indices.size), THREADS, stream](u, indices)
