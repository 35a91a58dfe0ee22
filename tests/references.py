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
