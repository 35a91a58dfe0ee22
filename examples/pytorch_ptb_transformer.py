"""Decoder-only transformer language model on Penn Treebank with Horovod and AdamW, one argument
for the compressor: ``--compression``.

    horovodrun -np 2 python examples/pytorch_ptb_transformer.py --compression topk:ratio=0.01

The modern counterpart of examples/pytorch_ptb_lm.py's LSTM with SGD, on the same data, streams
and flags (``--bptt`` is the context length here): a GPT-style model (examples/models.py's
``TransformerLanguageModel``: 4 pre-norm layers, width 256, 4 heads, causal attention, learned
positions, dropout 0.2) trained with AdamW, the optimizer under which sign and 1-bit methods with
error feedback are known to struggle (1-bit Adam, Tang et al. 2021). The recipe is the usual one
for small GPTs: peak learning rate 1e-3 (not scaled by the world size, like the LSTM's), betas
(0.9, 0.98), weight decay 0.1 on the matrices only (not on biases, LayerNorms or the position
table), a linear warmup over the first 5% of the steps, then a cosine decay to a tenth of the
peak at the last step, and the aggregated gradient clipped to norm 1, the way Horovod documents
it: ``synchronize()``, clip, then ``step()`` under ``skip_synchronize()``.

The softmax is tied to the embedding: PTB's 930k training words are few for 5.7M parameters, and
tying (Press & Wolf 2017, GPT-2) both regularizes and removes a 10k x 256 matrix; the one tensor
left is the largest (2.6M of the 5.7M parameters, 10 MB of the 23 MB of fp32 gradient a step), its
gradient the embedding's few rows and the softmax's dense ones together. ``--untied`` gives the
LSTM's layout instead (separate embedding and softmax, 8.3M parameters). Each segment of ``--bptt``
words is its own context, in training and in evaluation: nothing carries over, so the first words
of a segment are predicted from little context and the perplexities are not comparable with the
LSTM's, which carries its state.

Cost: a step of 32 streams x 64 words (2,048 words; the LSTM's 32 x 35 is 1,120) computes in about
1.5 s on one core of our machines (median of 5 steps on 1 process, measured while a benchmark
loaded both cores; the LSTM's step, 0.2 s unloaded, took 0.24 s beside it), so an epoch at np=2
(227 steps a worker) computes in about 6 minutes, 4 times the LSTM's. At 100 Mbit/s a dense fp32
ring allreduce of its 23 MB of gradient takes about 1.8 s at np=2. ``--train-fraction`` trains each
epoch on the first part of the training text only (tests/test_examples.py takes a few steps so).

Validation (and, after each epoch, test) perplexity: every rank evaluates its share of the
split, the sums travel by allreduce, so every rank prints the same number. ``--metrics``: rank 0
writes the curves, with training seconds (evaluation excluded) at each point, as JSON.
``parse_args``, ``build`` and ``train`` are the LSTM example's, so bench/ddp_train.py could run
this model under torch DDP as it runs the LSTM.
"""
import argparse
import math
import os
import sys
from typing import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import TransformerLanguageModel  # noqa: E402
from ptb_data import load_ptb  # noqa: E402
import training  # noqa: E402
from training import World  # noqa: E402


def parse_args(extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    parser = training.language_model_parser(__doc__.splitlines()[0], extra, bptt=64, width=256, layers=4,
                                            lr=1e-3, clip=1.0)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--untied", action="store_true", help="a softmax matrix of its own")
    parser.add_argument("--weight-decay", type=float, default=0.1, help="AdamW's, on matrices only")
    parser.add_argument("--warmup", type=float, default=0.05,
                        help="fraction of all steps over which the learning rate rises linearly")
    return parser.parse_args()


def build(args: argparse.Namespace, size: int) -> tuple[TransformerLanguageModel, torch.optim.Optimizer, dict]:
    """The model, its (not yet distributed) AdamW and the data, the same on every rank.
    ``size`` is unused: the learning rate is not scaled by the world size (see --lr)."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # one core per worker: the simulated cluster runs every worker here
    vocabulary, streams = load_ptb()
    model = TransformerLanguageModel(len(vocabulary), args.width, args.layers, args.heads, args.bptt,
                                     args.dropout, tied=not args.untied)
    matrices = [p for name, p in model.named_parameters() if p.dim() >= 2 and not name.startswith("position")]
    others = [p for name, p in model.named_parameters() if p.dim() < 2 or name.startswith("position")]
    optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": args.weight_decay},
                                   {"params": others, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.98))
    return model, optimizer, streams


def schedule(done: int, total: int, warmup: float) -> float:
    """The learning rate's factor for the step after ``done`` of ``total``: linear from
    1/warmup-steps to 1 over the first ``warmup`` of the steps, then a cosine to 0.1 at the last."""
    steps = max(1, round(warmup * total))
    if done < steps:
        return (done + 1) / steps
    progress = (done - steps) / max(1, total - 1 - steps)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress)))


def train(args: argparse.Namespace, model: TransformerLanguageModel, optimizer: torch.optim.Optimizer,
          streams: dict, step: Callable[[torch.Tensor], None], world: World) -> dict:
    """Trains ``model``; ``step(loss)`` back-propagates, aggregates, clips and updates; the
    learning rate follows ``schedule`` step by step."""

    def set_lr(done: int, total: int) -> None:
        for group in optimizer.param_groups:
            group["lr"] = args.lr * schedule(done, total, args.warmup)

    return training.train_language_model(args, model, optimizer, streams, step, world, before_step=set_lr)


def main() -> None:
    training.horovod_main(parse_args(), build, train)


if __name__ == "__main__":
    main()
