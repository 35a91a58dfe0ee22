"""Plain-numpy references of the compression kernels, written for clarity, not speed."""
import numpy as np


def topk_exact(acc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, indices ascending, new residual): the k largest |acc|, ties to the lower index."""
    order = np.lexsort((np.arange(acc.size), -np.abs(acc)))  # by magnitude desc, then index
    indices = np.sort(order[:k]).astype(np.int32)
    residual = acc.copy()
    residual[indices] = 0
    return acc[indices], indices, residual


def scatter_add(values: np.ndarray, indices: np.ndarray, out: np.ndarray) -> None:
    np.add.at(out, indices, values)


def onebit(acc: np.ndarray, groups: int, scaling: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, packed bits, new residual) for element i in group i % groups."""
    group = np.arange(acc.size) % groups
    positive = acc >= 0
    low, high = np.zeros(groups, np.float32), np.zeros(groups, np.float32)
    for g in range(groups):
        members = acc[group == g].astype(np.float64)
        up = members >= 0
        if scaling == "means":
            high[g] = members[up].mean() if up.any() else 0.0
            low[g] = members[~up].mean() if (~up).any() else 0.0
        else:
            high[g] = np.abs(members).mean()
            low[g] = -high[g]
    rebuilt = np.where(positive, high[group], low[group])
    bits = np.packbits(positive, bitorder="little")
    return low, high, bits, acc - rebuilt


def onebit_decode(bits: np.ndarray, low: np.ndarray, high: np.ndarray, n: int) -> np.ndarray:
    group = np.arange(n) % low.size
    positive = np.unpackbits(bits, bitorder="little")[:n].astype(bool)
    return np.where(positive, high[group], low[group]).astype(np.float32)


def adacomp(acc: np.ndarray, grad: np.ndarray, bin_size: int) -> tuple[np.float32, np.ndarray, np.ndarray]:
    """(scale, codes, new residual), straight from the paper's equations (see hvd_compress.adacomp)."""
    G = acc
    H = G + grad
    bins = np.arange(G.size) // bin_size
    g_max = np.maximum.reduceat(np.abs(G), np.arange(0, G.size, bin_size))  # max of each bin
    scale = np.float32(g_max.astype(np.float64).mean())
    sent = (np.abs(H) >= g_max[bins]) & (g_max[bins] > 0)
    index = np.flatnonzero(sent)
    negative = G[index] < 0
    codes = np.where(negative, ~index, index).astype(np.int32)
    residual = G.copy()
    residual[index] -= np.where(negative, -scale, scale)
    return scale, codes, residual


def adacomp_decode(scale: np.float32, codes: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.float32)
    index = np.where(codes >= 0, codes, ~codes)
    np.add.at(out, index, np.where(codes >= 0, scale, -scale).astype(np.float32))
    return out


def fold(acc: np.ndarray, grad: np.ndarray, keep: bool) -> tuple[np.ndarray, int]:
    """(acc + grad, or grad without error feedback; the number of non-finite entries of grad)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return (acc + grad if keep else grad.copy()), int((~np.isfinite(grad)).sum())


# --- random-k, threshold, signSGD, momentum (kernels/{randomk,threshold,signsgd,momentum}_cpu) ---

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix_int(z: int) -> int:
    """splitmix64's finalizer on a Python int."""
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _mix_array(z: np.ndarray) -> np.ndarray:
    """The same on a uint64 array (array arithmetic wraps mod 2**64 silently)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _feistel(x: np.ndarray, bits: int, keys: list[int]) -> np.ndarray:
    """A bijection of the bits-bit integers: rounds that swap the low part to the top and xor a
    keyed hash of it into the old high part."""
    lo_bits, hi_bits = bits // 2, bits - bits // 2
    for key in keys:
        lo = x & np.uint64((1 << lo_bits) - 1)
        hi = x >> np.uint64(lo_bits)
        f = _mix_array(lo ^ np.uint64(key)) & np.uint64((1 << hi_bits) - 1)
        x = (lo << np.uint64(hi_bits)) | (hi ^ f)
        lo_bits, hi_bits = hi_bits, lo_bits
    return x


def randomk_indices(n: int, k: int, seed: int) -> np.ndarray:
    """The images of 0..k-1 under the seed's permutation of range(n): the Feistel permutation of
    the (n-1).bit_length()-bit integers, reapplied while the image is >= n (cycle walking)."""
    bits = (n - 1).bit_length()
    keys = [_mix_int(seed + (r + 1) * _GOLDEN) for r in range(4)]
    x = _feistel(np.arange(k, dtype=np.uint64), bits, keys)
    while (x >= n).any():
        out = x >= n
        x[out] = _feistel(x[out], bits, keys)
    return x.astype(np.int32)


def randomk(acc: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(values in index order of generation, new residual)."""
    index = randomk_indices(acc.size, k, seed)
    residual = acc.copy()
    residual[index] = 0
    return acc[index], residual


def threshold(acc: np.ndarray, thr: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, indices ascending, new residual) of every |acc| > thr (float32 compare)."""
    index = np.flatnonzero(np.abs(acc) > np.float32(thr)).astype(np.int32)
    residual = acc.copy()
    residual[index] = 0
    return acc[index], index, residual


def signs(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(packed bits of acc >= 0, little bit order; acc - the +-1 they stand for)."""
    up = acc >= 0
    return np.packbits(up, bitorder="little"), acc - np.where(up, np.float32(1), np.float32(-1))


