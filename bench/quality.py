"""Final quality on converged language models: examples/pytorch_ptb_lm.py's LSTM trained with
SGD, and examples/pytorch_ptb_transformer.py's small GPT trained with AdamW, each to the end of a
fixed learning-rate schedule at np=4, per method and seed.

    .venv/bin/python bench/quality.py                           # every method of METHODS and DDP_METHODS, seed 42
    .venv/bin/python bench/quality.py --methods none onebit --seeds 42 43 44
    .venv/bin/python bench/quality.py --methods ddp:onebit      # OneBit as a torch DDP hook
    .venv/bin/python bench/quality.py --model transformer --methods none onebit
    .venv/bin/python bench/quality.py --quick                   # 2 short epochs, a smoke test

Where each method trains: Horovod's own ``none`` and ``fp16`` on loopback, every other method on
the simulated cluster at ``TRAIN_RATE`` (100 Mbit/s). The steps a method needs to reach a
perplexity do not depend on the link, but with ``communication="auto"`` the route does: on
loopback, where a dense step of this model costs about what a compressed one does, auto's trials
and drift re-checks sent whole stretches of training dense (measured, the first converged runs
here: OneBit compressed 49% of its steps, AdaComp 63%), so those runs measured a mix of the method
and uncompressed training. At 100 Mbit/s dense loses by 14x and auto keeps the method's route, as
it would for a user on a slow link; the table states each run's share of compressed steps.
``none`` and ``fp16`` have no route to plan, and at 100 Mbit/s their run would take hours here (a
converged run on loopback takes about half an hour on this 2-core machine, 830 steps an epoch).
Time to quality on a slow link is the steps times the method's step time on that link.

The recipe (``RECIPE``): 8 streams per worker (32 at np=4, 830 steps an epoch: Zaremba et al.'s
small model takes 20 streams; more streams a step mean fewer steps an epoch, which with the
gradient clipped to 0.25 slows learning per word), 35 words a segment, learning rate 20 for 4
epochs, then halved after each epoch (Zaremba et al.'s schedule), 8 epochs. What it reaches
uncompressed is the table's first row (docs/benchmarks.md, "Converged language models").

The transformer's recipe (``TRANSFORMER_RECIPE``): the example's own AdamW schedule (warmup over 5%
of the steps, a cosine to a tenth of the peak at the last) over 3 epochs of 8 streams of 64 words
a worker, 454 steps an epoch at np=4. Its step takes 0.6-0.7 s here at np=4 (four workers on two
cores; the example's own steps at 1 Gbit/s, measured: 0.73 s for ``none``, 0.61-0.64 s
compressed), so a run of 3 epochs takes 16 to 33 minutes with its evaluations, the most this
2-core machine gives a method. The cosine ends every run at the end of its schedule, not at
convergence: ``none`` still gained 4% in its last half-epoch (the curves show it).

Time to quality on a slow link, computed (issue 31 allows it, and says which cells are): the
steps a method needed here times its step on the simulated cluster (bench/netsim.py) at np=4,
100 Mbit/s and 1 Gbit/s, measured as the throughput bench measures a cell (the synthetic
benchmark's ``lstm`` model: the same LSTM, 8 streams of 35 words a worker, the recipe's step).
The transformer has no synthetic twin: its step is timed on the example itself, the second half of
2 x ``TRANSFORMER_STEP_STEPS`` steps trained on the simulated cluster (the first half holds the
run's start).
The computation is checked against real throttled runs: the recipe's first 2 x ``CHECK_STEPS``
steps trained on the simulated cluster by ``CHECKED`` methods at 100 Mbit/s, the second half's
training seconds against steps x step time (target: within 10%); the first half's excess over
its steps x step time is the run's one-time start, which the computed times leave out.

Writes bench/results/quality.json (cached per cell: a re-run skips finished ones; --fresh starts
over) and quality.png (validation perplexity against steps). The step times and the checks need
root (the simulated cluster); without it, only the loopback runs are made.
"""
import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ResultCache, launch_metrics, rate_label  # noqa: E402
from netsim import unavailable  # noqa: E402

