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
    g_max = np.array([np.abs(G[bins == b]).max() for b in range(bins.max() + 1)], np.float32)
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