def signs_decode(bits: np.ndarray, n: int) -> np.ndarray:
    return np.where(np.unpackbits(bits, bitorder="little")[:n].astype(bool), 1, -1).astype(np.float32)


def majority_vote(vectors: list[np.ndarray]) -> np.ndarray:
    """sign(sum of the ranks' signs, sign(0) = +1 per rank), 0 on a tie."""
    return np.sign(sum(np.where(v >= 0, 1, -1) for v in vectors)).astype(np.float32)


def momentum(acc: np.ndarray, grad: np.ndarray, u: np.ndarray, decay: float,
             gain: float) -> tuple[np.ndarray, np.ndarray]:
    """(new acc, new u): u' = decay u + gain grad, acc' = (acc - grad) + u', in float32."""
    u_new = np.float32(decay) * u + np.float32(gain) * grad
    return (acc - grad) + u_new, u_new


# --- byte-code quantization: QSGD, TernGrad, u8bit, natural (kernels/quantize*.py) ----------

_F32_MAX = np.float64(np.finfo(np.float32).max)


def uniform(seed: int, n: int) -> np.ndarray:
    """counter_rng.uniform(seed, i) for i < n: splitmix64's i-th output, top 24 bits."""
    z = np.uint64(seed) + (np.arange(n, dtype=np.uint64) + np.uint64(1)) * np.uint64(_GOLDEN)
    return (_mix_array(z) >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)


def _buckets(acc: np.ndarray, bucket: int) -> np.ndarray:
    """acc as rows of ``bucket`` entries, the last padded with zeros."""
    rows = -(-acc.size // bucket)
    padded = np.zeros(rows * bucket, acc.dtype)
    padded[:acc.size] = acc
    return padded.reshape(rows, bucket)


def l2_norms(acc: np.ndarray, bucket: int) -> np.ndarray:
    """Per bucket: sqrt of the float64 sum of squares added in index order (cumsum, unlike
    np.sum, adds in order), saturated at float32's max unless infinite, as float32."""
    with np.errstate(invalid="ignore", over="ignore"):
        norm = np.sqrt(np.cumsum(_buckets(acc.astype(np.float64) ** 2, bucket), axis=1)[:, -1])
    return np.where((norm > _F32_MAX) & (norm < np.inf), _F32_MAX, norm).astype(np.float32)


def max_abs(acc: np.ndarray, bucket: int) -> np.ndarray:
    return np.abs(_buckets(acc, bucket)).max(axis=1)  # NaN wins


def dettmers_magnitudes() -> np.ndarray:
    """Magnitude of each 7-bit code of Dettmers' dynamic tree, by its bits: E leading zeros
    give 10**-E, then the indicator bit, then 6 - E bits f of linear fraction; value
    10**-E (0.1 + 0.9 (f + 1) / 2**(6 - E)) (the upper end of the step), float32."""
    out = [0.0]
    for code in range(1, 128):
        zeros = 7 - code.bit_length()
        fraction_bits = 6 - zeros
        f = code & ((1 << fraction_bits) - 1)
        out.append(10.0 ** -zeros * (0.1 + 0.9 * (f + 1) / 2 ** fraction_bits))
    return np.float32(out).astype(np.float64)


def quantize(acc: np.ndarray, scales: np.ndarray, bucket: int, mode: str, bits: int, seed: int,
             levels: int = 1, clip: float = np.inf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(packed codes, decoded values, new residual) of acc under the byte-code scheme
    ``mode`` = "linear" | "nearest" | "natural" (see hvd_compress/kernels/quantize.py), given
    the per-bucket scales."""
    n = acc.size
    s = scales[np.arange(n) // bucket].astype(np.float64)
    usable = (s > 0) & (s < np.inf)
    a = np.abs(acc)
    u = uniform(seed, n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = np.where(usable, (levels if mode == "linear" else 1) / np.where(usable, s, 1), 0.0)
        if mode == "linear":
            a = np.where(a > np.float32(clip), np.float32(clip), a)
            q = a.astype(np.float64) * inv
            floor = np.floor(np.where(q > 0, q, 0))
            level = np.where(q >= levels, levels, floor + (u < q - floor))
            code = np.where(q > 0, level, 0)
            magnitude = np.arange(levels + 1) / np.float64(levels)
        elif mode == "nearest":
            magnitude = dettmers_magnitudes()
            q = a.astype(np.float64) * inv
            code = np.where(q > 0, np.searchsorted((magnitude[:-1] + magnitude[1:]) / 2, q), 0)
        else:
            mantissa, exponent = np.frexp(a)
            e = exponent.astype(np.int64) - 1
            emax = np.frexp(np.where(usable, s, 1))[1].astype(np.int64) - 1
            lowest = emax - 125
            r = np.minimum(e + (u < 2 * mantissa - 1), 127)
            flush = np.where(u < np.ldexp(a.astype(np.float64), -lowest), 127, 0)
            code = np.where((a > 0) & usable, np.where(e >= lowest, emax + 2 - r, flush), 0)
            magnitude = np.concatenate([[0.0], 2.0 ** (2 - np.arange(1, 128))])
    code = code.astype(np.int64)
    signed = np.where(acc < 0, -code, code)
    with np.errstate(invalid="ignore", over="ignore"):
        values = (np.sign(signed) * magnitude[np.abs(signed)] * s).astype(np.float32)
        residual = acc - values
    fields = _buckets(signed & ((1 << bits) - 1), 8 // bits)
    packed = (fields << (bits * np.arange(8 // bits))).sum(axis=1).astype(np.uint8)
    return packed, values, residual
