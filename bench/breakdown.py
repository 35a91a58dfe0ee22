"""Where a compressed step's time goes: each compressor's compressed path by phase (compress,
wait, decode: accounting.py ``timed``) against the uncompressed step and torch DDP's
PowerSGD hook, on the simulated cluster (bench/netsim.py), side by side in one sweep with
repeats: on unthrottled links, where compression has the least to win and its CPU cost shows
most, and on 1 Gbit/s, where compute and communication are of a size.

    sudo .venv/bin/python bench/breakdown.py            # both models, np=2 and 4, unthrottled
    sudo .venv/bin/python bench/breakdown.py --quick    # ResNet-18, np=2, unthrottled and 1 Gbit/s

Writes bench/results/breakdown.json (cached per run: a re-run skips finished runs; --fresh
starts over). Each cell is the median of its repeats; the repeats are the outer loop, so a
cell's runs are spread over the sweep, not back to back. ``compress`` runs inside the backward
pass (the gradient hook), so part of it overlaps nothing but the autograd thread's own work;
``wait`` includes waiting for the slowest rank's backward pass; ``decode`` runs in
synchronize(). Issue 12's targets compare compress + decode with the uncompressed step, and
each method's step with the uncompressed one and with DDP's PowerSGD hook.
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ResultCache, rate_label  # noqa: E402
from netsim import exit_unless_available  # noqa: E402
from throughput import measure  # noqa: E402

METHODS = ["none", "topk:ratio=0.01", "onebit", "adacomp", "powersgd:rank=1", "ddp:powersgd:1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="ResNet-18, np=2 only, unthrottled and 1 Gbit/s")
    parser.add_argument("--rates", nargs="+", type=float, default=None, metavar="MBIT",
                        help="link rates besides unthrottled (default: none; --quick: 1000)")
    parser.add_argument("--fresh", action="store_true", help="ignore cached runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8, help="per worker")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per run (median)")
    parser.add_argument("--methods", nargs="+", default=METHODS, metavar="SPEC")
    args = parser.parse_args()
    exit_unless_available("breakdown")
    grid = [("resnet18", 2)] if args.quick else [(m, p) for m in ("resnet18", "widemlp") for p in (2, 4)]
    rates = [None] + (args.rates if args.rates is not None else [1000.0] if args.quick else [])
    # repeats outermost: each cell's repeats are spread over the sweep, not back to back
    cells = {f"{model}|np={workers}|{rate_label(rate)}|{method}|batch={args.batch_size}|repeat={r}":
             lambda model=model, workers=workers, rate=rate, method=method, r=r: {
                 "model": model, "np": workers, "rate_mbit": rate, "method": method, "repeat": r,
                 "batch_size": args.batch_size,
                 **measure(workers, method, model, rate, args.steps, args.batch_size)}
             for r in range(args.repeats) for model, workers in grid for rate in rates
             for method in args.methods}
    ResultCache("breakdown", args.fresh).sweep(
        cells, lambda c: f"step {c['step_ms']:.0f} ms  " + "  ".join(
            f"{k} {v:.1f}" for k, v in c["phase_ms_per_step"].items()))


def medians(result: dict) -> dict:
    """(model, np, link rate in Mbit/s or None, method) -> the median over repeats of step_ms
    and of each phase."""
    groups: dict = {}
    for c in result["cells"].values():
        groups.setdefault((c["model"], c["np"], c.get("rate_mbit"), c["method"]), []).append(c)
    return {key: {"step_ms": statistics.median(c["step_ms"] for c in runs),
                  "repeats": len(runs),
                  "phases": {k: statistics.median(c["phase_ms_per_step"].get(k, 0.0) for c in runs)
                             for k in runs[0]["phase_ms_per_step"]}}
            for key, runs in groups.items()}


if __name__ == "__main__":
    main()
