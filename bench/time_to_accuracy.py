"""Time to accuracy on the simulated cluster (bench/netsim.py): the MNIST and Penn Treebank
examples trained to a quality target by each method, uncompressed Horovod, Horovod fp16 and
torch DDP's PowerSGD hook among them, at each link rate and world size.

    sudo .venv/bin/python bench/time_to_accuracy.py            # the full sweep
    sudo .venv/bin/python bench/time_to_accuracy.py --quick    # np=2, 100 Mbit/s, 3 methods, short runs
    sudo .venv/bin/python bench/time_to_accuracy.py --workloads ptb --workers 4 --rates 100 --repeats 3

Writes bench/results/time_to_accuracy.json (cached per run: a re-run skips finished runs;
--fresh starts over) and time_to_accuracy_WORKLOAD.png (quality against training seconds).

Targets, read off each run's curve (training seconds: evaluation excluded, as the examples'
clocks count): MNIST, the first test point at 98.0% accuracy or better; PTB, the first
validation point within 5% of the perplexity uncompressed Horovod ends with in the same cell.
What the runs are, chosen for this 2-core machine:

* MNIST: LeNet-5, 3 epochs, 4 test points an epoch (at np=4, 2 epochs of the example's
  recipe end just short of 98%).
* Each design-card method also runs as a torch DDP hook (``ddp:topk:ratio=0.01``, ...), the
  same model, data and clipping under bench/ddp_train.py: the two front doors side by side.
* PTB: the 2.8M-parameter LSTM of examples/pytorch_ptb_lm.py, one epoch over the first half of
  the training text (465k words), 8 validation points. Both models' compute is one
  core per worker (at np=4 two workers share a core): the balance of compute and communication
  is a slow network's, not a GPU cluster's on a fast one.

The rest of the catalogue (bench/bench_catalogue.py's list, MNIST with the optimizer settings the
catalogue gives it) runs in the cell the headline target is about, np=4 at 100 Mbit/s.

Repeats: ``--repeats N`` trains each run with seeds 42 .. 42 + N - 1 (the model's initial
weights, dropout and, on MNIST, the data order change with it). The default sweep is one seed
per cell (how many cells are on record: docs/benchmarks.md, Results); a few hours here. A method's result in a cell is the median over
its seeds: of the seconds to target (a run that never reached it counts as infinitely late) and
of the final quality; PTB's target is 5% above the median of what uncompressed Horovod's seeds
end with.

Every method's kernels are compiled (numba caches them on disk) before the sweep: a first run
would otherwise charge one method the compile time.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ResultCache, rate_label, with_option  # noqa: E402
from netsim import Cluster, exit_unless_available  # noqa: E402
from bench_catalogue import CATALOGUE, OPTIMIZER  # noqa: E402

EXAMPLES = os.path.join(HERE, "..", "examples")
WORKLOADS = {
    "mnist": {"example": "pytorch_mnist.py", "quality": "test_accuracy", "target": 98.0,
              "options": ["--epochs", "3", "--evals-per-epoch", "4"],
              "quick": ["--epochs", "1", "--evals-per-epoch", "4"]},
    "ptb": {"example": "pytorch_ptb_lm.py", "quality": "valid_perplexity", "within": 0.05,
            "options": ["--epochs", "1", "--train-fraction", "0.5", "--evals-per-epoch", "8"],
            "quick": ["--epochs", "1", "--train-fraction", "0.05", "--evals-per-epoch", "2"]},
    # not raced here: bench/quality.py trains it to convergence on the simulated cluster (``train``)
    "ptb_transformer": {"example": "pytorch_ptb_transformer.py", "quality": "valid_perplexity"},
}
RACED = ["mnist", "ptb"]
#: the design-card methods as torch DDP hooks (hvd_compress.ddp under bench/ddp_train.py): the
#: same method through the other front door, for issue 27's "same final quality as Horovod"
DDP_METHODS = ["ddp:topk:ratio=0.01", "ddp:onebit", "ddp:adacomp"]
METHODS = ["none", "fp16", "topk:ratio=0.01", "onebit", "adacomp", "powersgd:rank=1",
           "ddp:powersgd:1", *DDP_METHODS]
PTB_ONLY = ["topk:ratio=0.001"]  # DGC's regime: the 0.1% target is on the language model
# PTB without error feedback, at the slow link only: the convergence ablation, not a race
ABLATIONS = [with_option(c, "error_feedback=false") for c in ("topk:ratio=0.01", "onebit", "adacomp")]
QUICK_METHODS = ["none", "topk:ratio=0.01", "ddp:powersgd:1"]
RATES = [100, 1000]
SIZES = [4, 2]
CATALOGUE_CELL = (4, 100)  # (np, Mbit/s) where the rest of the catalogue runs
SEED = 42  # the examples' default; repeat i trains with seed SEED + i


def runs_in_cell(run: dict, runs: list[dict]) -> list[dict]:
    """The runs of ``runs`` in ``run``'s cell (workload, world size, link rate, options), every
    method and seed."""
    return [r for r in runs if all(r[k] == run[k] for k in ("workload", "np", "rate_mbit", "options"))]


def summary(method: str, cell: list[dict]) -> dict | None:
    """``method``'s result in one cell's runs: the median over its seeds of the seconds to target
    (None: most runs never reached it) and of the final quality, the finals' range and the
    number of runs. None when the method has no run in the cell."""
    runs = [r for r in cell if r["method"] == method]
    if not runs:
        return None
    seconds = statistics.median(math.inf if t is None else t for t in (seconds_to_target(r, cell) for r in runs))
    finals = [r[WORKLOADS[r["workload"]]["quality"]][-1][1] for r in runs]
    return {"seconds": None if math.isinf(seconds) else seconds, "final": statistics.median(finals),
            "low": min(finals), "high": max(finals), "runs": len(runs)}


def quality_target(cell: dict, cells: list[dict]) -> float | None:
    """The quality ``cell``'s run must reach: MNIST's fixed accuracy, or PTB's perplexity
    within 5% of the median of what uncompressed Horovod's runs end with in the same cell
    (None: not run yet)."""
    workload = WORKLOADS[cell["workload"]]
    if "target" in workload:
        return workload["target"]
    dense = [c[workload["quality"]][-1][1] for c in runs_in_cell(cell, cells) if c["method"] == "none"]
    return statistics.median(dense) * (1 + workload["within"]) if dense else None


def seconds_to_target(cell: dict, cells: list[dict]) -> float | None:
    """Training seconds at ``cell``'s first evaluation that met its target (None: never did)."""
    target = quality_target(cell, cells)
    if target is None:
        return None
    higher = "target" in WORKLOADS[cell["workload"]]  # accuracy: higher is better
    for (_, quality), (_, seconds) in zip(cell[WORKLOADS[cell["workload"]]["quality"]], cell["train_seconds"]):
        if (quality >= target) if higher else (quality <= target):
            return seconds
    return None


