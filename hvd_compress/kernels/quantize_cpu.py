"""Byte-code quantization on the CPU (Numba): the primitives ``quantize.encode`` and
``quantize.decode_add`` run on, over numpy arrays (see kernels/quantize.py for the scheme).

The passes are split into ``_CHUNKS`` contiguous ranges of bytes for the parallel build; each
range tracks its current bucket, so no entry pays an integer division.
"""
import numpy as np
from numba import njit, prange

from .counter_rng import uniform_cpu
from .quantize import make_bucket_constants, make_bucket_scale, make_element
from .threads import serial_and_parallel

_CHUNKS = 64
_MAX_BLOCK = 1 << 16  # a whole-piece max is taken over blocks of this many entries, then combined

_element = njit(inline="always")(make_element(uniform_cpu))
_constants = njit(inline="always")(make_bucket_constants())
_bucket_scale = njit(inline="always")(make_bucket_scale())


@serial_and_parallel
def _scales(acc, bucket, l2, out):
    """out[k] = the scale of entries [k bucket, (k+1) bucket) (quantize.make_bucket_scale)."""
    for k in prange(out.size):
        out[k] = _bucket_scale(acc, k * bucket, min(acc.size, (k + 1) * bucket), l2)


def bucket_scales(acc: np.ndarray, bucket: int, l2: bool) -> np.ndarray:
    """One float32 per bucket of ``bucket`` entries (the last may be shorter): L2 norms or
    largest magnitudes."""
    block = bucket if l2 or bucket < acc.size else _MAX_BLOCK
    out = np.empty(max(1, -(-acc.size // block)), np.float32)
    _scales(acc, block, l2, out)
    if block != bucket:  # a whole piece's max, from its blocks' (np.max keeps a NaN)
        out = np.float32([out.max()])
    return out


@serial_and_parallel
def _codes(values, codes, scales, bucket, bits, table, mode, levels, clip, seed, mids, encode):
    """encode: set ``codes`` from ``values`` and subtract what they stand for from ``values``;
    else: add what ``codes`` stand for to ``values``."""
    n = values.size
    per = 8 // bits
    mask = (1 << bits) - 1
    step = (codes.size + _CHUNKS - 1) // _CHUNKS  # in bytes
    for c in prange(_CHUNKS):
        first = min(codes.size, c * step)
        k = first * per // bucket
        end = (k + 1) * bucket
        scale = np.float64(scales[k]) if first < codes.size else 0.0
        inv, emax = _constants(scale, levels)
        for b in range(first, min(codes.size, first + step)):
            byte = 0 if encode else np.int64(codes[b])
            for j in range(min(per, n - per * b)):
                i = per * b + j
                if i == end:
                    k += 1
                    end += bucket
                    scale = np.float64(scales[k])
                    inv, emax = _constants(scale, levels)
                if encode:
                    x = values[i]
                    field = _element(mode, x, inv, levels, clip, emax, seed, i, mids) & mask
                    byte |= field << (bits * j)
                    values[i] = x - np.float32(table[field] * scale)
                else:
                    values[i] += np.float32(table[(byte >> (bits * j)) & mask] * scale)
            if encode:
                codes[b] = byte


def host(array: np.ndarray) -> np.ndarray:
    return array


def device(array: np.ndarray) -> np.ndarray:
    return array


def codes(acc, scales, bucket, bits, table, mode, levels, clip, seed, mids) -> np.ndarray:
    """The packed codes of ``acc``; leaves the residual in ``acc``."""
    out = np.empty(-(-acc.size // (8 // bits)), np.uint8)
    _codes(acc, out, scales, bucket, bits, table, mode, levels, clip, seed, mids, True)
    return out


def decode(codes: np.ndarray, scales, bucket, bits, table, out: np.ndarray) -> None:
    _codes(out, codes, scales, bucket, bits, table, 0, 1, np.float32(np.inf), np.uint64(0),
           table, False)
