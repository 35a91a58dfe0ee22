"""Clusters of multi-worker nodes (bench/netsim.py ``per_node``): what crosses each node's
uplink and how fast training runs, for dense Horovod, the flat routes (allgather, two-phase)
and the hierarchical route (hvd_compress/communication/hierarchical.py), with ``auto``
measuring and choosing among them.

    sudo .venv/bin/python bench/nodes.py            # the sweep
    sudo .venv/bin/python bench/nodes.py --quick    # WideMLP, 2 nodes x 4, 100 Mbit/s
    sudo .venv/bin/python bench/nodes.py --repeats 3 --models widemlp resnet18 --layouts 2x4 \
        --rates 100 --methods ...                   # repeats of some cells (the tables: medians)

Writes bench/results/nodes.json (cached per cell; --fresh starts over). A node's workers share
its namespace and talk over its loopback (unlimited); its uplink is rate-limited. Every worker
runs on one of this machine's 2 cores, so at 2 x 4 four workers share a core: compute is slow
and noisy, and the step times say more about communication than about compute-bound speed.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ResultCache, rate_label, with_option  # noqa: E402
from netsim import exit_unless_available  # noqa: E402
from throughput import measure  # noqa: E402

#: the methods compared route by route; PowerSGD has one route (its low-rank allreduces)
ROUTED = ["topk:ratio=0.01", "onebit", "adacomp", "qsgd"]
ROUTES = ["allgather", "twophase", "hierarchical"]
OTHERS = ["none", "fp16", "powersgd:rank=1"]
#: communication="auto" measured on the cluster (the product's default)
AUTO = ["topk:ratio=0.01", "onebit"]
MODELS = ["widemlp", "resnet18", "lstm"]
LAYOUTS = [(2, 4), (2, 2)]  # (nodes, workers per node)
RATES = [100, 1000]


def methods() -> list[str]:
    return OTHERS + [with_option(m, f"communication={r}") for m in ROUTED for r in ROUTES] + AUTO


def attempt(nodes: int, per_node: int, method: str, model: str, rate: float, steps: int,
            batch_size: int) -> dict:
    """One cell's measurement, or what made it fail: a cell that fails (a collective timed out
    on the oversubscribed cores) is recorded as such, and the sweep goes on."""
    try:
        return measure(nodes * per_node, method, model, rate, steps, batch_size, per_node=per_node)
    except RuntimeError as err:
        return {"failed": str(err)[-3000:]}


def show(cell: dict) -> str:
    if "failed" in cell:
        return "failed: " + cell["failed"].strip().splitlines()[-1][:200]
    return f"{cell['samples_per_s']:8.1f} samples/s  uplink {cell['tx_bytes_per_step'] / 1e6:8.3f} MB/step/node"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="WideMLP, 2 x 4, 100 Mbit/s")
    parser.add_argument("--fresh", action="store_true", help="ignore cached cells")
    parser.add_argument("--batch-size", type=int, default=8, help="per worker")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per cell (median)")
    parser.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    parser.add_argument("--layouts", nargs="+", default=[f"{n}x{w}" for n, w in LAYOUTS])
    parser.add_argument("--rates", nargs="+", type=float, default=RATES)
    parser.add_argument("--methods", nargs="+", default=None)
    parser.add_argument("--repeats", type=int, default=1, help="runs per cell (tables take medians)")
    args = parser.parse_args()
    exit_unless_available("nodes")
    layouts = [tuple(int(v) for v in layout.split("x")) for layout in args.layouts]
    grid = ([("widemlp", (2, 4), 100)] if args.quick else
            [(m, layout, r) for layout in layouts for r in args.rates for m in args.models])
    cells = {f"{model}|{nodes}x{per_node}|{rate_label(rate)}|{method}|batch={args.batch_size}"
             + (f"|repeat={r}" if r else ""):
             lambda model=model, nodes=nodes, per_node=per_node, rate=rate, method=method: {
                 "model": model, "nodes": nodes, "per_node": per_node, "rate_mbit": rate,
                 "method": method, "batch_size": args.batch_size,
                 **attempt(nodes, per_node, method, model, rate, args.steps, args.batch_size)}
             for r in range(args.repeats)
             for model, (nodes, per_node), rate in grid for method in (args.methods or methods())}
    cache = ResultCache("nodes", args.fresh)
    cache.sweep(cells, show)


if __name__ == "__main__":
    main()
