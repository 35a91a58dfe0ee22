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
from common import ResultCache, progress  # noqa: E402
from netsim import unavailable  # noqa: E402
from wire_bytes import measure  # noqa: E402

THRESHOLDS = [1, 1024, 16384, 262144]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate-mbit", type=float, default=1000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--method", default="topk:ratio=0.01")
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        sys.exit(f"small_tensors: can't run: {reason}")
    cache = ResultCache("small_tensors")
    for done, threshold in enumerate(THRESHOLDS):
        spec = f"{args.method},min_numel={threshold}"
        key = f"resnet18|np=2|{spec}|{args.rate_mbit}mbit"
        progress(done, len(THRESHOLDS), key)
        if cache.get(key) is None:
            cache.put(key, {"min_numel": threshold, "method": args.method, "rate_mbit": args.rate_mbit,
                            **measure(2, spec, "resnet18", args.rate_mbit, args.steps)})
        cell = cache.get(key)
        print(f"    {cell['samples_per_s']:.1f} samples/s, {cell['tx_bytes_per_step'] / 1e6:.2f} MB/step")
    progress(len(THRESHOLDS), len(THRESHOLDS), "done")


if __name__ == "__main__":
    main()
