"""What ``communication="auto"`` measures about the world it runs in, once per Horovod world:
the link (per-collective overhead, per-round latency, bandwidth) and this method's CPU.

Link. Blocking Horovod collectives over the optimizer's process set, each timed ``REPEATS``
times after one untimed warm-up: an allreduce of one float (``c + 2(p-1) a``), an allgather of 8
bytes per rank (``c + (p-1) a``), and an allreduce of ``BULK_BYTES`` (the same plus
``2 (p-1)/p D / B``). Two equations give c and a, the third the bandwidth B (cost.py's formulas).

Every figure errs on the side of trying compression, never of skipping it: an error that makes
compression look cheaper only adds a trial (planner.py), which measures the truth, while one
that makes it look dearer can leave a cluster dense with no trial at all. So the small
collectives and the CPU keep their fastest repeat (noise only adds time), the bulk allreduce
its median (its fastest could be a burst a token-bucket link lets through), and the bandwidth
counts at least half the bulk allreduce's time as transfer. Measured on the simulated cluster
before this rule (medians everywhere, the transfer ``bulk - one`` floored at 1 us): in one
launch of LeNet-5 at 1 Gbit/s, a stall made the one-float allreduce as slow as the bulk one and
the probe reported 8,389 Gbit/s; at 100 Mbit/s such a figure predicts no gain from compressing
and leaves the plan dense without a trial (LeNet-5 there ran 3.6x faster compressed). Horovod's own
cycle time is inside c, and so is its negotiation of a name it has not cached: each timed
collective has a name of its own (a dozen names a world, too few to slow Horovod's cycles:
planner.py), so c is what a step's collectives cost before Horovod's response cache knows them,
more than later steps pay. One exception to erring towards compression, measured on MNIST at np=4
and 1 Gbit/s with OneBit (bench/time_to_accuracy.py, 3 epochs): with one name per collective over
its repeats, c fell from about 1.0 to 0.85 ms (LeNet-5, np=2), and `auto` compressed all three
weight tensors in 3 launches of 3, which trained no faster than `none` (38-39 s against 39-40 s)
and reached 98% in one (finals 94.97, 97.24, 98.40); with names of their own it compressed in 2
of 6 launches (98% reached in both, finals 98.03 and 98.49) and sent dense in the others.
Cost: 12 small collectives and 4 of 1 MB; at 100 Mbit/s and p = 2 about 0.35 s.
On nodes of several workers (topology.py) two more rates, for the hierarchical route: a rank's
to the workers of its node (1 MB to them in all) and across nodes (0.5 MB to its cross peers),
each with every rank sending at once, so that the uplink's share per worker is what is
measured; alltoalls, timed against an empty one. Cost: 16 more alltoalls.

CPU. ``fold_encode`` and ``decode_add_all`` of p payloads on a throwaway copy of the compressor,
on gradients of ``SMALL`` and ``LARGE`` elements (the fastest of ``REPEATS``): per-call and
per-element seconds of the allgather route. This also compiles the method's kernels before the
first step that uses them. Cost: about 10 encodes and 30 decodes of at most 2^20 elements.

Every rank measures its own figures; ``agreed`` takes the element-wise maximum over ranks
(one small allreduce), so every rank plans from the same numbers (the agreement check keeps
holding) and the plan is that of the slowest rank, which sets the pace of a synchronous step.
"""
import copy
import statistics
import time
from typing import Callable

import horovod.torch as hvd
import torch

from ..compressor import Compressor
from . import cost
from .topology import Nodes

REPEATS = 3
BULK_BYTES = 1 << 20
SMALL, LARGE = 1 << 12, 1 << 20


def _seconds(run: Callable[[], object], keep: Callable[[list[float]], float] = min) -> float:
    """``run``'s time, ``keep`` of ``REPEATS`` timed calls after an untimed one (first-use
    allocations, connections, kernel compilation)."""
    run()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return keep(times)


def link(process_set: hvd.ProcessSet, prefix: str, nodes: Nodes | None = None) -> cost.Link:
    """This process set's link, measured (module docstring); on ``nodes``, the rates inside
    the node and across it too."""
    p = process_set.size()
    count = [0]

    def timed(op: Callable, tensor: torch.Tensor, label: str, keep=min, **kwargs) -> float:
        def run():
            count[0] += 1
            op(tensor, name=f"{prefix}.{label}.{count[0]}", process_set=process_set, **kwargs)
        return _seconds(run, keep)

    one = timed(hvd.allreduce, torch.zeros(1), "one")
    gather = timed(hvd.allgather, torch.zeros(8, dtype=torch.uint8), "gather")
    bulk = timed(hvd.allreduce, torch.zeros(BULK_BYTES // 4), "bulk", statistics.median)
    latency = max(0.0, (one - gather) / (p - 1))
    overhead = max(0.0, gather - (p - 1) * latency)
    wire_bytes = 2 * (p - 1) / p * BULK_BYTES
    gbit = wire_bytes * 8 / max(bulk - one, bulk / 2) / 1e9
    if nodes is None:
        return cost.Link(gbit=gbit, latency_s=latency, overhead_s=overhead)

    def to_peers(peers: tuple[int, ...], each: int, label: str) -> float:
        """Gbit/s of one rank sending ``each`` bytes to each of ``peers`` (itself aside) while
        every rank does the same: alltoalls with nothing for the other ranks."""
        splits = [each if r in peers and r != process_set.rank() else 0 for r in range(p)]
        empty = timed(hvd.alltoall, torch.zeros(0, dtype=torch.uint8), f"{label}0",
                      splits=torch.zeros(p, dtype=torch.int32))
        full = timed(hvd.alltoall, torch.zeros(sum(splits), dtype=torch.uint8), label, statistics.median,
                     splits=torch.tensor(splits, dtype=torch.int32))
        return sum(splits) * 8 / max(full - empty, full / 2) / 1e9

    intra = to_peers(nodes.local, BULK_BYTES // (nodes.size - 1), "intra")
    cross = to_peers(nodes.cross, BULK_BYTES // 2 // (nodes.count - 1), "cross")
    return cost.Link(gbit=gbit, latency_s=latency, overhead_s=overhead, intra_gbit=intra,
                     cross_gbit=cross)


def cpu(compressor: Compressor, ranks: int) -> cost.Cpu:
    """This rank's CPU for ``compressor``'s allgather route (module docstring)."""
    scratch = copy.deepcopy(compressor)  # its state and residuals stay untouched

    def path(n: int) -> float:
        grad = torch.randn(n, generator=torch.Generator().manual_seed(n))
        acc = torch.zeros(n)
        out = torch.zeros(n)

        def run():
            acc.zero_()
            payload = scratch.fold_encode(acc, grad, grad.shape, True, "probe")
            out.zero_()
            scratch.decode_add_all([payload] * ranks, out, grad.shape)
        return _seconds(run)

    small, large = path(SMALL), path(LARGE)
    element = max(0.0, (large - small) / (LARGE - SMALL))
    return cost.Cpu(call_s=max(0.0, small - element * SMALL) / 2, element_s=element)


def agreed(values: list[float], process_set: hvd.ProcessSet, name: str) -> list[float]:
    """The element-wise maximum of ``values`` over the ranks of ``process_set``."""
    local = torch.tensor(values, dtype=torch.float64)
    return hvd.allreduce(local, op=hvd.Max, name=name, process_set=process_set).tolist()
