"""Threshold sparsification on the CPU: every entry with |acc| > thr, taken out of ``acc``.

Nothing new: topk_cpu's two passes (count per chunk, then take) with the threshold given instead
of estimated, and no entries at the threshold itself. Indices come out ascending.
"""
import numpy as np

from .topk_cpu import _select, count_at_least

#: the functions threshold_cuda offers too (kernels/__init__.py checks), and those only here
SHARED = ('select',)
CPU_ONLY = ()


def select(acc: np.ndarray, thr: float) -> tuple[np.ndarray, np.ndarray]:
    """(values, indices ascending) of every |acc| > thr; zeroes them in ``acc``, which leaves
    the new residual there."""
    thr = np.float32(thr)
    above, equal = count_at_least(acc, thr)
    return _select(acc, thr, above, equal, 0)
