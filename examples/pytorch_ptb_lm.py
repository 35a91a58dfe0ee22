"""Word-level language model on Penn Treebank with Horovod, one argument for the compressor:
``--compression``.

    horovodrun -np 2 python examples/pytorch_ptb_lm.py --compression topk:ratio=0.01

A 2-layer LSTM (examples/models.py) trained with truncated back-propagation through time and
plain SGD, the recipe of Zaremba et al. (2014) and PyTorch's word_language_model example: learning
rate 20, gradients clipped to norm 0.25, divided by 4 after an epoch whose validation
perplexity did not improve, or, with ``--halve-after N``, halved after epoch N and every later
one (Zaremba et al.'s schedule for a fixed number of epochs; the converged runs of
bench/quality.py use it). The clipping applies to the aggregated gradient, the way Horovod
documents it: ``synchronize()``, clip, then ``step()`` under ``skip_synchronize()``.

Size (width 128, 2 layers, 2.8M parameters, 11 MB of fp32 gradient a step): small enough that an
epoch on one core per worker takes minutes (a step of 32 streams x 35 words computes in about
0.2 s on one core of our machines), large enough that the network matters: at 100 Mbit/s a
dense fp32 ring allreduce of 11 MB takes about 0.9 s at np=2. The embedding and softmax
matrices, 10k x 128 each, are 90% of it.
``--train-fraction`` trains each epoch on the first part of the training text only (the
time-to-accuracy bench uses it to keep its sweep near an hour on two cores).

Validation (and, after each epoch, test) perplexity: every rank evaluates its share of the
split, the sums travel by allreduce, so every rank prints the same number. ``--metrics``: rank 0
writes the curves, with training seconds (evaluation excluded) at each point, as JSON.
"""
import argparse
import math
import os
import sys
from typing import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import LSTMLanguageModel  # noqa: E402
from ptb_data import load_ptb  # noqa: E402
import training  # noqa: E402
from training import World  # noqa: E402


def parse_args(extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    parser = training.language_model_parser(__doc__.splitlines()[0], extra, bptt=35, width=128, layers=2,
                                             lr=20.0, clip=0.25)
    parser.add_argument("--halve-after", type=int, default=0, metavar="N",
                        help="halve the learning rate after epoch N and every later one "
                             "(default 0: divide it by 4 after an epoch that did not improve)")
    return parser.parse_args()


def build(args: argparse.Namespace, size: int) -> tuple[LSTMLanguageModel, torch.optim.Optimizer, dict]:
    """The model, its (not yet distributed) optimizer and the data, the same on every rank.
    ``size`` is unused: the learning rate is not scaled by the world size (see --lr)."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # one core per worker: the simulated cluster runs every worker here
    vocabulary, streams = load_ptb()
    model = LSTMLanguageModel(len(vocabulary), args.width, args.layers, args.dropout)
    return model, torch.optim.SGD(model.parameters(), lr=args.lr), streams


def decay_factor(epoch: int, valid: float, best: float, halve_after: int) -> float:
    """What the learning rate is multiplied by after ``epoch`` (counted from 1): 1/2 from epoch
    ``halve_after`` on; with no such schedule (0), 1/4 when this epoch's validation perplexity
    ``valid`` did not improve on the ``best`` before it."""
    if halve_after:
        return 0.5 if epoch >= halve_after else 1.0
    return 0.25 if valid >= best else 1.0


def train(args: argparse.Namespace, model: LSTMLanguageModel, optimizer: torch.optim.Optimizer,
          streams: dict, step: Callable[[torch.Tensor], None], world: World) -> dict:
    """Trains ``model``; ``step(loss)`` back-propagates, aggregates, clips and updates. The
    learning rate is divided by 4 after an epoch whose validation perplexity did not improve,
    or halved after each epoch from ``--halve-after`` on."""
    best = math.inf

    def decay(metrics: dict) -> None:
        nonlocal best
        valid = metrics["valid_perplexity"][-1][1]
        factor = decay_factor(len(metrics["test_perplexity"]), valid, best, args.halve_after)
        for group in optimizer.param_groups:
            group["lr"] *= factor
        best = min(best, valid)

    return training.train_language_model(args, model, optimizer, streams, step, world, after_epoch=decay)


def main() -> None:
    training.horovod_main(parse_args(), build, train)


if __name__ == "__main__":
    main()
