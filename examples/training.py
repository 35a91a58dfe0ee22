"""What the training examples share, so that bench/ddp_train.py can run the same training under
torch DDP: the world a run trains in, a clock that leaves evaluation out, the compression
report printed at the end, and the Penn Treebank language models' training loop, evaluation and
Horovod step (examples/pytorch_ptb_lm.py's LSTM, examples/pytorch_ptb_transformer.py's
transformer).
"""
import argparse
import json
import math
import time
from typing import Callable, Iterator, NamedTuple

import torch
import torch.nn.functional as F


class World(NamedTuple):
    """The ranks a run trains on: this rank, their number, and a sum over all of them."""

    rank: int
    size: int
    sum: Callable[[torch.Tensor], torch.Tensor]


def horovod_world() -> World:
    import horovod.torch as hvd

    return World(hvd.rank(), hvd.size(), lambda t: hvd.allreduce(t, op=hvd.Sum))


class TrainingClock:
    """Seconds spent training, evaluation excluded: time to accuracy counts what a user waits
    for the model to learn, not how often the run measures it."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._since = time.perf_counter()

    def pause(self) -> float:
        self.seconds += time.perf_counter() - self._since
        return self.seconds

    def resume(self) -> None:
        self._since = time.perf_counter()


def parser(description: str, evals_per_epoch: int,
           extra: Callable[[argparse.ArgumentParser], None] | None) -> argparse.ArgumentParser:
    """A parser of the options every training example takes; ``extra`` adds a caller's own
    (bench/ddp_train.py's ``--hook``)."""
    import hvd_compress

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--compression", default="topk:ratio=0.01",
                        help=f"compressor spec, one of {hvd_compress.spec.known()} with options "
                             "(default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--evals-per-epoch", type=int, default=evals_per_epoch,
                        help="evaluation points per epoch (default: %(default)s)")
    parser.add_argument("--metrics", default=None,
                        help="rank 0 writes the curves, training seconds at each evaluation and "
                             "per-layer compression here, as JSON (the benches read it)")
    if extra:
        extra(parser)
    return parser


def language_model_parser(description: str, extra: Callable[[argparse.ArgumentParser], None] | None,
                          bptt: int, width: int, layers: int, lr: float, clip: float) -> argparse.ArgumentParser:
    """``parser`` with the options the PTB language-model examples share, at each one's defaults."""
    options = parser(description, 2, extra)
    options.add_argument("--batch-size", type=int, default=32, help="parallel text streams per worker")
    options.add_argument("--bptt", type=int, default=bptt, help="words a segment: the truncated "
                         "back-propagation's, a transformer's context (default: %(default)s)")
    options.add_argument("--width", type=int, default=width, help="embedding and model width")
    options.add_argument("--layers", type=int, default=layers)
    options.add_argument("--dropout", type=float, default=0.2)
    options.add_argument("--lr", type=float, default=lr, help="(the peak, under a schedule) not scaled "
                         "by world size: the clipped aggregate already bounds the step")
    options.add_argument("--clip", type=float, default=clip, help="max norm of the aggregated gradient")
    options.add_argument("--train-fraction", type=float, default=1.0,
                         help="train each epoch on this leading part of the training text")
    return options


def save(metrics: dict, compression, args: argparse.Namespace, rank: int) -> None:
    """Reports what ``compression`` sent and writes ``metrics`` (rank 0, with --metrics)."""
    metrics["per_tensor"] = report_compression(compression, args.compression, rank)
    if hasattr(compression, "stats"):
        metrics["seconds"] = compression.stats()["seconds"]
    if args.metrics and rank == 0:
        with open(args.metrics, "w") as f:
            json.dump(metrics, f)


