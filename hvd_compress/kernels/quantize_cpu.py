"""Byte-code quantization on the CPU (Numba): the primitives ``quantize.encode`` and
``quantize.decode_add`` run on, over numpy arrays (see kernels/quantize.py for the scheme).

Encoding is one pass over the data. ``scaled_codes`` (QSGD, u8bit: a scale per bucket) takes
``_GROUP`` buckets at a time, sums their squares side by side (one dependency chain per bucket,
each still in index order) or takes their largest magnitude bits, and encodes them while they
are in cache; whole-piece schemes (TernGrad, natural) take the max in a pass of its own
(``bucket_scales``: integer max of the magnitude bits, which vectorizes), then ``codes``.

Each mode has its own element loop over a bucket's segment, sliced from 0, written so that
LLVM vectorizes it (AVX-512 here): no branch, no division by a variable, and no table lookup,
since this CPU's LLVM target (znver5) declines gathers and leaves any loop that indexes a table
by data scalar. So a code's value, ``table[field] * scale`` in kernels/quantize.py, is computed:
c / L for LINEAR, 2**(2 - k) from its bits for NATURAL. NEAREST (u8bit) has no closed form: its
three lookups per entry run in a scalar loop of their own between two that vectorize
(``_nearest``). Results are bitwise those of quantize.make_element, the CUDA build and the
numpy reference (tests/test_quantize_kernels.py).

Measured at 25M elements on 2 cores (znver5), the whole step as the hook runs it (fold, encode,
payload), side by side in one process with the per-element loop this replaced (a runtime mode
switch and a table lookup per entry, u8bit's binary search by branches, scales in a pass of
their own), serial build: QSGD 28 ms against 177, TernGrad 23 against 168, u8bit 38 against 757,
natural 29 against 230; parallel build: 19 against 95, 18 against 94, 21 against 403, 17
against 123 (``copy_`` of the same tensor: 2.5 to 5 ms). Decoding is unchanged: a per-bucket
table of what each field stands for.

Numba caches these kernels by this file's content: the helpers they inline from
kernels/quantize.py (``make_bucket_constants``) and kernels/counter_rng.py are compiled in, so
after editing those, clear ``__pycache__/quantize_cpu.*`` (a fresh clone compiles anew).
"""
import functools
import math

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from .counter_rng import uniform_cpu
from .quantize import LINEAR, NEAREST, make_bucket_constants
from .threads import serial_and_parallel

#: the functions quantize_cuda offers too (kernels/__init__.py checks), and those only here
SHARED = ('bucket_scales', 'codes', 'scaled_codes', 'decode', 'host', 'device')
CPU_ONLY = ()

_CHUNKS = 64  # ranges of blocks the parallel build hands out
_GROUP = 8  # buckets whose scales are summed side by side, then encoded (a multiple of 4)
_WHOLE_BLOCK = 1 << 14  # entries per block when the scales are given
_WINDOW = 4096  # entries whose 2-bit fields are packed at once
_SUB = 512  # entries u8bit looks up at once
_MAX_BLOCK = 1 << 16  # a whole-piece max is taken over blocks of this many entries, then combined
_MAGNITUDE = 0x7FFFFFFF  # the bits of a float32 but its sign
_INF_BITS = 0x7F800000
_NAN_BITS = 0x7FC00000  # np.float32(np.nan)
_FLOAT32_MAX = np.float64(np.finfo(np.float32).max)
_TWO64 = np.float32(2.0 ** 64)
_TINY = np.float32(2.0 ** -126)  # the smallest normal float32
_ULP23 = np.float32(2.0 ** -23)
_ONE, _TWO = np.uint64(1), np.uint64(2)

_constants = njit(inline="always")(make_bucket_constants())


@intrinsic
def _bits64(typingctx, x):
    """The bits of a float64 as an int64 (a bitcast, free and vectorizable)."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def _float64(typingctx, x):
    """The float64 whose bits are the int64 ``x``."""
    if x != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def _bits32(typingctx, x):
    """The bits of a float32 as an int32."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


