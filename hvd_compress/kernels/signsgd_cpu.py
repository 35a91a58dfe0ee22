"""Sign bits on the CPU: onebit_cpu's packing with the fixed levels -1 and +1.

Element i becomes bit [acc_i >= 0] (element 8b+j in bit j of byte b), and ``acc`` is left
holding acc - sign (the residual, when error feedback keeps it); decoding adds +1 or -1.
"""
import numpy as np

from .onebit_cpu import _bits, dequantize_add

#: the functions signsgd_cuda offers too (kernels/__init__.py checks), and those only here
SHARED = ('pack', 'unpack_add')
CPU_ONLY = ()

_LOW, _HIGH = np.float32([-1.0]), np.float32([1.0])


def pack(acc: np.ndarray) -> np.ndarray:
    """The packed sign bits of ``acc``; subtracts the +-1 they stand for from ``acc``."""
    bits = np.empty((acc.size + 7) // 8, np.uint8)
    _bits(acc, bits, _LOW, _HIGH, True)
    return bits


def unpack_add(bits: np.ndarray, out: np.ndarray) -> None:
    """out[i] += +1 where bit i is set, -1 elsewhere; ``bits`` holds (out.size + 7) // 8 bytes
    (the caller checks: methods/signsgd.py)."""
    dequantize_add(bits, _LOW, _HIGH, out)
