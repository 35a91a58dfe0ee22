"""AdaComp selection on the CPU (Numba): Chen et al., AAAI 2018, arXiv 1712.02679.

With G = residual + gradient (``acc``) and H = G + gradient, in bins of ``bin_size``
consecutive elements: g_max(b) = max |G_i| over bin b; element i is sent when
|H_i| >= g_max(bin of i) > 0, as its index and the sign of G_i. One scale per tensor, the mean of
g_max over all bins; the receiver rebuilds sign * scale. ``acc`` is left holding G minus what
was sent: the new residual.

Sent entries are int32 codes: i for a non-negative G_i, ~i (= -i - 1) for a negative one.
"""
import math

import numpy as np
from numba import njit, prange
from numba.cpython.unsafe.numbers import trailing_zeros  # LLVM's cttz, as Numba's own code uses

from .compensate_cpu import FLOAT32_MAX
from .threads import serial_and_parallel

#: the functions adacomp_cuda offers too (kernels/__init__.py checks), and those only here
SHARED = ('select', 'decode_add')
CPU_ONLY = ('fold_select', 'decode_add_all')

_MAGNITUDE = np.uint32(0x7FFFFFFF)  # all bits of a float32 but the sign
_ONE = np.uint64(1)


def _group_bins(bin_size: int) -> int:
    """Bins per group: the fewest whole bins that also fill whole 64-bit mask words, so that
    groups own their mask words and run in parallel. At most 64."""
    return 64 // math.gcd(bin_size, 64)


@serial_and_parallel
def _bin_max_and_mask(acc, grad, bin_size, group_bins, gmax, masks, sent, fold, keep):
    """Per bin: g_max into ``gmax``; bit i of ``masks`` (zeroed) set where element i is sent;
    ``sent[group]``: how many of its group's elements are. With ``fold``, each bin first folds
    the gradient into ``acc`` (``acc += grad``, or ``acc = grad`` without ``keep``) while it is
    read anyway: the residual's fold costs no pass of its own. Returns the number of non-finite
    entries of ``grad`` (0 without ``fold``).

    The maximum is taken over the magnitude bits (sign cleared) as unsigned integers, which
    order like the floats they encode: an integer max reduction vectorizes, a float one does
    not (measured, the maximum alone, 25M elements, bins of 500, serial: 11 ms against 48 ms).
    Tried and not kept, no faster over the whole select (within 2%): 32-bit mask words with a
    popcount, and a byte per element packed into words by multiplication."""
    bits = acc.view(np.uint32)
    gmax_bits = gmax.view(np.uint32)
    bad = 0
    for grp in prange(sent.size):
        count = 0
        for b in range(grp * group_bins, min(gmax.size, (grp + 1) * group_bins)):
            lo = b * bin_size
            if fold:
                a = acc[lo:lo + bin_size]
                d = grad[lo:lo + bin_size]
                for i in range(a.size):
                    a[i] = a[i] + d[i] if keep else d[i]
                    bad += not (abs(d[i]) <= FLOAT32_MAX)  # false for NaN and +-Inf
            u = bits[lo:lo + bin_size]  # loops over a slice from 0 vectorize
            mb = np.uint32(0)
            for i in range(u.size):
                mb = max(mb, np.uint32(u[i] & _MAGNITUDE))  # 8 lanes, not 4 of uint64
            gmax_bits[b] = mb
            m = gmax[b]
            if m > 0:
                # One 64-bit word of the bin at a time, branch-free: the word's bits are an OR
                # reduction, which vectorizes; the bin's share of a word it shares with its
                # neighbours is OR-ed in.
                hi = lo + u.size
                start = lo
                while start < hi:
                    stop = min(hi, (start | 63) + 1)
                    g = acc[start:stop]
                    d = grad[start:stop]
                    shift = start & 63
                    w = np.uint64(0)
                    for i in range(g.size):
                        take = abs(g[i] + d[i]) >= m
                        w |= np.uint64(take) << np.uint64(i + shift)
                        count += take
                    masks[start >> 6] |= w
                    start = stop
        sent[grp] = count
    return bad


@serial_and_parallel
def _emit(acc, masks, group_words, offsets, sent, scale, codes):
    """Writes group g's ``sent[g]`` codes from ``offsets[g]`` on, from its mask words, and
    takes what they send off ``acc``.

    The cost follows the entries sent, not the elements: each set bit is found with one
    count-trailing-zeros, and a word's loop runs once per set bit, so the only branches that
    depend on the data are one loop exit per non-zero word; groups without any are skipped.
    The sign picks by select, not branch. The emit used to test every element again
    (re-reading the gradient) behind a branch that, at the 10-20% of elements a bin of random
    gradient sends, was mispredicted often: measured (25M elements, bins of 500, 11% sent,
    serial) 70 ms against 16 ms like this."""
    for grp in prange(sent.size):
        if sent[grp] == 0:
            continue
        j = offsets[grp]
        for q in range(grp * group_words, min(masks.size, (grp + 1) * group_words)):
            w = masks[q]
            while w:
                i = q * 64 + trailing_zeros(w)
                w &= w - _ONE
                v = acc[i]
                negative = v < 0
                codes[j] = ~i if negative else i
                acc[i] = v + scale if negative else v - scale
                j += 1


