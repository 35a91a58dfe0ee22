"""Top-k selection with error feedback on the CPU (Numba).

``acc`` holds gradient + residual. Selection copies the chosen entries out and zeroes them in
``acc``, which leaves exactly the new residual there.

``fold_topk_sampled`` does the whole step in one pass over the data: it estimates the
threshold from a strided sample of gradient + residual first (1% of the entries, read where
they lie), then one kernel adds the gradient into the residual, counts non-finite entries and
takes every entry at or above the threshold, a block of elements at a time while the block is
in cache. Done apart (the fold, a count pass, a take pass) that was three passes over the
data, and the take pass's per-element branches made it the slowest of them.
"""
import numpy as np
from numba import prange
from numba.cpython.unsafe.numbers import trailing_zeros  # LLVM's cttz

from .compensate_cpu import FLOAT32_MAX, fold
from .threads import serial_and_parallel, workers

#: the functions topk_cuda offers too (kernels/__init__.py checks), and those only here
SHARED = ('select',)
CPU_ONLY = ('fold_topk_sampled',)

# Work is split into this many contiguous chunks so that two passes (count, then write) can run
# in parallel and still emit indices in ascending order. Inner loops run over a slice from 0:
# Numba vectorizes those, not loops over range(lo, hi) (measured 4 ms against 28 ms a pass over
# 25M elements).
_CHUNKS = 64


@serial_and_parallel
def _count(acc, thr):
    n = acc.size
    step = (n + _CHUNKS - 1) // _CHUNKS
    above = np.zeros(_CHUNKS, np.int64)
    equal = np.zeros(_CHUNKS, np.int64)
    for c in prange(_CHUNKS):
        chunk = acc[c * step:(c + 1) * step]
        a = 0
        e = 0
        for i in range(chunk.size):
            m = abs(chunk[i])
            a += m > thr  # branch-free, so the loop vectorizes
            e += m == thr
        above[c] = a
        equal[c] = e
    return above, equal


@serial_and_parallel
def _take(acc, thr, above, equal, take_equal, values, indices):
    n = acc.size
    step = (n + _CHUNKS - 1) // _CHUNKS
    quota = np.empty(_CHUNKS, np.int64)
    start = np.empty(_CHUNKS, np.int64)
    eq_before = 0
    out = 0
    for c in range(_CHUNKS):
        quota[c] = min(equal[c], max(0, take_equal - eq_before))
        eq_before += equal[c]
        start[c] = out
        out += above[c] + quota[c]
    for c in prange(_CHUNKS):
        j = start[c]
        q = quota[c]
        chunk = acc[c * step:(c + 1) * step]
        for i in range(chunk.size):
            m = abs(chunk[i])
            take = m > thr
            if not take and m == thr and q > 0:
                take = True
                q -= 1
            if take:
                values[j] = chunk[i]
                indices[j] = c * step + i
                chunk[i] = 0.0
                j += 1
    return out


