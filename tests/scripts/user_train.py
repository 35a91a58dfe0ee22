"""A training script as a Horovod user writes one; only ``compression=`` names hvd_compress.

    horovodrun -np 2 python tests/scripts/user_train.py topk:ratio=0.01

Prints one line per rank: "digest RANK SHA256-OF-PARAMETERS".
"""
import hashlib
import sys

import horovod.torch as hvd
import torch
import torch.nn.functional as F

import hvd_compress


def main() -> None:
    hvd.init()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 26 * 26, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=hvd_compress.from_spec(sys.argv[1]))
    data = torch.Generator().manual_seed(hvd.rank())
    for _ in range(10):
        x = torch.randn(32, 1, 28, 28, generator=data)
        y = torch.randint(0, 10, (32,), generator=data)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    print(f"digest {hvd.rank()} {digest.hexdigest()}", flush=True)


if __name__ == "__main__":
    main()
