"""Threshold sparsification on CUDA: topk_cuda's count and take with the threshold given.

topk_cuda's kernels test |acc| >= t; ``t`` = the next float32 above ``thr`` makes that exactly
|acc| > thr. Entries come out in no particular order, each index once.
"""
import numpy as np

from .cuda_launch import THREADS, strided_blocks, zeros
from .topk_cuda import _count_at_least, _take_all, _trimmed


def select(acc, thr: float, stream=0):
    """(values, indices) of every |acc| > thr, zeroed in ``acc`` (see threshold_cpu)."""
    t = np.nextafter(np.float32(thr), np.float32(np.inf))
    count = zeros(1, np.int64, stream)
    _count_at_least[strided_blocks(acc.size), THREADS, stream](acc, t, count)
    c = int(count.copy_to_host(stream=stream)[0])
    return _trimmed(*_take_all(acc, t, True, c, stream), stream)
