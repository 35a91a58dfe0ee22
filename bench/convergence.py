"""Does the model still converge? LeNet-5 on real MNIST (examples/pytorch_mnist.py under
horovodrun, gloo on localhost), fixed seed and epochs, for every method of the catalogue at its
defaults, and TopK, OneBit and AdaComp also without error feedback (the ablation), at np=2 and
np=4.

    .venv/bin/python bench/convergence.py            # np=2 and 4, 3 epochs, every method in METHODS
    .venv/bin/python bench/convergence.py --quick    # np=2, 1 epoch, no ablation

The optimizer is the example's (SGD, lr 0.01 per worker, momentum 0.9) except where a method
needs another (``OPTIMIZER``): DGC keeps the momentum itself, and signSGD's majority vote moves
every weight by exactly lr each step, so it takes plain SGD at a small lr, as its paper does.

Writes bench/results/convergence.json (cached per cell: an interrupted run re-run skips the
finished cells; --fresh starts over) and bench/results/accuracy.png, loss.png. No root needed.
"""
import argparse
import os
import sys

import hvd_compress as hc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_catalogue import CATALOGUE, COMPRESSORS, OPTIMIZER  # noqa: E402
from common import ResultCache, launch_metrics, with_option  # noqa: E402

EXAMPLE = os.path.join(HERE, "..", "examples", "pytorch_mnist.py")
# (spec, error feedback); None: Horovod's own, which has none to turn off
METHODS = ([("none", None), ("fp16", None)] + [(c, True) for c in COMPRESSORS]
           + [(c, hc.from_spec(c).error_feedback) for c in CATALOGUE]
           + [(with_option(c, "error_feedback=false"), False) for c in COMPRESSORS])


def train(workers: int, spec: str, epochs: int, seed: int) -> dict:
    result = launch_metrics(workers, [EXAMPLE, "--compression", spec, "--epochs", str(epochs),
                                      "--seed", str(seed), *OPTIMIZER.get(spec.split(":")[0], [])])
    result["optimizer"] = " ".join(OPTIMIZER.get(spec.split(":")[0], [])) or "example's"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="np=2, 1 epoch, error feedback on")
    parser.add_argument("--fresh", action="store_true", help="ignore cached cells")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    epochs = 1 if args.quick else args.epochs
    cells = {f"np={workers}|{spec}|epochs={epochs}|seed={args.seed}":
             lambda workers=workers, spec=spec, feedback=feedback: {
                 "np": workers, "method": spec, "error_feedback": feedback, "epochs": epochs,
                 "seed": args.seed, **train(workers, spec, epochs, args.seed)}
             for workers in ([2] if args.quick else [2, 4]) for spec, feedback in METHODS
             if not (args.quick and "error_feedback=false" in spec)}
    cache = ResultCache("convergence", args.fresh)
    cache.sweep(cells, lambda c: f"test accuracy {c['test_accuracy'][-1][1]:.2f}%  ({c['wall_s']:.0f} s)")
    import plots

    print("wrote", *plots.convergence(cache.data))


if __name__ == "__main__":
    main()
