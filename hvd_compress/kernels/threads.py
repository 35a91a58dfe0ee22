"""CPU kernels in two builds, serial and parallel, picked by array size.

Parallel kernels pay only on large arrays. On small ones the thread hand-off costs more than the
work, and Numba's thread pool, once started, competes for the cores that Horovod's background
thread and the other ranks on the same host need. Measured on 2 cores, np=2, LeNet-5: 27 ms a
step with serial kernels, 300 ms with parallel ones, 246 ms with parallel ones limited by
``numba.set_num_threads(1)``. So arrays under ``PARALLEL_MIN`` elements never touch the pool.
"""
import types
from typing import Callable

from numba import njit

PARALLEL_MIN = 1 << 20


def serial_and_parallel(fn: Callable) -> Callable:
    """Compiles ``fn`` (written with ``prange``) twice; the result dispatches on ``arg0.size``."""
    serial = njit(cache=True)(fn)
    # A separate function object with its own name: Numba's on-disk cache keys entries by the
    # function's qualified name and signature, not by the parallel flag.
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_parallel",
                              fn.__defaults__, fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + "_parallel"
    parallel = njit(cache=True, parallel=True)(twin)

    def dispatch(*args):
        return (parallel if args[0].size >= PARALLEL_MIN else serial)(*args)

    dispatch.__doc__ = fn.__doc__
    dispatch.serial, dispatch.parallel = serial, parallel
    return dispatch
