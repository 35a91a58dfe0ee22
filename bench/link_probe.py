"""A Horovod worker that times the collectives the cost model (hvd_compress/communication/cost.py)
describes, over a range of sizes: one JSON line per rank, {collective: {bytes: median seconds}}.

Run by bench/cost_model.py on the simulated cluster, one process per worker namespace.
"""
import json
import statistics
import time

import horovod.torch as hvd
import torch

SIZES = [8, 1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22]  # bytes per rank
REPEATS = 9


def _timed(run) -> float:
    times = []
    for _ in range(REPEATS):
        hvd.allreduce(torch.zeros(1), name="probe.barrier")
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    hvd.init()
    torch.set_num_threads(1)
    p = hvd.size()
    found = {"allreduce": {}, "allgather": {}, "alltoall": {}}
    for nbytes in SIZES:
        floats = torch.zeros(max(1, nbytes // 4))
        raw = torch.zeros(nbytes, dtype=torch.uint8)
        splits = torch.tensor([nbytes // p] * (p - 1) + [nbytes - nbytes // p * (p - 1)], dtype=torch.int32)
        found["allreduce"][nbytes] = _timed(lambda: hvd.allreduce(floats, name=f"probe.ar.{nbytes}"))
        found["allgather"][nbytes] = _timed(lambda: hvd.allgather(raw, name=f"probe.ag.{nbytes}"))
        found["alltoall"][nbytes] = _timed(lambda: hvd.alltoall(raw, splits=splits, name=f"probe.a2a.{nbytes}"))
    print(json.dumps({"rank": hvd.rank(), "size": p, "times": found}), flush=True)


if __name__ == "__main__":
    main()
