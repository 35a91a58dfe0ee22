"""1-bit quantization with error feedback on the CPU (Numba).

``acc`` (gradient + residual) is viewed as ``groups`` interleaved groups: element i belongs to
group ``i % groups`` (1 group: the whole tensor; ``cols`` groups: the columns of a row-major
(rows, cols) matrix). Each element becomes one bit, set when acc[i] >= 0, packed 8 to a byte,
element 8b+j in bit j of byte b. It is rebuilt from two values per group, ``low`` (bit clear)
and ``high`` (bit set). ``acc`` is left holding acc - rebuilt: the new residual.
"""
import numpy as np
from numba import njit, prange

from .compensate_cpu import FLOAT32_MAX
from .threads import serial_and_parallel

#: the functions onebit_cuda offers too (kernels/__init__.py checks), and those only here
SHARED = ('quantize', 'dequantize_add')
CPU_ONLY = ('fold_quantize', 'dequantize_add_all')

_CHUNKS = 64  # partial sums per chunk, added up afterwards, keep the passes parallel


# Reassociation lets LLVM vectorize the float64 sums: 25M elements, serial, 156 ms without it,
# 9 ms with it. Each rank's scales travel in its payload, so the order of additions never has
# to match between ranks.
#
# With ``fold``, each element is first folded: ``acc += grad`` (``keep``) or ``acc = grad``,
# and the non-finite entries of ``grad`` are counted (the second result), so the residual's
# fold and the finite check cost no pass of their own.
@serial_and_parallel(fastmath={"reassoc"})
def _partial_sums(acc, grad, groups, fold, keep):
    n = acc.size
    step = (n + _CHUNKS - 1) // _CHUNKS
    # per chunk and group: sum of negatives, sum of non-negatives, count of non-negatives
    sums = np.zeros((_CHUNKS, groups, 3))
    bad = 0
    for c in prange(_CHUNKS):
        chunk = acc[c * step:(c + 1) * step]  # loops over a slice from 0 vectorize
        d = grad[c * step:(c + 1) * step]
        if groups == 1:  # the common case, kept in registers and branch-free
            total = 0.0
            non_negatives = 0.0
            count = 0.0
            for i in range(chunk.size):
                x = chunk[i]
                if fold:  # loop-invariant: compiled as two loops
                    x = x + d[i] if keep else d[i]
                    chunk[i] = x
                    bad += not (abs(d[i]) <= FLOAT32_MAX)  # false for NaN and +-Inf
                v = np.float64(x)
                up = v >= 0
                total += v
                non_negatives += v * up
                count += up
            sums[c, 0, 0] = total - non_negatives
            sums[c, 0, 1] = non_negatives
            sums[c, 0, 2] = count
        else:
            if fold:
                for i in range(chunk.size):
                    chunk[i] = chunk[i] + d[i] if keep else d[i]
                    bad += not (abs(d[i]) <= FLOAT32_MAX)
            g = (c * step) % groups
            for i in range(chunk.size):
                v = chunk[i]
                if v >= 0:
                    sums[c, g, 1] += v
                    sums[c, g, 2] += 1
                else:
                    sums[c, g, 0] += v
                g += 1
                if g == groups:
                    g = 0
    return sums, bad


@njit(cache=True)
def _group_scales(low, high, g):
    """(low[g], high[g], the group after g)."""
    return low[g], high[g], 0 if g + 1 == low.size else g + 1


