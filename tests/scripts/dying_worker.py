"""Rank 1 dies abruptly at step 3 of a TopK training loop; rank 0 carries on and must stop with
Horovod's error instead of hanging. Used by tests/test_failures.py on the simulated cluster."""
import os
import sys

import horovod.torch as hvd
import torch

import hvd_compress


def main() -> None:
    hvd.init()
    torch.set_num_threads(1)
    w = torch.nn.Parameter(torch.zeros(100_000))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=0.1), named_parameters=[("w", w)],
                                         compression=hvd_compress.TopK(0.01))
    for step in range(1000):
        if step == 3 and hvd.rank() == 1:
            os._exit(3)
        optimizer.zero_grad()
        (w * torch.randn(100_000)).sum().backward()
        optimizer.step()
    print("finished all steps", flush=True)


if __name__ == "__main__":
    sys.exit(main())
