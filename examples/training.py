"""What the training examples share, so that bench/ddp_train.py can run the same training under
torch DDP: the world a run trains in, a clock that leaves evaluation out, and the compression
report printed at the end.
"""
import argparse
import json
import time
from typing import Callable, NamedTuple

import torch


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
