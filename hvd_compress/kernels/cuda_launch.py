"""Launch geometry shared by the CUDA kernels."""
import numpy as np
from numba import config, cuda

THREADS = 256
# Grid-stride kernels use at most this many threads; each keeps private partial results. The
# simulator runs every GPU thread as a Python thread: there one block does it, which also makes
# the tests walk the stride loops many times.
MAX_STRIDED_THREADS = THREADS if config.ENABLE_CUDASIM else 1 << 16


def blocks(work_items: int) -> int:
    return max(1, (work_items + THREADS - 1) // THREADS)


def strided_blocks(n: int) -> int:
    return blocks(min(n, MAX_STRIDED_THREADS))


def zeros(shape, dtype, stream):
    return cuda.to_device(np.zeros(shape, dtype), stream=stream)
