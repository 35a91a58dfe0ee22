"""Training throughput and wire bytes on the simulated cluster (bench/netsim.py): each method,
model, world size and link rate, with torch DDP's own communication hooks side by side.

    sudo .venv/bin/python bench/throughput.py            # the full sweep
    sudo .venv/bin/python bench/throughput.py --quick    # ResNet-18, np=2, 100 Mbit/s only
    sudo .venv/bin/python bench/throughput.py --results auto --repeats 3   # 3 launches a cell

Writes bench/results/throughput.json (cached per cell: an interrupted sweep re-run skips the
finished cells; --fresh starts over) and bench/results/throughput.png, bytes_per_step.png.
A method is an hvd_compress spec (Horovod's own `none` and `fp16` included) or `ddp:HOOK`, a
hook of bench/ddp_worker.py: one of DDP's own, or an hvd_compress spec as a DDP hook
(`ddp:topk:ratio=0.01`, DDP_METHODS).

Repeats: ``--repeats N`` launches each cell N times, the methods of a model, world size and
link taking turns (none, TopK, ..., none, TopK, ...), so that a slow stretch of the shared machine
falls on every method alike; bench/report.py reads a cell's median launch. Why: LeNet-5's
millisecond steps at np=2 on loopback ran at 4,164 to 6,787 samples/s in five launches of the
same uncompressed run, a spread no single launch can tell a 3% target from.

Why a small batch: every worker computes on one core of this 2-core machine, about 100 times
slower than the GPU a real worker has; with a per-worker batch of 8 the compute:communication
balance of a 100 Mbit/s step is nearer a GPU cluster's on a slow network than with 32 (where
compute alone takes seconds and hides most of what compression saves). Use --batch-size to see
the other regime.
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ResultCache, rate_label  # noqa: E402
from netsim import WORKER_IFACE, Cluster, exit_unless_available  # noqa: E402

EXAMPLE = os.path.join(HERE, "..", "examples", "pytorch_synthetic_benchmark.py")
METHODS = ["none", "fp16", "topk:ratio=0.01", "onebit", "adacomp", "powersgd:rank=1",
           "ddp:fp16", "ddp:powersgd:1", "ddp:powersgd:4"]
#: hvd_compress's methods as DDP hooks (hvd_compress.ddp), for the DDP cells beside DDP's own
#: (``--methods``); not in METHODS while bench/report.py counts every ``ddp:`` cell as one of
#: DDP's own hooks (common.ddp_own tells them apart)
DDP_METHODS = ["ddp:topk:ratio=0.01", "ddp:onebit", "ddp:adacomp", "ddp:powersgd:rank=1"]
MODELS = ["lenet5", "resnet18", "widemlp", "transformer", "lstm"]
RATES = [100, 1000, None]  # Mbit/s; None: unthrottled
#: timed steps per cell at the least, by model: LeNet-5's steps take milliseconds, and the
#: median of a handful of them moves with every scheduling hiccup of the shared cores
MIN_STEPS = {"lenet5": 60}


def command(method: str, model: str, batch_size: int, steps: int, warmup: int) -> list[str]:
    if method.startswith("ddp:"):
        head = [os.path.join(HERE, "ddp_worker.py"), "--hook", method[len("ddp:"):]]
    else:
        head = [EXAMPLE, "--compression", method]
    return [sys.executable, *head, "--model", model, "--batch-size", str(batch_size),
            "--num-warmup-batches", str(warmup), "--num-iters", str(steps),
            "--json", "--iface", WORKER_IFACE]


def measure(workers: int, method: str, model: str, rate_mbit: float | None, steps: int,
            batch_size: int = 32, warmup: int = 2, per_node: int = 1) -> dict:
    """Runs one cell on a fresh cluster (nodes of ``per_node`` workers): samples/s, bytes per
    step through each node's uplink (mean over workers of their node's interface counters),
    the median step and the compressed path's milliseconds per step by phase (means over
    workers)."""
    with Cluster(workers, rate_mbit, per_node) as cluster:
        outputs = cluster.run(command(method, model, batch_size, steps, warmup), timeout=900)
    ranks = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    return {"tx_bytes_per_step": statistics.mean(r["tx_bytes_per_step"] for r in ranks),
            "rx_bytes_per_step": statistics.mean(r["rx_bytes_per_step"] for r in ranks),
            "samples_per_s": min(r["samples_per_s"] for r in ranks),
            "step_ms": statistics.mean(r.get("step_ms", 0.0) for r in ranks),
            "phase_ms_per_step": {k: statistics.mean(r["phase_ms_per_step"].get(k, 0.0) for r in ranks)
                                  for k in ranks[0].get("phase_ms_per_step", {})},
            "plan": {k: v for k, v in ranks[0].get("plan", {}).items() if k != "routes"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ResNet-18, np=2, 100 Mbit/s only")
    parser.add_argument("--fresh", action="store_true", help="ignore cached cells")
    parser.add_argument("--batch-size", type=int, default=8, help="per worker")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per cell (median)")
    parser.add_argument("--repeats", type=int, default=1, help="launches per cell, methods in turns")
    parser.add_argument("--methods", nargs="+", default=METHODS, metavar="METHOD")
    parser.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 4], metavar="NP")
    parser.add_argument("--results", default="throughput",
                        help="bench/results/NAME.json to cache cells in (auto.json: the defaults' sweep)")
    args = parser.parse_args()
    exit_unless_available("throughput")
    grid = ([("resnet18", 2, 100)] if args.quick else
            [(m, p, r) for m in args.models for p in args.workers for r in RATES])
    cells = {f"{model}|np={workers}|{rate_label(rate)}|{method}|batch={args.batch_size}"
             + (f"|run={run}" if run else ""):
             lambda model=model, workers=workers, rate=rate, method=method, run=run: {
                 "model": model, "np": workers, "rate_mbit": rate, "method": method,
                 "batch_size": args.batch_size, "run": run,
                 **measure(workers, method, model, rate, max(args.steps, MIN_STEPS.get(model, 0)),
                           args.batch_size)}
             for model, workers, rate in grid for run in range(args.repeats) for method in args.methods}
    cache = ResultCache(args.results, args.fresh)
    cache.sweep(cells, lambda c: f"{c['samples_per_s']:8.1f} samples/s  "
                                 f"tx {c['tx_bytes_per_step'] / 1e6:8.2f} MB/step")
    if args.results == "throughput":  # the plots are of the full sweep
        import plots

        print("wrote", *plots.throughput(cache.data))


if __name__ == "__main__":
    main()
