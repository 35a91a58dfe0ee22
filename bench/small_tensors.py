"""Where compression stops paying: throughput of ResNet-18 (62 parameter tensors, 64 to 2.4M
elements) on the simulated cluster with TopK 1% for several ``min_numel`` thresholds (tensors
below it go through Horovod's dense fused allreduce).

    sudo .venv/bin/python bench/small_tensors.py

Writes bench/results/small_tensors.json (cached per cell).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ResultCache  # noqa: E402
from netsim import exit_unless_available  # noqa: E402
from throughput import measure  # noqa: E402

THRESHOLDS = [1, 1024, 16384, 262144]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate-mbit", type=float, default=1000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--method", default="topk:ratio=0.01")
    args = parser.parse_args()
    exit_unless_available("small_tensors")
    cells = {f"resnet18|np=2|{args.method},min_numel={threshold}|{args.rate_mbit}mbit":
             lambda threshold=threshold: {
                 "min_numel": threshold, "method": args.method, "rate_mbit": args.rate_mbit,
                 **measure(2, f"{args.method},min_numel={threshold}", "resnet18", args.rate_mbit, args.steps)}
             for threshold in THRESHOLDS}
    ResultCache("small_tensors").sweep(
        cells, lambda c: f"{c['samples_per_s']:.1f} samples/s, {c['tx_bytes_per_step'] / 1e6:.2f} MB/step")

if __name__ == "__main__":
    main()