def count_at_least(acc: np.ndarray, thr: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Per chunk: how many |acc| > thr, and how many == thr."""
    return _count(acc, thr)


def _select(acc: np.ndarray, thr: np.float32, above: np.ndarray, equal: np.ndarray,
            k_equal: int) -> tuple[np.ndarray, np.ndarray]:
    """Takes every |acc| > thr and the first ``k_equal`` entries with |acc| == thr, given the
    per-chunk counts of both."""
    count = int(above.sum() + min(int(equal.sum()), k_equal))
    values = np.empty(count, np.float32)
    indices = np.empty(count, np.int32)
    _take(acc, thr, above, equal, k_equal, values, indices)
    return values, indices


def kth_largest_magnitude(x: np.ndarray, k: int) -> float:
    """The k-th largest |x| (1-based), by O(n) selection. Copies |x| twice: for samples (any
    stride); a whole tensor takes ``kth_largest_in_place``."""
    mags = np.abs(x)
    return float(np.partition(mags, mags.size - k)[mags.size - k])


_MAGNITUDE = 0x7FFFFFFF  # the bits of a float32 but its sign
# (shift, width) of the digits of the 31 magnitude bits, highest first: histograms of 4096,
# 2048 and 256 counts, which stay in L1 cache
_DIGITS = ((19, 12), (8, 11), (0, 8))


@serial_and_parallel
def _digit_counts(acc, shift, width, prefix, counts):
    """counts[p, d] += how many elements of part p of ``acc`` (``counts.shape[0]`` contiguous
    parts) have magnitude bits m (the float32 bits, sign cleared) with digit d, ``(m >> shift)
    & (2**width - 1)``, and the bits above it, ``m >> (shift + width)``, equal to ``prefix``."""
    bits = acc.view(np.uint32)
    n = bits.size
    parts = counts.shape[0]
    step = (n + parts - 1) // parts
    high = shift + width
    digit = (1 << width) - 1
    for p in prange(parts):
        chunk = bits[p * step:(p + 1) * step]
        row = counts[p]
        for i in range(chunk.size):
            m = np.int64(chunk[i]) & _MAGNITUDE
            if (m >> high) == prefix:
                row[(m >> shift) & digit] += 1


def kth_largest_in_place(acc: np.ndarray, k: int) -> np.float32:
    """The k-th largest |acc| (1-based, k <= acc.size) of a contiguous float32 array, by radix
    select on the bits: non-negative floats order as their bits do, as unsigned integers (NaN
    above +Inf, as np.partition puts it; -0.0 is 0.0). Three read passes over ``acc``, each
    counting one digit of the magnitudes that share the digits found so far; nothing of
    ``acc``'s size is allocated, where np.abs and np.partition copied it twice (issue 30: two
    gradient-sized temporaries, on whichever rank's data made the sampled selection fall back
    to this). The value is bitwise ``kth_largest_magnitude``'s (a NaN's payload aside)."""
    parts = workers(acc.size)
    prefix = 0
    for shift, width in _DIGITS:
        counts = np.zeros((parts, 1 << width), np.int64)
        _digit_counts(acc, shift, width, prefix, counts)
        counts = counts.sum(axis=0)
        at_least = np.cumsum(counts[::-1])  # at_least[j]: digits >= counts.size - 1 - j
        j = int(np.searchsorted(at_least, k))  # the first digit, from the top, that reaches k
        d = counts.size - 1 - j
        k -= int(at_least[j] - counts[d])  # the rank of the k-th largest among digit d
        prefix = (prefix << width) | d
    return np.uint32(prefix).view(np.float32)


def topk_exact(acc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exactly the k entries of largest magnitude; ties broken by lower index. Allocates only
    the k values and indices (and per-chunk counts)."""
    thr = kth_largest_in_place(np.ascontiguousarray(acc), k) if acc.size else np.float32(0)
    above, equal = count_at_least(acc, thr)
    return _select(acc, thr, above, equal, k - int(above.sum()))


