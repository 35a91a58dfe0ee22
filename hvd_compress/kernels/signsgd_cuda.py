"""Sign bits on CUDA: onebit_cuda's pack and unpack with the fixed levels -1 and +1, the same
bits as signsgd_cpu."""
import numpy as np
from numba import cuda

from .cuda_launch import THREADS, blocks
from .onebit_cuda import _pack, _unpack_add


def _levels(stream):
    return (cuda.to_device(np.float32([-1.0]), stream=stream),
            cuda.to_device(np.float32([1.0]), stream=stream))


def pack(acc, stream=0):
    bits = cuda.device_array((acc.size + 7) // 8, np.uint8, stream=stream)
    _pack[blocks(bits.size), THREADS, stream](acc, *_levels(stream), bits)
    return bits


def unpack_add(bits, out, stream=0) -> None:
    _unpack_add[blocks(out.size), THREADS, stream](bits, *_levels(stream), out)