def report_compression(compression, spec: str, rank: int) -> dict:
    """Prints what ``compression`` sent against dense fp32 and returns its per-tensor figures
    (empty for Horovod's own compressors, which keep no statistics)."""
    import hvd_compress

    if not isinstance(compression, hvd_compress.Compressor):
        return {}
    stats = compression.stats()
    print(f"rank {rank}: {spec} sent {stats['sent_bytes']:,} bytes in {stats['steps']} steps; "
          f"dense fp32 would have sent {stats['dense_bytes']:,} "
          f"({stats['dense_bytes'] / max(1, stats['sent_bytes']):.1f}x less)", flush=True)
    if rank == 0:
        for name, layer in stats["per_tensor"].items():
            print(f"  {name:24s} {layer['dense_bytes'] / layer['sent_bytes']:7.1f}x smaller "
                  f"than dense fp32", flush=True)
    return stats["per_tensor"]


def segments(columns: torch.Tensor, bptt: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, next words) of each truncated-BPTT segment, in order."""
    for start in range(0, len(columns) - 1, bptt):
        end = min(start + bptt, len(columns) - 1)
        yield columns[start:end], columns[start + 1:end + 1]


def perplexity(model: torch.nn.Module, columns: torch.Tensor, bptt: int, world: World) -> float:
    """The perplexity of ``model`` (``model(words, state) -> (logits, state)``, the state carried
    from segment to segment) on all ranks' ``columns`` together: every rank returns the same."""
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


def train_language_model(args: argparse.Namespace, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                         streams: dict, step: Callable[[torch.Tensor], None], world: World,
                         before_step: Callable[[int, int], None] | None = None,
                         after_epoch: Callable[[dict], None] | None = None) -> dict:
    """Trains the PTB language model ``model`` (``model(words, state) -> (logits, state)``, the
    state detached and carried between segments; None for a model without one) on
    ``args.batch_size`` streams a rank, ``args.bptt`` words a step, and returns the curves.
    ``step(loss)`` back-propagates, aggregates, clips and updates; ``before_step(done, total)``
    sees the steps done and the run's total before each (a learning-rate schedule);
    ``after_epoch(metrics)`` runs after each epoch's test (a decay on plateau)."""
    from ptb_data import shard_columns

    text = streams["train"][:int(args.train_fraction * len(streams["train"]))]
    train_columns = shard_columns(text, world.rank, world.size, args.batch_size)
    valid, test = (shard_columns(streams[split], world.rank, world.size, 10) for split in ("valid", "test"))
    count = math.ceil((len(train_columns) - 1) / args.bptt)
    every = math.ceil(count / args.evals_per_epoch)
    metrics = {"train_loss": [], "valid_perplexity": [], "train_seconds": [], "test_perplexity": [],
               "lr": []}
    clock = TrainingClock()
    for epoch in range(1, args.epochs + 1):
        state, recent = None, []
        for i, (words, targets) in enumerate(segments(train_columns, args.bptt), 1):
            if before_step:
                before_step((epoch - 1) * count + i - 1, args.epochs * count)
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
        if after_epoch:
            after_epoch(metrics)
        clock.resume()
    return metrics


def horovod_main(args: argparse.Namespace, build: Callable, train: Callable, *, clipped: bool = True,
                 broadcast_optimizer_state: bool = False) -> None:
    """Runs an example under Horovod: ``build(args, size)`` the model, optimizer and data, rank
    0's parameters (and, if asked, optimizer state) broadcast, the optimizer distributed with
    ``args.compression``, then ``train`` with a step that, when ``clipped``, clips the aggregated
    gradient to ``args.clip`` the way Horovod documents it: ``synchronize()``, clip, then
    ``step()`` under ``skip_synchronize()``; the compression report and --metrics at the end."""
    import horovod.torch as hvd
    import hvd_compress

    hvd.init()
    model, optimizer, data = build(args, hvd.size())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    if broadcast_optimizer_state:
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd_compress.from_spec(args.compression)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

    def step(loss: torch.Tensor) -> None:
        optimizer.zero_grad()
        loss.backward()
        if not clipped:
            optimizer.step()
            return
        optimizer.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        with optimizer.skip_synchronize():
            optimizer.step()

    save(train(args, model, optimizer, data, step, horovod_world()), compression, args, hvd.rank())