def unigram_perplexity(train_fraction: float) -> float:
    """PTB's validation perplexity under word frequencies alone (add-one smoothed), counted on
    the leading ``train_fraction`` of the training text: what a language model reaches by
    learning only how often each word occurs, the bar the README reads PTB's targets against."""
    sys.path.insert(0, EXAMPLES)
    from ptb_data import load_ptb

    vocabulary, streams = load_ptb()
    train = streams["train"][:int(train_fraction * len(streams["train"]))]
    counts = torch.bincount(train, minlength=len(vocabulary)).double() + 1
    return math.exp(-(counts / counts.sum()).log()[streams["valid"]].mean().item())


def command(workload: str, method: str, options: list[str], metrics: str, seed: int = SEED) -> list[str]:
    """The training command; on MNIST a method the convergence bench trains with its own
    optimizer settings (signSGD's learning rate, DGC without momentum) gets them here too."""
    if method.startswith("ddp:"):
        head = [os.path.join(HERE, "ddp_train.py"), workload, "--hook", method[len("ddp:"):]]
    else:
        head = [os.path.join(EXAMPLES, WORKLOADS[workload]["example"]), "--compression", method]
        if workload == "mnist":
            head += OPTIMIZER.get(method, [])
    return [sys.executable, *head, *options, "--seed", str(seed), "--metrics", metrics]


