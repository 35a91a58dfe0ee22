"""AdaComp selection on the CPU (Numba): Chen et al., AAAI 2018, arXiv 1712.02679.

With G = residual + gradient (``acc``) and H = G + gradient, in bins of ``bin_size``
consecutive elements: g_max(b) = max |G_i| over bin b; element i is sent when
|H_i| >= g_max(bin of i) > 0, as its index and the sign of G_i. One scale per tensor, the mean of
g_max over all bins; the receiver rebuilds sign * scale. ``acc`` is left holding G minus what
was sent: the new residual.

Sent entries are int32 codes: i for a non-negative G_i, ~i (= -i - 1) for a negative one.
"""
import numpy as np
from numba import njit, prange

from .threads import serial_and_parallel


@serial_and_parallel
def _bin_max_and_count(acc, grad, bin_size, gmax, sent):
    for b in prange(gmax.size):
        g = acc[b * bin_size:(b + 1) * bin_size]  # loops over a slice from 0 vectorize
        d = grad[b * bin_size:(b + 1) * bin_size]
        m = np.float32(0.0)
        for i in range(g.size):
            m = max(m, abs(g[i]))
        count = 0
        if m > 0:
            for i in range(g.size):
                count += abs(g[i] + d[i]) >= m
        gmax[b] = m
        sent[b] = count


@serial_and_parallel
def _emit(acc, grad, bin_size, gmax, offsets, sent, scale, codes):
    """Writes bin b's ``sent[b]`` codes from ``offsets[b]`` on.

    Few entries are sent (0.2-2% on our models), so bins without any are skipped and a bin
    stops at its last code, and the per-element test stays a branch, which is then predictable.
    Measured (25M elements, bins of 50, 2% sent, serial): 24 ms like this, 29 ms without the
    skip and stop; a branch-free emit (every element writes a code to a cursor that moves by
    whether it was sent) 132 ms, and a branch-free pre-test of blocks of 16 elements 33 ms."""
    for b in prange(gmax.size):
        if sent[b] == 0:
            continue
        m = gmax[b]
        g = acc[b * bin_size:(b + 1) * bin_size]
        d = grad[b * bin_size:(b + 1) * bin_size]
        j, end = offsets[b], offsets[b] + sent[b]
        for i in range(g.size):
            if abs(g[i] + d[i]) >= m:
                if g[i] >= 0:
                    codes[j] = b * bin_size + i
                    g[i] -= scale
                else:
                    codes[j] = ~(b * bin_size + i)
                    g[i] += scale
                j += 1
                if j == end:
                    break


def select(acc: np.ndarray, grad: np.ndarray, bin_size: int) -> tuple[np.float32, np.ndarray]:
    """Returns (scale, codes) and leaves the residual in ``acc``."""
    bins = (acc.size + bin_size - 1) // bin_size
    gmax = np.empty(bins, np.float32)
    sent = np.empty(bins, np.int64)
    _bin_max_and_count(acc, grad, bin_size, gmax, sent)
    scale = np.float32(gmax.mean(dtype=np.float64)) if bins else np.float32(0)
    offsets = np.zeros(bins, np.int64)
    np.cumsum(sent[:-1], out=offsets[1:])
    codes = np.empty(int(sent.sum()), np.int32)
    _emit(acc, grad, bin_size, gmax, offsets, sent, scale, codes)
    return scale, codes


@njit(cache=True)
def decode_add(scale, codes, out):
    """out[i] += scale[0] for code i >= 0; out[~code] -= scale[0] otherwise."""
    s = scale[0]
    for j in range(codes.size):
        c = codes[j]
        if c >= 0:
            out[c] += s
        else:
            out[~c] -= s