EXAMPLES = os.path.join(HERE, "..", "examples")
WORKERS = 4
RECIPE = ["--epochs", "8", "--batch-size", "8", "--bptt", "35", "--halve-after", "4", "--evals-per-epoch", "2"]
QUICK = ["--epochs", "2", "--batch-size", "8", "--train-fraction", "0.02", "--halve-after", "1",
         "--evals-per-epoch", "1"]
TRANSFORMER_RECIPE = ["--epochs", "3", "--batch-size", "8", "--bptt", "64", "--evals-per-epoch", "2"]
TRANSFORMER_QUICK = ["--epochs", "2", "--batch-size", "8", "--bptt", "64", "--train-fraction", "0.02",
                     "--evals-per-epoch", "1"]
#: each converged model: the example that trains it, its recipe and --quick options, and the
#: bench/time_to_accuracy.py workload that trains it on the simulated cluster
MODELS = {"lstm": {"example": "pytorch_ptb_lm", "recipe": RECIPE, "quick": QUICK, "workload": "ptb"},
          "transformer": {"example": "pytorch_ptb_transformer", "recipe": TRANSFORMER_RECIPE,
                          "quick": TRANSFORMER_QUICK, "workload": "ptb_transformer"}}
TRANSFORMER_STEP_STEPS = 20
#: uncompressed and the design-card methods first: a partial sweep still answers the main question
METHODS = ["none", "topk:ratio=0.01", "onebit", "adacomp", "fp16", "topk:ratio=0.001", "powersgd:rank=1",
           "dgc", "efsignsgd", "qsgd"]
#: the design-card methods through the other front door (issue 27's "same final quality")
DDP_METHODS = ["ddp:topk:ratio=0.01", "ddp:onebit", "ddp:adacomp"]
RATES = [100, 1000]  # Mbit/s: the links time to quality is computed for
TRAIN_RATE = RATES[0]  # Mbit/s: where the methods auto routes train (module docstring)
LOOPBACK = ("none", "fp16")  # Horovod's own: no route to plan, trained on loopback
#: real throttled runs that check the computed times: the recipe's first steps at 100 Mbit/s
CHECKED, CHECK_STEPS = ["none", "topk:ratio=0.01", "onebit"], 80
#: issue 31's targets: final perplexity at most this much above uncompressed training's
WITHIN = {"topk:ratio=0.001": 0.05}
DEFAULT_WITHIN = 0.03


def steps_per_epoch(options: list[str], workers: int = WORKERS) -> int:
    """Optimizer steps in one epoch of the LSTM example with ``options`` at ``workers`` ranks
    (the example's own sharding: examples/ptb_data.py)."""
    sys.path.insert(0, EXAMPLES)
    from ptb_data import load_ptb

    value = {k: v for k, v in zip(options, options[1:])}
    train = load_ptb()[1]["train"]
    words = int(float(value.get("--train-fraction", 1.0)) * len(train))
    rows = words // (workers * int(value["--batch-size"]))
    return math.ceil((rows - 1) / int(value.get("--bptt", 35)))


def runs_of(result: dict) -> list[dict]:
    """The training runs of ``result`` (not its step times or checks): the full recipe's, or the
    quick ones where there are no full ones."""
    runs = [c for c in result["cells"].values() if c.get("kind", "run") == "run"]
    return [r for r in runs if not r["quick"]] or runs


def cells_of(result: dict, kind: str, model: str = "lstm") -> dict[tuple, dict]:
    """(method, Mbit/s) -> ``result``'s step time or check cell (``kind``: "step" or "check") of
    ``model`` (the LSTM's first cells name none: they are the LSTM's)."""
    return {(c["method"], c["rate_mbit"]): c for c in result["cells"].values()
            if c.get("kind") == kind and c.get("model", "lstm") == model}