def train(workload: str, method: str, workers: int, rate_mbit: float, options: list[str], seed: int) -> dict:
    """One run on a fresh cluster: rank 0's curves, plus the run's wall-clock seconds (start-up
    and evaluation included)."""
    with tempfile.TemporaryDirectory() as tmp, Cluster(workers, rate_mbit) as cluster:
        metrics = os.path.join(tmp, "metrics.json")
        started = time.perf_counter()
        cluster.run(command(workload, method, options, metrics, seed), timeout=3600)
        with open(metrics) as f:
            result = json.load(f)
    result["wall_s"] = time.perf_counter() - started
    return result


def compile_kernels(methods: list[str]) -> None:
    """One tiny PTB run per compressor under horovodrun, so numba's on-disk cache holds every
    kernel before the first timed run."""
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    for method in methods:
        if method.startswith("ddp:") or method in ("none", "fp16"):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([horovodrun, "-np", "2", "-H", "localhost:2", "--gloo",
                            *command("ptb", method, ["--epochs", "1", "--train-fraction", "0.002",
                                                     "--evals-per-epoch", "1"],
                                     os.path.join(tmp, "m.json"))],
                           check=True, capture_output=True, timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="np=2, 100 Mbit/s, 3 methods, short runs")
    parser.add_argument("--fresh", action="store_true", help="ignore cached runs")
    parser.add_argument("--workloads", nargs="+", default=RACED, choices=RACED)
    parser.add_argument("--methods", nargs="+", default=None, metavar="METHOD",
                        help="hvd_compress specs or ddp:HOOK (default: all)")
    parser.add_argument("--workers", nargs="+", type=int, default=SIZES)
    parser.add_argument("--rates", nargs="+", type=float, default=RATES, help="Mbit/s")
    parser.add_argument("--repeats", type=int, default=1, help="seeds per run (42, 43, ...)")
    args = parser.parse_args()
    exit_unless_available("time_to_accuracy")
    if args.quick:
        args.workers, args.rates = [2], [100]
    setting = "quick" if args.quick else "options"
    cells = {}
    # the slow link and the larger world first: the cells the targets are about
    for rate in args.rates:
        for workers in args.workers:
            for workload in args.workloads:
                methods = args.methods or (QUICK_METHODS if args.quick else METHODS + (
                    PTB_ONLY + (ABLATIONS if rate == RATES[0] else []) if workload == "ptb" else [])
                    + ([m for m in CATALOGUE if m not in METHODS] if (workers, rate) == CATALOGUE_CELL else []))
                options = WORKLOADS[workload][setting]
                for seed in range(SEED, SEED + args.repeats):
                    for method in methods:
                        key = f"{workload}|np={workers}|{rate_label(rate)}|{method}|{' '.join(options)}|seed={seed}"
                        cells[key] = lambda w=workload, m=method, p=workers, r=rate, o=options, s=seed: {
                            "workload": w, "method": m, "np": p, "rate_mbit": r, "options": o, "seed": s,
                            "quick": args.quick, **train(w, m, p, r, o, s)}
    cache = ResultCache("time_to_accuracy", args.fresh)
    missing = {key.split("|")[3] for key in cells if cache.get(key) is None}
    compile_kernels(sorted(missing))
    cache.sweep(cells, lambda c: f"{c['wall_s']:.0f} s, final quality "
                                 f"{c[WORKLOADS[c['workload']]['quality']][-1][1]:.2f}")
    import plots

    print("wrote", *plots.time_to_accuracy(cache.data))


if __name__ == "__main__":
    main()
