"""Byte-code quantization on CUDA (numba.cuda): the same primitives as quantize_cpu, the same
codes and values (kernels/quantize.py).

One thread per bucket for the scales (the L2 sum in index order, as on the CPU), one per byte
of codes to encode, one per entry to decode. A whole piece's max is taken over blocks of
``_BLOCK`` entries and then over the blocks' maxima, until one is left.
"""
import numpy as np
from numba import cuda

from .counter_rng import uniform
from .cuda_launch import THREADS, blocks
from .quantize import make_bucket_constants, make_bucket_scale, make_element

_BLOCK = 1024

_element = cuda.jit(device=True)(make_element(cuda.jit(device=True)(uniform)))
_constants = cuda.jit(device=True)(make_bucket_constants())
_bucket_scale = cuda.jit(device=True)(make_bucket_scale())


@cuda.jit
def _scales(acc, bucket, l2, out):
    k = cuda.grid(1)
    if k >= out.size:
        return
    out[k] = _bucket_scale(acc, k * bucket, min(acc.size, (k + 1) * bucket), l2)


def _bucket_scales(acc, bucket, l2, stream):
    out = cuda.device_array(max(1, -(-acc.size // bucket)), np.float32, stream=stream)
    _scales[blocks(out.size), THREADS, stream](acc, bucket, l2, out)
    return out


def bucket_scales(acc, bucket: int, l2: bool, stream=0):
    """One float32 per bucket on the device (see quantize_cpu.bucket_scales)."""
    if l2 or bucket < acc.size:
        return _bucket_scales(acc, bucket, l2, stream)
    out = _bucket_scales(acc, _BLOCK, False, stream)
    while out.size > 1:  # the max of maxima: |max| is max, NaN still wins
        out = _bucket_scales(out, _BLOCK, False, stream)
    return out


@cuda.jit
def _encode(acc, codes, scales, bucket, bits, table, mode, levels, clip, seed, mids):
    b = cuda.grid(1)
    if b >= codes.size:
        return
    per = 8 // bits
    byte = 0
    for j in range(min(per, acc.size - per * b)):
        i = per * b + j
        scale = np.float64(scales[i // bucket])
        inv, emax = _constants(scale, levels)
        x = acc[i]
        field = _element(mode, x, inv, levels, clip, emax, seed, i, mids) & ((1 << bits) - 1)
        byte |= field << (bits * j)
        acc[i] = x - np.float32(table[field] * scale)
    codes[b] = byte


@cuda.jit
def _decode(codes, scales, bucket, bits, table, out):
    i = cuda.grid(1)
    if i < out.size:
        per = 8 // bits
        field = (codes[i // per] >> (bits * (i % per))) & ((1 << bits) - 1)
        out[i] += np.float32(table[field] * np.float64(scales[i // bucket]))


def host(array, stream=0) -> np.ndarray:
    return array.copy_to_host(stream=stream)


def device(array: np.ndarray, stream=0):
    return cuda.to_device(array, stream=stream)


def codes(acc, scales, bucket, bits, table, mode, levels, clip, seed, mids, stream=0):
    """The packed codes of ``acc`` on the device; leaves the residual in ``acc``."""
    out = cuda.device_array(-(-acc.size // (8 // bits)), np.uint8, stream=stream)
    _encode[blocks(out.size), THREADS, stream](acc, out, scales, bucket, bits, table, mode,
                                               levels, clip, seed, mids)
    return out


def scaled_codes(acc, bucket, l2, bits, table, mode, levels, clip, seed, mids, stream=0):
    """(scales, codes) of ``acc`` in buckets of ``bucket`` entries (quantize_cpu.scaled_codes):
    the scales' kernel, then the codes'."""
    scales = bucket_scales(acc, bucket, l2, stream)
    return scales, codes(acc, scales, bucket, bits, table, mode, levels, clip, seed, mids, stream)


def decode(codes, scales, bucket, bits, table, out, stream=0) -> None:
    _decode[blocks(out.size), THREADS, stream](codes, scales, bucket, bits, table, out)
