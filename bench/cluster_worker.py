"""One worker of a cluster benchmark: trains a model on synthetic data for some steps and prints
one JSON line with its throughput and the bytes its network interface sent and received.

Run by bench/netsim.py inside a worker namespace (or by hand under horovodrun, with --iface lo).
"""
import argparse
import json
import os
import sys
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import hvd_compress  # noqa: E402
from models import INPUT_SHAPES, MODELS  # noqa: E402


def counters(iface: str) -> tuple[int, int]:
    base = f"/sys/class/net/{iface}/statistics"
    with open(f"{base}/tx_bytes") as tx, open(f"{base}/rx_bytes") as rx:
        return int(tx.read()), int(rx.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="widemlp", choices=sorted(MODELS))
    parser.add_argument("--compression", default="none")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--iface", default="eth0")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = MODELS[args.model]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    compression = hvd_compress.from_spec(args.compression)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    x = torch.randn(args.batch_size, *INPUT_SHAPES[args.model])
    y = torch.randint(0, 10, (args.batch_size,))

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    hvd.allreduce(torch.zeros(1), name="cluster_worker.barrier")
    tx0, rx0 = counters(args.iface)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    hvd.allreduce(torch.zeros(1), name="cluster_worker.barrier")
    elapsed = time.perf_counter() - start
    tx1, rx1 = counters(args.iface)
    print(json.dumps({"rank": hvd.rank(), "size": hvd.size(), "steps": args.steps,
                      "samples_per_s": args.steps * args.batch_size * hvd.size() / elapsed,
                      "tx_bytes_per_step": (tx1 - tx0) / args.steps,
                      "rx_bytes_per_step": (rx1 - rx0) / args.steps}), flush=True)


if __name__ == "__main__":
    main()