# --- scales (quantize.make_bucket_scale) -------------------------------------------------------

@njit(inline="always")
def _saturate(total):
    """The L2 norm of a float64 sum of squares, saturated at float32's max unless infinite."""
    norm = math.sqrt(total)
    return _FLOAT32_MAX if norm > _FLOAT32_MAX and norm < np.inf else norm


@njit(inline="always")
def _max_bits(bits):
    """The largest magnitude bits (sign cleared) of a float32 array's bits: as integers,
    non-negative floats order as their values do, and NaN above +Inf."""
    m = 0
    for i in range(bits.size):
        m = max(m, bits[i] & _MAGNITUDE)
    return m


@njit(inline="always")
def _l2(x):
    total = 0.0
    for i in range(x.size):
        v = np.float64(x[i])
        total += v * v
    return _saturate(total)


@njit(inline="always")
def _fill_scales(values, bits, scales, scale_bits, k0, k1, bucket, l2):
    """scales[k] for the buckets k0 <= k < k1: L2 norms, each a float64 sum of squares in
    index order, ``_GROUP`` of them side by side (independent chains: the adds' latency
    overlaps); or the largest |x|, NaN if any entry is NaN."""
    n = values.size
    k = k0
    if l2:
        while k + _GROUP <= k1 and (k + _GROUP) * bucket <= n:
            lo = k * bucket
            x0 = values[lo:lo + bucket]
            x1 = values[lo + bucket:lo + 2 * bucket]
            x2 = values[lo + 2 * bucket:lo + 3 * bucket]
            x3 = values[lo + 3 * bucket:lo + 4 * bucket]
            x4 = values[lo + 4 * bucket:lo + 5 * bucket]
            x5 = values[lo + 5 * bucket:lo + 6 * bucket]
            x6 = values[lo + 6 * bucket:lo + 7 * bucket]
            x7 = values[lo + 7 * bucket:lo + 8 * bucket]
            s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
            for i in range(x0.size):
                v0 = np.float64(x0[i])
                v1 = np.float64(x1[i])
                v2 = np.float64(x2[i])
                v3 = np.float64(x3[i])
                v4 = np.float64(x4[i])
                v5 = np.float64(x5[i])
                v6 = np.float64(x6[i])
                v7 = np.float64(x7[i])
                s0 += v0 * v0
                s1 += v1 * v1
                s2 += v2 * v2
                s3 += v3 * v3
                s4 += v4 * v4
                s5 += v5 * v5
                s6 += v6 * v6
                s7 += v7 * v7
            scales[k] = _saturate(s0)
            scales[k + 1] = _saturate(s1)
            scales[k + 2] = _saturate(s2)
            scales[k + 3] = _saturate(s3)
            scales[k + 4] = _saturate(s4)
            scales[k + 5] = _saturate(s5)
            scales[k + 6] = _saturate(s6)
            scales[k + 7] = _saturate(s7)
            k += _GROUP
        while k < k1:
            scales[k] = _l2(values[k * bucket:min(n, (k + 1) * bucket)])
            k += 1
    else:
        while k < k1:
            m = _max_bits(bits[k * bucket:min(n, (k + 1) * bucket)])
            scale_bits[k] = _NAN_BITS if m > _INF_BITS else m
            k += 1


@serial_and_parallel
def _scales(values, scales, bucket, l2):
    nb = scales.size
    step = (nb + _CHUNKS - 1) // _CHUNKS
    bits = values.view(np.int32)
    scale_bits = scales.view(np.int32)
    for c in prange(_CHUNKS):
        _fill_scales(values, bits, scales, scale_bits, min(nb, c * step), min(nb, (c + 1) * step),
                     bucket, l2)


@serial_and_parallel
def _block_max(values, block, out):
    """out[k] = the largest magnitude bits of entries [k block, (k+1) block)."""
    bits = values.view(np.int32)
    for k in prange(out.size):
        out[k] = _max_bits(bits[k * block:min(bits.size, (k + 1) * block)])


