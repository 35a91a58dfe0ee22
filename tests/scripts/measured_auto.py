"""A worker of tests/test_planner.py: trains a 2.1M-parameter MLP with a compressor's defaults
(``communication="auto"``, the link measured, plans tried) and prints what the plan came to as
JSON on the last line. ``argv``: the compressor spec and the number of steps."""
import json
import os
import sys

os.environ.pop("HVD_COMPRESS_LINK_GBIT", None)  # the tests' environment tells a link rate

import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hvd_compress  # noqa: E402


def main(spec: str, steps: int) -> None:
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    compressor = hvd_compress.from_spec(spec)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters(), compression=compressor)
    for step in range(steps):
        data = torch.Generator().manual_seed(10 * step + hvd.rank())
        x, y = torch.randn(32, 1024, generator=data), torch.randint(0, 10, (32,), generator=data)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    digest = hash(tuple(float(p.double().sum()) for p in model.parameters()))
    print(json.dumps({"plan": compressor.stats()["plan"], "digest": digest}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
