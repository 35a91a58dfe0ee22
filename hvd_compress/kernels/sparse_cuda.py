"""Decoding (value, index) pairs on CUDA: sparse_cpu.py's twin."""
import numpy as np
from numba import cuda

from .cuda_launch import THREADS, blocks, zeros


@cuda.jit
def scatter_add_kernel(values, indices, out, bad):
    j = cuda.grid(1)
    if j < values.size:
        i = indices[j]
        if 0 <= i < out.size:
            out[i] += values[j]
        else:  # a damaged payload: skipped and counted
            cuda.atomic.add(bad, 0, 1)


def scatter_add(values, indices, out, stream=0) -> int:
    """out[indices] += values; indices must be distinct (they are within one payload: a damaged
    payload's repeated index races, it is not out of bounds). An index outside ``out`` is
    skipped, never written; returns how many were (sparse_cpu.scatter_add), counted on the
    device and copied back: one stream synchronization a call."""
    if not values.size:
        return 0
    bad = zeros(1, np.int64, stream)
    scatter_add_kernel[blocks(values.size), THREADS, stream](values, indices, out, bad)
    return int(bad.copy_to_host(stream=stream)[0])