def topk_sampled(acc: np.ndarray, k: int, sample_fraction: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """About k entries of largest magnitude, by a threshold estimated from a strided sample.

    Deep Gradient Compression's selection: estimate the k-th largest magnitude from a sample of
    at least 1% of the entries, take everything at or above it in one pass. When the estimate
    overshoots (more than 1.3k candidates) an exact selection is made among the candidates; when
    it undershoots (under 0.8k) the exact threshold is used instead. The result therefore holds
    between 0.8k and 1.3k entries, always the largest ones.
    """
    n = acc.size
    stride = max(1, int(1.0 / sample_fraction))
    sample = acc[::stride]
    ks = max(1, int(round(k * sample.size / n)))
    thr = np.float32(kth_largest_magnitude(sample, ks))
    above, equal = count_at_least(acc, thr)
    count = int(above.sum() + equal.sum())
    # More than 2k candidates (as fold_topk_sampled's room): the exact selection, bitwise what
    # _cut would keep of them, without copying out a number of candidates only the data bounds
    # (up to the whole tensor: issue 30).
    if count < 0.8 * k or count > 2 * k or thr == 0.0:
        return topk_exact(acc, k)
    # more than 1.3k: the k largest candidates (all >= thr, so globally the largest)
    return _cut(acc, *_select(acc, thr, above, equal, count), k)


_ONE = np.uint64(1)


@serial_and_parallel
def _fold_take(acc, grad, keep, thr, values, indices, counts):
    """Per part of ``acc`` (``counts.size`` contiguous parts, one per thread): ``acc += grad``
    (``keep``) or ``acc = grad``, and every entry with |acc| >= thr taken: value and index into
    the part's slice of ``values``/``indices``, zeroed in ``acc``. A part whose slice is full
    takes no more but goes on counting: ``counts`` holds how many each part found. Returns the
    number of non-finite entries of ``grad``.

    64 elements at a time: the fold, the finite count and a 64-bit word of "taken" bits are
    one branch-free loop, which vectorizes; then each set bit is found by count-trailing-zeros
    (as adacomp_cpu._emit does), so the only data-dependent branch is one loop exit per word.
    Measured, 2.4M Gaussian elements at the 1% threshold, serial: 1.12 ms, against 1.70 ms
    with a per-element branch over blocks holding a candidate, 2.0 ms with a branch-free
    per-element take, and 0.45 ms for the fold alone."""
    n = acc.size
    parts = counts.size
    step = (n + parts - 1) // parts
    step = (step + 63) // 64 * 64  # parts start on a word
    room = values.size // parts
    bad = 0
    for c in prange(parts):
        end = min(n, (c + 1) * step)
        taken = 0
        for lo in range(c * step, end, 64):
            a = acc[lo:min(lo + 64, end)]  # loops over a slice from 0 vectorize
            g = grad[lo:min(lo + 64, end)]
            word = np.uint64(0)
            for i in range(a.size):
                v = a[i] + g[i] if keep else g[i]
                a[i] = v
                bad += not (abs(g[i]) <= FLOAT32_MAX)  # false for NaN and +-Inf
                word |= np.uint64(abs(v) >= thr) << np.uint64(i)
            while word:
                i = trailing_zeros(word)
                word &= word - _ONE
                if taken < room:
                    values[c * room + taken] = a[i]
                    indices[c * room + taken] = lo + i
                    a[i] = 0.0
                taken += 1
        counts[c] = taken
    return bad


def fold_topk_sampled(acc: np.ndarray, grad: np.ndarray, keep: bool, k: int,
                      sample_fraction: float = 0.01) -> tuple[np.ndarray, np.ndarray] | None:
    """``fold(acc, grad, keep)`` then ``topk_sampled(acc, k)``, in one pass over the data where
    the estimate holds; bitwise their result. None when ``grad`` holds NaN or Inf (``acc`` then
    holds anything).

    The threshold comes from the sample of gradient + residual the two calls would draw. Where
    the fused pass finds fewer than 0.8k candidates, or more than its room for 2k, the taken
    entries go back into ``acc`` and the exact selection decides, as ``topk_sampled`` does.

    Measured against the two calls, medians, same process: 2.4M elements in cache, 0.8-1.3 ms
    against 1.5-2.2 ms; 25M elements, serial, 12-21 ms against 22-44 ms (this machine's noise
    is the spread). In the compressed path of ResNet-18's 21 compressed tensors (np=2 emulated
    in one process), encoding fell from 22-25 ms a step to 13-14 ms."""
    n = acc.size
    stride = max(1, int(1.0 / sample_fraction))
    sample = acc[::stride] + grad[::stride] if keep else grad[::stride]
    thr = np.float32(kth_largest_magnitude(sample, max(1, int(round(k * sample.size / n)))))
    if not thr > 0:  # zero, or NaN from a non-finite sample
        return None if fold(acc, grad, keep) else topk_exact(acc, k)
    parts = workers(n)
    room = 2 * k
    values = np.empty(parts * room, np.float32)
    indices = np.empty(parts * room, np.int32)
    counts = np.zeros(parts, np.int64)
    if _fold_take(acc, grad, keep, thr, values, indices, counts):
        return None
    taken = [slice(c * room, c * room + min(counts[c], room)) for c in range(parts)]
    values = np.concatenate([values[s] for s in taken])
    indices = np.concatenate([indices[s] for s in taken])
    count = int(counts.sum())
    if count < 0.8 * k or count > values.size:
        acc[indices] = values  # not sent: back into the residual
        return topk_exact(acc, k)
    return _cut(acc, values, indices, k)


def _cut(acc: np.ndarray, values: np.ndarray, indices: np.ndarray,
         k: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidates (every entry >= a threshold, in index order, taken out of ``acc``), or
    the k largest of them when there are more than 1.3k; the others go back into ``acc``."""
    if values.size <= 1.3 * k:
        return values, indices
    order = np.argsort(-np.abs(values), kind="stable")
    dropped = order[k:]
    acc[indices[dropped]] = values[dropped]  # not sent: back into the residual
    kept = np.sort(order[:k])
    return values[kept], indices[kept]


def select(acc: np.ndarray, k: int, exact: bool) -> tuple[np.ndarray, np.ndarray]:
    return topk_exact(acc, k) if exact else topk_sampled(acc, k)
