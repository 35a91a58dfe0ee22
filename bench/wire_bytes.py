"""Communication at scale: bytes on the wire per worker and step, and samples/s, at np=2, 4 and
8 on the simulated cluster (bench/netsim.py), each compressor with its default (auto) routes
beside the same compressor forced onto one route.

    sudo .venv/bin/python bench/wire_bytes.py            # both models, np=2/4/8, 100 Mbit/s
    sudo .venv/bin/python bench/wire_bytes.py --quick    # WideMLP, np=2 and 8, defaults only

Writes bench/results/wire_bytes.json (cached per cell: a re-run skips finished cells; --fresh
starts over). At np=8 the 8 workers share this machine's 2 cores, so a worker's compute takes
about 4 times as long as at np=2: compare methods within a world size, not across.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ResultCache, with_option  # noqa: E402
from netsim import exit_unless_available  # noqa: E402
from throughput import measure  # noqa: E402

DEFAULTS = ["none", "fp16", "topk:ratio=0.01", "onebit", "adacomp"]
FORCED = [with_option(spec, f"communication={way}")
          for spec in ("topk:ratio=0.01", "onebit", "adacomp") for way in ("allgather", "twophase")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="WideMLP, np=2 and 8, defaults only")
    parser.add_argument("--fresh", action="store_true", help="ignore cached cells")
    parser.add_argument("--models", nargs="+", default=["widemlp", "resnet18"])
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--rate-mbit", type=float, default=100)
    parser.add_argument("--batch-size", type=int, default=8, help="per worker")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--methods", nargs="+", default=DEFAULTS + FORCED, metavar="SPEC")
    args = parser.parse_args()
    exit_unless_available("wire_bytes")
    if args.quick:
        args.models, args.workers, args.methods = ["widemlp"], [2, 8], DEFAULTS
    cells = {f"{model}|np={workers}|{method}|{args.rate_mbit:g}mbit|batch={args.batch_size}":
             lambda model=model, workers=workers, method=method: {
                 "model": model, "np": workers, "method": method, "rate_mbit": args.rate_mbit,
                 "batch_size": args.batch_size,
                 **measure(workers, method, model, args.rate_mbit, args.steps, args.batch_size)}
             for model in args.models for workers in args.workers for method in args.methods}
    ResultCache("wire_bytes", args.fresh).sweep(
        cells, lambda c: f"tx {c['tx_bytes_per_step'] / 1e6:8.2f} MB/step  {c['samples_per_s']:8.1f} samples/s")


if __name__ == "__main__":
    main()
