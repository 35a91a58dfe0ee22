"""Bytes on the wire per worker and step, read from each worker's interface counters on the
simulated cluster (bench/netsim.py), for each communication method at np=2 and np=4.

    sudo .venv/bin/python bench/wire_bytes.py            # WideMLP (12.6M parameters), 1 Gbit/s
    sudo .venv/bin/python bench/wire_bytes.py --quick    # np=2 only

Writes bench/results/wire_bytes.json (cached per cell: a re-run skips finished cells; --fresh
starts over). Targets (issue 4, np=4): TopK 1% and OneBit two-phase at least 20x fewer bytes
than dense fp32; OneBit two-phase per-worker bytes at np=4 within 1.3x of np=2.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ResultCache  # noqa: E402
from netsim import exit_unless_available  # noqa: E402
from throughput import measure  # noqa: E402

METHODS = ["none", "fp16", "topk:ratio=0.01", "onebit:communication=twophase",
           "onebit:communication=allgather", "adacomp"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="np=2 only")
    parser.add_argument("--fresh", action="store_true", help="ignore cached cells")
    parser.add_argument("--model", default="widemlp")
    parser.add_argument("--rate-mbit", type=float, default=1000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--methods", nargs="+", default=METHODS, metavar="SPEC")
    args = parser.parse_args()
    exit_unless_available("wire_bytes")
    cells = {f"{args.model}|np={workers}|{method}|{args.rate_mbit}mbit":
             lambda workers=workers, method=method: {
                 "model": args.model, "np": workers, "method": method, "rate_mbit": args.rate_mbit,
                 **measure(workers, method, args.model, args.rate_mbit, args.steps)}
             for workers in ([2] if args.quick else [2, 4]) for method in args.methods}
    ResultCache("wire_bytes", args.fresh).sweep(
        cells, lambda c: f"tx {c['tx_bytes_per_step'] / 1e6:8.2f} MB/step  rx {c['rx_bytes_per_step'] / 1e6:8.2f} MB/step")

if __name__ == "__main__":
    main()