def select(acc: np.ndarray, grad: np.ndarray, bin_size: int) -> tuple[np.float32, np.ndarray]:
    """Returns (scale, codes) and leaves the residual in ``acc``.

    Two passes: the first reads ``acc`` and ``grad`` once, a bin at a time (a bin's second
    look hits the cache), and writes one mask bit per element (n/8 bytes); the second reads the
    mask and touches only the elements sent.

    Measured as bench/kernels.py runs it (the residual folded with the finite check first,
    25M elements, bins of 500, about 19% sent after a few steps of error feedback): 65 ms a step
    serial (thread CPU time) against 174 ms with the per-element branch this replaced; 35 ms
    against 92 ms with the parallel build on 2 cores (wall), copy_ 9 ms. The two passes are
    bitwise the numpy reference (tests/references.py)."""
    return _select(acc, grad, bin_size, False, True)[:2]


def fold_select(acc: np.ndarray, grad: np.ndarray, keep: bool,
                bin_size: int) -> tuple[np.float32, np.ndarray] | None:
    """``compensate_cpu.fold(acc, grad, keep)`` then ``select(acc, grad, bin_size)``, bitwise,
    with the fold inside the first pass; None when ``grad`` holds NaN or Inf (``acc`` then
    holds anything). Measured against the two calls, medians, same process: 2.4M elements in
    cache, bins of 500, 1.13 ms against 1.49; bins of 50, 1.91 against 1.97; 25M elements,
    serial, bins of 500, 35 ms against 43; bins of 50, within noise (43 against 42)."""
    scale, codes, bad = _select(acc, grad, bin_size, True, keep)
    return None if bad else (scale, codes)


def _select(acc, grad, bin_size, fold, keep):
    bins = (acc.size + bin_size - 1) // bin_size
    group_bins = _group_bins(bin_size)
    group_words = group_bins * bin_size // 64
    gmax = np.empty(bins, np.float32)
    masks = np.zeros((acc.size + 63) // 64, np.uint64)
    sent = np.empty((bins + group_bins - 1) // group_bins, np.int64)
    bad = _bin_max_and_mask(acc, grad, bin_size, group_bins, gmax, masks, sent, fold, keep)
    if bad:
        return np.float32(0), np.empty(0, np.int32), bad
    scale = np.float32(gmax.mean(dtype=np.float64)) if bins else np.float32(0)
    offsets = np.zeros(sent.size, np.int64)
    np.cumsum(sent[:-1], out=offsets[1:])
    codes = np.empty(int(sent.sum()), np.int32)
    _emit(acc, masks, group_words, offsets, sent, scale, codes)
    return scale, codes, 0


@njit(cache=True)
def decode_add(scale, codes, out):
    """out[i] += scale[0] for code i >= 0; out[~code] -= scale[0] otherwise.

    By select, not branch: signs are about even, so a branch on them was mispredicted about
    every other code. Adding -scale is subtracting scale, bit for bit. Measured (4 payloads of
    a 2.4M-element tensor, about 20% sent, serial): 2.6 ms against 9.1 ms.

    A code whose index is outside ``out`` (a damaged payload: methods/adacomp.py) is skipped,
    never written; returns how many were. The check is one compare and a branch a sound
    payload always takes, never mispredicted; the index is unsigned, which spares Numba's
    wraparound of negative ones, so the checked loop is no slower than the unchecked one it
    replaced. Measured, AdaComp's ``decode_add_all`` of 4 payloads (about 11% sent; length
    checks included), serial, medians, interleaved in one process: 2.4M elements 0.61 ms
    against 0.73 ms unchecked; 25M elements 16.6 ms against 16.7 ms."""
    s = scale[0]
    n = out.size
    bad = 0
    for j in range(codes.size):
        c = codes[j]
        negative = c < 0
        i = np.uint32(~c if negative else c)
        if i < n:
            out[i] += -s if negative else s
        else:
            bad += 1
    return bad


@njit(cache=True)
def decode_add_all(buffer, starts, lengths, out):
    """``decode_add`` of each payload, in order: payload r is ``lengths[r]`` bytes from
    ``buffer[starts[r]]``, the scale (float32) then the codes (int32).

    Why: one call for all of a tensor's payloads instead of one a payload saves the
    Python-level slicing, wrapping and dispatch of the others (some microseconds each), which
    small tensors feel; AdaComp's large payloads hardly do (ResNet-18's tensors, 4 payloads,
    serial: 23.0 ms against 24.1 ms). Each payload is still added whole, in order, so the sum
    is bitwise that of the calls. Tried and not kept: adding every payload to one block of
    ``out`` at a time (the indices increase), so that ``out`` crosses memory once, not p
    times: slower (25M elements, 4 payloads of 11%: 59 ms against 54 ms), the per-code test
    for the block's end costing more than the sweeps it saves. Returns how many codes, over
    all payloads, had an index outside ``out`` (skipped, as in ``decode_add``)."""
    bad = 0
    for r in range(starts.size):
        payload = buffer[starts[r]:starts[r] + lengths[r]]
        bad += decode_add(payload[:4].view(np.float32), payload[4:].view(np.int32), out)
    return bad
