"""A Horovod worker that times the CPU the compressed path spends per tensor and step, by route:
the ``compress`` and ``decode`` phases of ``stats()["seconds"]`` (waiting on collectives left
out), for TopK, OneBit and AdaComp over a range of sizes. One JSON line per rank:
[{"method", "route", "numel", "ranks", "calls", "seconds"}, ...].

Run by ``bench/cost_model.py cpu`` under horovodrun on this machine (one core per rank, as on
the simulated cluster); the fit is cost.py's CPU constants.
"""
import json
import statistics
import sys

import horovod.torch as hvd
import torch

import hvd_compress as hc
from hvd_compress.communication import allgather, fusion, twophase
from hvd_compress.communication.base import Exchange

METHODS = ["topk:ratio=0.01", "onebit", "adacomp"]
SIZES = [2048, 32768, 524288]
STEPS = 60


def per_step(spec: str, way: str, numel: int) -> float:
    """Median compress + decode seconds of one tensor's step on ``way``."""
    compressor = hc.from_spec(spec)
    exchange = Exchange(f"probe.{way}.{numel}.{spec}", hvd.global_process_set, True)
    exchange.buckets = fusion.Buckets([], exchange)
    start = allgather.start if way == "allgather" else twophase.start
    grad = torch.randn(numel, generator=torch.Generator().manual_seed(hvd.rank()))
    times = []
    for step in range(STEPS + 5):
        before = compressor.stats()["seconds"]
        start(compressor, grad, "w", exchange)()
        after = compressor.stats()["seconds"]
        if step >= 5:  # the first steps compile and allocate
            times.append(sum(after[k] - before.get(k, 0.0) for k in ("compress", "decode")))
    return statistics.median(times)


def main() -> None:
    hvd.init()
    torch.set_num_threads(1)
    p = hvd.size()
    rows = []
    for spec in METHODS:
        for numel in SIZES:
            for way, calls in (("allgather", 2), ("twophase", 2 * p + 3)):
                rows.append({"method": spec, "route": way, "numel": numel, "ranks": p,
                             "calls": calls, "seconds": per_step(spec, way, numel)})
    print(json.dumps(rows), flush=True)


if __name__ == "__main__":
    sys.exit(main())