@njit(cache=True)
def _unpack_add(values, packed, low, high, g):
    """values[i] += high[g] if bit i of ``packed`` is set else low[g], g counting on from ``g``
    (the group of values[0]) modulo the group count."""
    groups = low.size
    lo, hi = low[0], high[0]
    start = 0
    if groups == 1:  # whole bytes with a constant trip count of 8, which LLVM vectorizes:
        # measured, 2 payloads of 2.4M elements, serial, 0.68 ms against 1.0 ms
        start = min(packed.size, values.size // 8)
        for b in range(start):
            byte = np.int64(packed[b])
            for j in range(8):
                values[8 * b + j] += hi if (byte >> j) & 1 else lo
    for b in range(start, packed.size):
        byte = np.int64(packed[b])
        for j in range(min(8, values.size - 8 * b)):
            if groups > 1:
                lo, hi, g = _group_scales(low, high, g)
            values[8 * b + j] += hi if (byte >> j) & 1 else lo


@serial_and_parallel
def _bits(values, bits, low, high, pack):
    """pack: set bits from the signs of ``values`` and subtract the rebuilt values from them;
    else: add the values that ``bits`` rebuild to ``values``."""
    groups = low.size
    step = (bits.size + _CHUNKS - 1) // _CHUNKS  # in bytes
    for c in prange(_CHUNKS):
        chunk = values[8 * c * step:8 * (c + 1) * step]
        packed = bits[c * step:(c + 1) * step]
        g = (8 * c * step) % groups
        if not pack:
            _unpack_add(chunk, packed, low, high, g)
            continue
        lo, hi = low[0], high[0]
        for b in range(packed.size):
            byte = 0
            for j in range(min(8, chunk.size - 8 * b)):
                if groups > 1:
                    lo, hi, g = _group_scales(low, high, g)
                v = chunk[8 * b + j]
                up = v >= 0
                byte |= up << j
                chunk[8 * b + j] = v - (hi if up else lo)
            packed[b] = byte


_BLOCK = 1 << 13  # elements of ``out`` (32 KiB) that stay in cache while every payload is added


@serial_and_parallel
def _add_all(out, buffer, starts, groups):
    """Adds the values each payload rebuilds to ``out``, the payloads in order; payload r lies
    at ``buffer[starts[r]:]`` as low (``groups`` float32), high, then the packed bits.

    Why: decoding the p payloads of a tensor one after the other reads and writes ``out`` p
    times; here each block of ``out`` takes every payload while it is in cache, so ``out``
    crosses memory once. Each element still adds the payloads in their order, so the sum is
    bitwise the one of p calls of ``dequantize_add``. Measured (4 payloads, serial): 25M
    elements 41 ms against 75 ms; ResNet-18's tensors 20 ms against 28 ms; one tensor of 2.4M
    elements, whose ``out`` stays in cache anyway, 3.5 ms against 3.4 ms."""
    blocks = (out.size + _BLOCK - 1) // _BLOCK
    for k in prange(blocks):
        block = out[k * _BLOCK:(k + 1) * _BLOCK]
        first = k * _BLOCK // 8
        for r in range(starts.size):
            scales = buffer[starts[r]:starts[r] + 8 * groups].view(np.float32)
            bits = buffer[starts[r] + 8 * groups + first:]
            _unpack_add(block, bits[:(block.size + 7) // 8], scales[:groups], scales[groups:],
                        k * _BLOCK % groups)


def scales(negatives: np.ndarray, non_negatives: np.ndarray, count_high: np.ndarray,
           size: np.ndarray, scaling: str) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) per group from its sums; shared by the CPU and CUDA kernels.

    scaling="means" (Seide et al. 2014): low = mean of the negative entries, high = mean of the
    non-negative ones. scaling="l1" (Karimireddy et al. 2019, EF-SignSGD): high = ||acc||_1 / n,
    low = -high.
    """
    groups = size.size
    if scaling == "means":
        high = np.divide(non_negatives, count_high, out=np.zeros(groups), where=count_high > 0)
        count_low = size - count_high
        low = np.divide(negatives, count_low, out=np.zeros(groups), where=count_low > 0)
    else:
        high = (non_negatives - negatives) / size
        low = -high
    return low.astype(np.float32), high.astype(np.float32)


def group_sizes(n: int, groups: int) -> np.ndarray:
    return n // groups + (np.arange(groups) < n % groups)


def quantize(acc: np.ndarray, groups: int, scaling: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (low, high, packed bits) and leaves the residual in ``acc``."""
    return _quantize(acc, acc, groups, scaling, False, True)[:3]


def fold_quantize(acc: np.ndarray, grad: np.ndarray, keep: bool, groups: int,
                  scaling: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``compensate_cpu.fold(acc, grad, keep)`` then ``quantize(acc, groups, scaling)``,
    bitwise, with the fold inside the first pass (two passes over the data instead of three);
    None when ``grad`` holds NaN or Inf (``acc`` then holds anything). Measured, 25M elements,
    serial: the fused fold and sums 7.4-8.2 ms, against 6.7-7.1 ms for the fold and 5.2 ms
    for the sums apart."""
    low, high, bits, bad = _quantize(acc, grad, groups, scaling, True, keep)
    return None if bad else (low, high, bits)


def _quantize(acc, grad, groups, scaling, fold, keep):
    sums, bad = _partial_sums(acc, grad, groups, fold, keep)
    if bad:
        return None, None, None, bad
    negatives, non_negatives, count_high = sums.sum(axis=0).T
    low, high = scales(negatives, non_negatives, count_high, group_sizes(acc.size, groups), scaling)
    bits = np.empty((acc.size + 7) // 8, np.uint8)
    _bits(acc, bits, low, high, True)
    return low, high, bits, 0


def dequantize_add(bits: np.ndarray, low: np.ndarray, high: np.ndarray, out: np.ndarray) -> None:
    """out[i] += high[g] if bit i is set else low[g], g = i % groups. Nothing in a payload
    addresses memory but its length: ``bits`` of (out.size + 7) // 8 bytes and ``low`` and
    ``high`` of one size, which the caller checks (methods/onebit.py, in O(1))."""
    _bits(out, bits, low, high, False)


def dequantize_add_all(buffer: np.ndarray, starts: np.ndarray, groups: int, out: np.ndarray) -> None:
    """``dequantize_add`` of each payload (low, high, bits back to back, ``groups`` scales
    each) that starts at ``buffer[starts[r]]``, in order, in one pass over ``out``. Each
    payload must be 8 ``groups`` + (out.size + 7) // 8 bytes long, which the caller checks
    (methods/onebit.py): this reads that many from each start."""
    _add_all(out, buffer, starts, groups)