def bucket_scales(acc: np.ndarray, bucket: int, l2: bool) -> np.ndarray:
    """One float32 per bucket of ``bucket`` entries (the last may be shorter): L2 norms or
    largest magnitudes."""
    if l2 or bucket < acc.size:
        out = np.empty(max(1, -(-acc.size // bucket)), np.float32)
        _scales(acc, out, bucket, l2)
        return out
    maxima = np.empty(max(1, -(-acc.size // _MAX_BLOCK)), np.int32)
    _block_max(acc, _MAX_BLOCK, maxima)
    m = maxima.max()
    return np.int32([_NAN_BITS if m > _INF_BITS else m]).view(np.float32)


# --- codes: one loop per mode over one bucket's segment (quantize.make_element) ----------------

@njit(inline="always")
def _linear(x, f, start, inv, levels, clip, seed, scale, mask):
    """QSGD's and TernGrad's codes of segment ``x`` (entries ``start``...) into ``f``; leaves
    the residual in ``x``. Code c stands for table[c] = c / L (quantize.Scheme.table)."""
    top = np.float64(levels)
    for t in range(x.size):
        v = x[t]
        a = abs(v)
        a = clip if a > clip else a
        q = np.float64(a) * inv
        floor = math.floor(q)
        level = floor + (uniform_cpu(seed, start + t) < q - floor)
        level = top if q >= top else level
        level = level if q > 0 else 0.0
        code = np.int64(level)
        code = -code if v < 0 else code
        f[t] = code & mask
        x[t] = v - np.float32(np.float64(code) / top * scale)


@njit(inline="always")
def _natural(x, f, start, emax, usable, seed, scale, mask):
    """Natural compression's codes. |x| = (1 + m 2**-23) 2**e from its float32 bits (a
    subnormal scaled by 2**64 first), so frexp's 2 mantissa - 1 is m 2**-23; below 2**lowest
    an entry flushes. Code k stands for 2**(2 - k) (0 for 0), made from its bits."""
    lowest = emax - 125
    flush = math.ldexp(1.0, -lowest)
    for t in range(x.size):
        v = x[t]
        a = abs(v)
        sub = a < _TINY
        b = _bits32(a * _TWO64 if sub else a)
        e = np.int64(b >> 23) - (191 if sub else 127)
        u = uniform_cpu(seed, start + t)
        power = min(e + (u < np.float32(b & 0x7FFFFF) * _ULP23), 127)
        spill = 127 if u < np.float64(a) * flush else 0
        k = emax + 2 - power if e >= lowest else spill
        k = k if (a > 0 and usable) else 0
        m = _float64((1025 - k) << 52) if k > 0 else 0.0
        f[t] = (-k if v < 0 else k) & mask
        x[t] = v - np.float32((-m if v < 0 and k > 0 else m) * scale)


@njit(inline="always")
def _nearest(x, f, inv, first, last, below, sides, scale, mask, qs, cells, sizes):
    """u8bit's codes: how many midpoints lie below q = |x| / s. The cell of q, its float64
    bits >> 45 (exponent and top 7 mantissa bits) less ``first``, holds at most one midpoint;
    ``below[cell]`` of them lie below the cell, and ``sides[2 cell + j]`` is the magnitude of
    code ``below + j``: the mean of the two is that midpoint (+inf as the second if the cell
    holds none). So a code takes three loads from a 25 kB table (it stays in L1 cache),
    indexed by the cell and the comparison, with no branch for random data to mispredict. They
    run in a scalar loop of their own, between two that vectorize; unsigned indices spare them
    Numba's negative-index wraparound."""
    for lo in range(0, x.size, _SUB):
        xs = x[lo:lo + _SUB]
        fs = f[lo:lo + _SUB]
        q = qs[:xs.size]
        at = cells[:xs.size]
        m = sizes[:xs.size]
        for t in range(xs.size):
            qt = np.float64(abs(xs[t])) * inv
            q[t] = qt
            at[t] = np.uint64(min(max((_bits64(qt) >> 45) - first, 0), last))
        for t in range(xs.size):
            qt = q[t]
            cell = at[t]
            two = _TWO * cell
            up = np.uint64((np.float64(sides[two]) + np.float64(sides[two + _ONE])) / 2 < qt)
            at[t] = below[cell] + up
            m[t] = np.float64(sides[two + up])
        for t in range(xs.size):
            v = xs[t]
            positive = q[t] > 0
            code = np.int64(at[t]) if positive else 0
            mt = m[t] if positive else 0.0
            code = -code if v < 0 else code
            fs[t] = code & mask
            xs[t] = v - np.float32((-mt if code < 0 else mt) * scale)


@njit(inline="always")
def _pack(f, codes, bits):
    """codes[b] = the 2-bit fields 4b..4b+3 of ``f``, the first in the lowest bits."""
    full = f.size // 4
    for b in range(full):
        codes[b] = f[4 * b] | (f[4 * b + 1] << 2) | (f[4 * b + 2] << 4) | (f[4 * b + 3] << 6)
    if full < codes.size:
        byte = 0
        for j in range(f.size - 4 * full):
            byte |= f[4 * full + j] << (bits * j)
        codes[full] = byte


@serial_and_parallel
def _encode(values, codes, scales, bucket, fill, l2, bits, mode, levels, clip, seed, first, last,
            below, sides):
    """Sets ``codes`` from ``values`` and leaves the residual in ``values``. ``fill``: each
    block's scales are computed into ``scales`` right before its entries are encoded. Blocks
    (``_GROUP`` buckets, or ``_WHOLE_BLOCK`` entries) start on a byte; the parallel build
    hands out ``_CHUNKS`` ranges of them."""
    n = values.size
    per = 8 // bits
    mask = (1 << bits) - 1
    block = _GROUP * bucket if fill else _WHOLE_BLOCK
    blocks = (n + block - 1) // block
    step = (blocks + _CHUNKS - 1) // _CHUNKS
    value_bits = values.view(np.int32)
    scale_bits = scales.view(np.int32)
    for c in prange(_CHUNKS):
        fields = np.empty(_WINDOW if per > 1 else 0, np.uint8)
        qs = np.empty(_SUB if mode == NEAREST else 0)
        cells = np.empty(_SUB if mode == NEAREST else 0, np.uint64)
        sizes = np.empty(_SUB if mode == NEAREST else 0)
        for blk in range(min(blocks, c * step), min(blocks, (c + 1) * step)):
            lo = blk * block
            hi = min(n, lo + block)
            if fill:
                _fill_scales(values, value_bits, scales, scale_bits, lo // bucket,
                             (hi + bucket - 1) // bucket, bucket, l2)
            w = lo
            while w < hi:
                stop = hi if per == 1 else min(hi, w + _WINDOW)
                i = w
                while i < stop:  # one bucket's segment at a time
                    k = i // bucket
                    end = min(stop, (k + 1) * bucket)
                    x = values[i:end]
                    f = codes[i:end] if per == 1 else fields[i - w:end - w]
                    scale = np.float64(scales[k])
                    inv, emax = _constants(scale, levels)
                    if mode == LINEAR:
                        _linear(x, f, i, inv, levels, clip, seed, scale, mask)
                    elif mode == NEAREST:
                        _nearest(x, f, inv, first, last, below, sides, scale, mask, qs, cells,
                                 sizes)
                    else:
                        _natural(x, f, i, emax, inv > 0, seed, scale, mask)
                    i = end
                if per > 1:
                    _pack(fields[:stop - w], codes[w // per:(stop + per - 1) // per], bits)
                w = stop


@functools.cache
def _cell_table(mids_bytes: bytes, mags_bytes: bytes) -> tuple:
    """NEAREST's cells (see ``_nearest``), from its midpoints and magnitudes: cell c >= 1 holds
    the q whose float64 bits >> 45 are ``first + c``; cell 0 all q below, cell ``last`` all q
    above the midpoints' cells. (first, last, below, sides)."""
    mids = np.frombuffer(mids_bytes, np.float64)
    mags = np.frombuffer(mags_bytes, np.float64)
    keys = mids.view(np.int64) >> 45
    first, top = int(keys[0]), int(keys[-1])
    bounds = (np.arange(first, top + 2, dtype=np.int64) << 45).view(np.float64)  # lower ends
    below = np.concatenate([[0], np.searchsorted(mids, bounds, "left")])
    holds = np.append(below[1:], mids.size) > below  # a midpoint inside the cell
    sides = np.stack([mags[below], np.where(holds, mags[np.minimum(below + 1, mags.size - 1)], np.inf)],
                     axis=1).reshape(-1)
    if (np.bincount(keys - first).max() > 1 or mags.size > 256 or (np.float32(sides) != sides).any()
            or ((sides[0::2] + sides[1::2]) / 2)[holds].tolist() != mids[below[holds]].tolist()):
        raise ValueError("NEAREST's kernel needs float32 magnitudes at most 256 codes apart, "
                         "their midpoints at least 1/128 of a binade apart")
    return first - 1, below.size - 1, below.astype(np.uint8), np.float32(sides)


_NO_CELLS = (0, 0, np.zeros(1, np.uint8), np.zeros(2, np.float32))


def _encode_with(acc, scales, bucket, fill, l2, bits, table, mode, levels, clip, seed, mids):
    cells = (_cell_table(np.ascontiguousarray(mids, np.float64).tobytes(),
                         np.abs(table[:1 << (bits - 1)]).tobytes())  # the magnitudes, M[c >= 0]
             if mode == NEAREST else _NO_CELLS)
    codes = np.empty(-(-acc.size // (8 // bits)), np.uint8)  # every byte is written
    _encode(acc, codes, scales, bucket, fill, l2, bits, mode, levels, np.float32(clip),
            np.uint64(seed), *cells)
    return codes


def host(array: np.ndarray) -> np.ndarray:
    return array


def device(array: np.ndarray) -> np.ndarray:
    return array


def codes(acc, scales, bucket, bits, table, mode, levels, clip, seed, mids) -> np.ndarray:
    """The packed codes of ``acc`` given its scales; leaves the residual in ``acc``."""
    return _encode_with(acc, scales, bucket, False, False, bits, table, mode, levels, clip, seed, mids)


def scaled_codes(acc, bucket, l2, bits, table, mode, levels, clip, seed, mids):
    """(scales, codes) of ``acc`` in buckets of ``bucket`` entries, in one pass: each bucket's
    scale (``bucket_scales``) is computed right before its codes; leaves the residual in
    ``acc``."""
    scales = np.empty(max(1, -(-acc.size // bucket)), np.float32)
    return scales, _encode_with(acc, scales, bucket, True, l2, bits, table, mode, levels, clip, seed,
                                mids)


@serial_and_parallel
def _decode(values, codes, scales, bucket, bits, table):
    """Adds what ``codes`` stand for to ``values``. A chunk's range is walked one bucket
    segment at a time: what each field stands for in the segment's bucket, float32(table[field]
    * scale), is computed once into a table of 2**bits values, and the element loop only looks
    it up."""
    n = values.size
    per = 8 // bits
    log_per = 0 if per == 1 else 2  # entry t is in byte t >> log_per: no division per entry
    mask = (1 << bits) - 1
    step = (codes.size + _CHUNKS - 1) // _CHUNKS  # in bytes
    for c in prange(_CHUNKS):
        i = min(n, c * step * per)
        stop = min(n, (c + 1) * step * per)
        stands = np.empty(mask + 1, np.float32)
        while i < stop:
            k = i // bucket
            end = min(stop, (k + 1) * bucket)
            scale = np.float64(scales[k])
            for f in range(mask + 1):
                stands[f] = np.float32(table[f] * scale)
            if per == 1:
                for t in range(i, end):
                    values[t] += stands[codes[t]]
            else:
                for t in range(i, end):
                    values[t] += stands[(codes[t >> log_per] >> (bits * (t & (per - 1)))) & mask]
            i = end


def decode(codes: np.ndarray, scales, bucket, bits, table, out: np.ndarray) -> None:
    _decode(out, codes, scales, bucket, bits, table)
