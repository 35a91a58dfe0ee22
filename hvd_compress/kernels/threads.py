"""CPU kernels in two builds, serial and parallel, picked by array size.

Parallel kernels pay only on large arrays. On small ones the thread hand-off costs more than the
work, and Numba's thread pool, once started, competes for the cores that Horovod's background
thread and the other ranks on the same host need. Measured on 2 cores, np=2, LeNet-5: 27 ms a
step with serial kernels, 300 ms with parallel ones, 246 ms with parallel ones limited by
``numba.set_num_threads(1)``. So arrays under ``PARALLEL_MIN`` elements never touch the pool.

Nor does any array when the ranks on a host leave no spare core: a parallel kernel then fights
the other ranks for the cores, and each loses its time slices while the others spin. Measured on
2 cores, np=2, ResNet-18 (tensors up to 2.4M elements): 4.9 samples/s with TopK through the
parallel build against 47.6 with the serial one, uncompressed Horovod 55.9. So a rank uses the
pool only when its share of the host's cores (the cores it may run on, divided by
``HOROVOD_LOCAL_SIZE``, or torchrun's ``LOCAL_WORLD_SIZE`` in a DDP job) is at least two, with
that many threads. Measured under torchrun, 2 ranks on 2 cores (shared with other jobs),
WideMLP, TopK as a DDP hook (hvd_compress.ddp): 148 ms a step when only Horovod's variable was
read (each rank's pool took both cores), 72 ms with torchrun's read too.
"""
import functools
import os
import types
from typing import Callable

import numba
from numba import njit

PARALLEL_MIN = 1 << 20


@functools.cache
def threads_per_rank() -> int:
    """This rank's share of its host's cores, capped by Numba's pool size; at least 1."""
    cores = len(os.sched_getaffinity(0))
    local_ranks = max(1, int(os.environ.get("HOROVOD_LOCAL_SIZE") or os.environ.get("LOCAL_WORLD_SIZE") or "1"))
    return max(1, min(numba.config.NUMBA_NUM_THREADS, cores // local_ranks))


def workers(size: int) -> int:
    """How many threads a kernel of ``serial_and_parallel`` runs on for an array of ``size``
    elements: 1 (the serial build) or this rank's share of the cores (the parallel one)."""
    threads = threads_per_rank()
    return 1 if threads < 2 or size < PARALLEL_MIN else threads


def serial_and_parallel(fn: Callable | None = None, *, fastmath: bool | set = False) -> Callable:
    """Compiles ``fn`` (written with ``prange``) twice; the result dispatches on ``arg0.size``.
    ``fastmath`` is Numba's: ``{"reassoc"}`` lets LLVM vectorize a floating-point sum (a
    different, still deterministic, order of additions)."""
    if fn is None:
        return functools.partial(serial_and_parallel, fastmath=fastmath)
    serial = njit(cache=True, fastmath=fastmath)(fn)
    # A separate function object with its own name: Numba's on-disk cache keys entries by the
    # function's qualified name and signature, not by the parallel flag.
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_parallel",
                              fn.__defaults__, fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + "_parallel"
    parallel = njit(cache=True, parallel=True, fastmath=fastmath)(twin)

    def dispatch(*args):
        threads = workers(args[0].size)
        if threads == 1:
            return serial(*args)
        numba.set_num_threads(threads)  # per calling thread in Numba, so set on every call
        return parallel(*args)

    dispatch.__doc__ = fn.__doc__
    dispatch.serial, dispatch.parallel = serial, parallel
    return dispatch
