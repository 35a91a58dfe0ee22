"""Horovod's synthetic throughput benchmark with one argument added: ``--compression``.

    horovodrun -np 4 python examples/pytorch_synthetic_benchmark.py --model resnet18 \
        --compression topk:ratio=0.01

Trains on one random batch (no data loading), prints samples/s. ``--json`` prints one JSON line
per rank instead, with the bytes that ``--iface`` sent and received per step (the simulated
cluster's benches read it); bench/ddp_worker.py runs the same loop under torch DDP.
"""
import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import MODELS, synthetic_input  # noqa: E402


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default="resnet18", choices=sorted(MODELS))
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--num-warmup-batches", type=int, default=3)
    parser.add_argument("--num-iters", type=int, default=10, help="timed steps")
    parser.add_argument("--json", action="store_true", help="one JSON line per rank")
    parser.add_argument("--iface", default=None, help="network interface whose counters to read")
    if extra:
        extra(parser)
    return parser.parse_args()


def synthetic_model_and_batch(args: argparse.Namespace):
    torch.manual_seed(0)
    torch.set_num_threads(1)  # one core per worker: the simulated cluster runs every worker here
    model = MODELS[args.model]()
    x = synthetic_input(args.model, args.batch_size)
    y = torch.randint(0, 10, (args.batch_size,))
    return model, x, y


def _counters(iface: str | None) -> tuple[int, int]:
    if iface is None:
        return 0, 0
    base = f"/sys/class/net/{iface}/statistics"
    with open(f"{base}/tx_bytes") as tx, open(f"{base}/rx_bytes") as rx:
        return int(tx.read()), int(rx.read())


#: at most this many steps for communication="auto" to make its plan final (planner.py: at most
#: 1 + (64 per candidate + 20 to confirm) per round of trials, 3 rounds at most)
PLAN_STEPS = 1000


def benchmark(step: Callable[[], None], barrier: Callable[[], None], rank: int, size: int,
              args: argparse.Namespace, phases: Callable[[], dict] = dict,
              plan: Callable[[], dict] = dict) -> None:
    """Runs steps until ``plan()`` (an hvd_compress compressor's measured plan) is final, warms
    up, times ``num_iters`` steps between two barriers and reports throughput: from the median
    step, which one slow step (a page fault storm, another process on the core) does not move;
    every step ends in the optimizer waiting for all ranks, so the ranks' steps take the same
    time. ``phases()``: cumulative seconds by phase of the compressed path, reported per step
    in the JSON, with the plan and the seconds and steps it took to be final."""
    started, planning = time.perf_counter(), 1
    step()  # the plan starts with the first gradient
    while plan().get("state", "final") != "final" and planning < PLAN_STEPS:
        step()
        planning += 1
    planned_s = time.perf_counter() - started
    for _ in range(args.num_warmup_batches):
        step()
    barrier()
    tx0, rx0 = _counters(args.iface)
    before = phases()
    times = []
    for _ in range(args.num_iters):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    barrier()
    tx1, rx1 = _counters(args.iface)
    after = phases()
    samples_per_s = args.batch_size * size / statistics.median(times)
    if args.json:
        print(json.dumps({"rank": rank, "size": size, "steps": args.num_iters,
                          "samples_per_s": samples_per_s,
                          "tx_bytes_per_step": (tx1 - tx0) / args.num_iters,
                          "rx_bytes_per_step": (rx1 - rx0) / args.num_iters,
                          "step_ms": 1000 * statistics.median(times),
                          "phase_ms_per_step": {k: 1000 * (v - before.get(k, 0.0)) / args.num_iters
                                                for k, v in after.items()},
                          "plan": {**plan(), "planned_s": planned_s, "planning_steps": planning}}),
              flush=True)
    elif rank == 0:
        print(f"{args.model}, batch {args.batch_size} per worker, {size} workers: "
              f"{samples_per_s:.1f} samples/s", flush=True)


def main() -> None:
    import horovod.torch as hvd

    import hvd_compress

    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument(
        "--compression", default="none", help="compressor spec (default: %(default)s)"))
    hvd.init()
    model, x, y = synthetic_model_and_batch(args)
    compression = hvd_compress.from_spec(args.compression)
    # DGC applies the momentum itself (and refuses an optimizer with momentum of its own)
    momentum = 0.0 if isinstance(compression, hvd_compress.DGC) else 0.9
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    ours = isinstance(compression, hvd_compress.Compressor)
    phases = (lambda: compression.stats()["seconds"]) if ours else dict
    plan = (lambda: compression.stats()["plan"]) if ours else dict
    benchmark(step, lambda: hvd.allreduce(torch.zeros(1), name="benchmark.barrier"),
              hvd.rank(), hvd.size(), args, phases, plan)


if __name__ == "__main__":
    main()