def epochs_to(run: dict, perplexity: float) -> float | None:
    """Epochs until ``run``'s first validation point at ``perplexity`` or lower (None: never)."""
    return next((epochs for epochs, value in run["valid_perplexity"] if value <= perplexity), None)


def steps_to(run: dict, perplexity: float) -> float | None:
    """Optimizer steps until ``run``'s first validation point at ``perplexity`` or lower (None:
    never)."""
    epochs = epochs_to(run, perplexity)
    return None if epochs is None else epochs * run["steps_per_epoch"]


def seconds_to(run: dict, perplexity: float) -> float | None:
    """``run``'s own training seconds (evaluation excluded) until its first validation point at
    ``perplexity`` or lower (None: never)."""
    epochs = epochs_to(run, perplexity)
    return None if epochs is None else dict(map(tuple, run["train_seconds"]))[epochs]


def median_run(runs: list[dict]) -> dict:
    """The run whose final validation perplexity is the median of ``runs``' (the lower middle
    one for an even count)."""
    ordered = sorted(runs, key=lambda r: r["valid_perplexity"][-1][1])
    return ordered[(len(ordered) - 1) // 2]


def train_rate(method: str) -> float | None:
    """The simulated link ``method`` trains on, in Mbit/s (None: loopback; module docstring).
    Without the simulated cluster (not root) every method trains on loopback, and the table's
    share of compressed steps says what that did to auto's routes."""
    return None if method in LOOPBACK or unavailable() else TRAIN_RATE


def train(model: str, method: str, options: list[str], seed: int) -> dict:
    """One run of ``model``: ``method`` an hvd_compress spec under Horovod, or ``ddp:SPEC``, the
    same method as a torch DDP hook (bench/ddp_train.py under torchrun), on loopback or the
    simulated cluster (``train_rate``)."""
    from time_to_accuracy import train as throttled

    rate = train_rate(method)
    if rate is None:
        result = launch_metrics(WORKERS, [os.path.join(EXAMPLES, MODELS[model]["example"] + ".py"), "--compression",
                                          method, *options, "--seed", str(seed)], timeout=3 * 3600)
    else:
        result = throttled(MODELS[model]["workload"], method, WORKERS, rate, options, seed)
    result.update({"rate_mbit": rate, "steps_per_epoch": steps_per_epoch(options)})
    return result


def compressed_share(run: dict) -> float | None:
    """The share of ``run``'s steps in which its tensors travelled compressed (the mean over its
    tensors, each counted by the bytes it would have sent dense); None for a run that names no
    tensors (Horovod's own, or a DDP hook)."""
    if not run.get("per_tensor"):
        return None
    import importlib

    import torch

    sys.path.insert(0, EXAMPLES)
    example = importlib.import_module(MODELS[run.get("model", "lstm")]["example"])
    argv, sys.argv, threads = sys.argv, [example.__file__, *run["options"]], torch.get_num_threads()
    try:
        args = example.parse_args()
        sizes = dict(example.build(args, WORKERS)[0].named_parameters())
    finally:  # the example's build sets one thread a worker
        sys.argv = argv
        torch.set_num_threads(threads)
    steps = run["steps_per_epoch"] * args.epochs
    dense = sum(4 * sizes[name].numel() * steps for name in run["per_tensor"])
    return sum(t["dense_bytes"] for t in run["per_tensor"].values()) / dense


def step_seconds(model: str, method: str, rate_mbit: float) -> dict:
    """``method``'s step at np=4 on the simulated cluster at ``rate_mbit``, the recipe's step:
    for the LSTM the throughput bench's ``lstm`` model at 8 streams a worker (median of 10
    steps), for the transformer the example's own steps (``check_run``'s second half)."""
    from throughput import measure

    if model == "transformer":
        points = check_run(model, method, rate_mbit, TRANSFORMER_STEP_STEPS)["points"]
        (half, first), (end, last) = points[0], points[-1]
        return {"step_s": (last - first) / (end - half), "points": points}
    cell = measure(WORKERS, method, "lstm", rate_mbit, steps=10, batch_size=8)
    return {"step_s": WORKERS * 8 / cell["samples_per_s"], "samples_per_s": cell["samples_per_s"]}


def check_run(model: str, method: str, rate_mbit: float, steps: int = CHECK_STEPS) -> dict:
    """``model``'s recipe's first 2 x ``steps`` steps trained for real on the simulated cluster,
    timed at their middle and end (training seconds, evaluation excluded): the second half is the
    steady state to set beside steps x step time; the first also holds the run's one-time start
    (auto's measurements and trials, the kernels' first calls)."""
    from time_to_accuracy import train as throttled

    sys.path.insert(0, EXAMPLES)
    from ptb_data import load_ptb

    recipe = MODELS[model]["recipe"]
    value = dict(zip(recipe, recipe[1:]))
    words = 2 * steps * WORKERS * int(value["--batch-size"]) * int(value["--bptt"]) / len(load_ptb()[1]["train"])
    options = [*recipe[recipe.index("--batch-size"):], "--epochs", "1", "--train-fraction", f"{words:.5f}"]
    options[options.index("--evals-per-epoch") + 1] = "2"
    run = throttled(MODELS[model]["workload"], method, WORKERS, rate_mbit, options, 42)
    steps = steps_per_epoch(options)
    return {"points": [(at * steps, seconds) for at, seconds in run["train_seconds"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 epochs over 2%% of the text")
    parser.add_argument("--fresh", action="store_true", help="ignore cached runs")
    parser.add_argument("--methods", nargs="+", default=METHODS + DDP_METHODS, metavar="SPEC")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42])
    parser.add_argument("--model", default="lstm", choices=list(MODELS))
    parser.add_argument("--no-runs", action="store_true",
                        help="only time the steps and run the checks (the converged runs take hours)")
    args = parser.parse_args()
    model = args.model
    options = MODELS[model]["quick" if args.quick else "recipe"]
    cells = {f"{model}|np={WORKERS}|{rate_label(train_rate(method)) if train_rate(method) else 'loopback'}|"
             f"{method}|{' '.join(options)}|seed={seed}":
             lambda method=method, seed=seed: {"kind": "run", "model": model, "np": WORKERS, "method": method,
                                               "seed": seed, "options": options, "quick": args.quick,
                                               **train(model, method, options, seed)}
             for seed in args.seeds for method in args.methods if not args.no_runs}
    cache = ResultCache("quality", args.fresh)
    if cells:
        cache.sweep(cells, lambda c: f"final valid perplexity {c['valid_perplexity'][-1][1]:.1f}, "
                                     f"test {c['test_perplexity'][-1][1]:.1f} ({c['wall_s']:.0f} s)")
    if unavailable() or args.quick:
        print("no step times: the simulated cluster", unavailable() or "is not timed in --quick")
    else:
        timed = {f"step|{model}|np={WORKERS}|{rate_label(rate)}|{method}":
                 lambda method=method, rate=rate: {"kind": "step", "model": model, "method": method,
                                                   "rate_mbit": rate, **step_seconds(model, method, rate)}
                 for rate in RATES for method in args.methods}
        timed.update({f"check|lstm|np={WORKERS}|{rate_label(RATES[0])}|{method}|steps={CHECK_STEPS}":
                      lambda method=method: {"kind": "check", "model": model, "method": method,
                                             "rate_mbit": RATES[0], **check_run(model, method, RATES[0])}
                      for method in CHECKED if method in args.methods and model == "lstm"})
        cache.sweep(timed, lambda c: f"{c.get('step_s', 0):.3f} s a step" if c["kind"] == "step" else
                    f"{c['points'][-1][0]:.0f} steps in {c['points'][-1][1]:.1f} s")
    import plots

    print("wrote", *plots.quality(cache.data))


if __name__ == "__main__":
    main()
