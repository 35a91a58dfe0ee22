"""Word-level language model on Penn Treebank with Horovod, one argument for the compressor:
``--compression``.

    horovodrun -np 2 python examples/pytorch_ptb_lm.py --compression topk:ratio=0.01

A 2-layer LSTM (examples/models.py) trained with truncated back-propagation through time and
plain SGD, the recipe of Zaremba et al. (2014) and PyTorch's word_language_model example: learning
rate 20, gradients clipped to norm 0.25, divided by 4 after an epoch whose validation
perplexity did not improve. The clipping applies to the aggregated gradient, the way Horovod
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

import horovod.torch as hvd
import torch
import torch.nn.functional as F

import hvd_compress

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import LSTMLanguageModel  # noqa: E402
from ptb_data import load_ptb, shard_columns  # noqa: E402
import training  # noqa: E402
from training import TrainingClock, World  # noqa: E402


def parse_args(extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    parser = training.parser(__doc__.splitlines()[0], 2, extra)
    parser.add_argument("--batch-size", type=int, default=32, help="parallel text streams per worker")
    parser.add_argument("--bptt", type=int, default=35, help="words per truncated back-propagation")
    parser.add_argument("--width", type=int, default=128, help="embedding and LSTM width")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--lr", type=float, default=20.0, help="not scaled by world size: the "
                        "clipped aggregate already bounds the step")
    parser.add_argument("--clip", type=float, default=0.25, help="max norm of the aggregated gradient")
    parser.add_argument("--train-fraction", type=float, default=1.0,
                        help="train each epoch on this leading part of the training text")
    return parser.parse_args()


def build(args: argparse.Namespace, size: int) -> tuple[LSTMLanguageModel, torch.optim.Optimizer, dict]:
    """The model, its (not yet distributed) optimizer and the data, the same on every rank.
    ``size`` is unused: the learning rate is not scaled by the world size (see --lr)."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # one core per worker: the simulated cluster runs every worker here
    vocabulary, streams = load_ptb()
    model = LSTMLanguageModel(len(vocabulary), args.width, args.layers, args.dropout)
    return model, torch.optim.SGD(model.parameters(), lr=args.lr), streams


def segments(columns: torch.Tensor, bptt: int):
    """(inputs, next words) of each truncated-BPTT segment, in order."""
    for start in range(0, len(columns) - 1, bptt):
        end = min(start + bptt, len(columns) - 1)
        yield columns[start:end], columns[start + 1:end + 1]


def perplexity(model: LSTMLanguageModel, columns: torch.Tensor, bptt: int, world: World) -> float:
    model.eval()
    total = torch.zeros(2, dtype=torch.float64)  # summed loss, words
    state = None
    with torch.no_grad():
        for words, targets in segments(columns, bptt):
            logits, state = model(words, state)
            total[0] += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
            total[1] += targets.numel()
    model.train()
    loss, words = world.sum(total).tolist()
    return math.exp(loss / words)


def train(args: argparse.Namespace, model: LSTMLanguageModel, optimizer: torch.optim.Optimizer,
          streams: dict, step: Callable[[torch.Tensor], None], world: World) -> dict:
    """Trains ``model``; ``step(loss)`` back-propagates, aggregates, clips and updates."""
    text = streams["train"][:int(args.train_fraction * len(streams["train"]))]
    train_columns = shard_columns(text, world.rank, world.size, args.batch_size)
    valid, test = (shard_columns(streams[split], world.rank, world.size, 10) for split in ("valid", "test"))
    count = math.ceil((len(train_columns) - 1) / args.bptt)
    every = math.ceil(count / args.evals_per_epoch)
    metrics = {"train_loss": [], "valid_perplexity": [], "train_seconds": [], "test_perplexity": [],
               "lr": []}
    clock, best = TrainingClock(), math.inf
    for epoch in range(1, args.epochs + 1):
        state, recent = None, []
        for i, (words, targets) in enumerate(segments(train_columns, args.bptt), 1):
            if state is not None:
                state = tuple(s.detach() for s in state)
            logits, state = model(words, state)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            step(loss)
            recent.append(loss.item())
            if i % every and i < count:
                continue
            seconds = clock.pause()
            at = epoch - 1 + i / count
            valid_ppl = perplexity(model, valid, args.bptt, world)
            metrics["train_loss"].append((at, sum(recent) / len(recent)))
            metrics["valid_perplexity"].append((at, valid_ppl))
            metrics["train_seconds"].append((at, seconds))
            if world.rank == 0:
                print(f"epoch {at:.2f}: train loss {sum(recent) / len(recent):.3f}  valid perplexity "
                      f"{valid_ppl:.1f}  ({seconds:.0f} s training)", flush=True)
            recent = []
            clock.resume()
        clock.pause()
        test_ppl = perplexity(model, test, args.bptt, world)
        metrics["test_perplexity"].append((epoch, test_ppl))
        metrics["lr"].append((epoch, optimizer.param_groups[0]["lr"]))
        if world.rank == 0:
            print(f"epoch {epoch}: test perplexity {test_ppl:.1f}", flush=True)
        if metrics["valid_perplexity"][-1][1] >= best:
            for group in optimizer.param_groups:
                group["lr"] /= 4
        best = min(best, metrics["valid_perplexity"][-1][1])
        clock.resume()
    return metrics


def main() -> None:
    args = parse_args()
    hvd.init()
    model, optimizer, streams = build(args, hvd.size())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    compression = hvd_compress.from_spec(args.compression)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

    def step(loss: torch.Tensor) -> None:
        optimizer.zero_grad()
        loss.backward()
        optimizer.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        with optimizer.skip_synchronize():
            optimizer.step()

    training.save(train(args, model, optimizer, streams, step, training.horovod_world()), compression,
                  args, hvd.rank())


if __name__ == "__main__":
    main()
