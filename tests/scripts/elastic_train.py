"""Horovod elastic training with a TopK compressor in ``hvd.elastic.TorchState``; the job shrinks
from 2 workers to 1 and grows back to 2 while it trains. Used by tests/test_elastic.py:

    horovodrun -np 2 --min-np 1 --max-np 2 --host-discovery-script DISCOVER \
        --network-interface lo --gloo python tests/scripts/elastic_train.py HOSTS_FILE

DISCOVER prints HOSTS_FILE. RESIZE_AFTER steps into its first world (size 2, step 0) rank 0
rewrites it to ``localhost:1``, and RESIZE_AFTER steps into the world of size 1 back to
``localhost:2``; the ranks keep committing until Horovod interrupts them (it polls discovery every
second). Horovod drops rank 1 at the shrink and starts a new rank 1 at the grow, which joins
through ``TorchState.sync``. Both ranks then train STEPS_AFTER more steps and each prints one JSON
line: its rank, final size and step, whether its parameters are finite, their digest, and for
each (re-)entry into training its world size, step and residuals (SHA-256 by name) next to those
of the last commit.
"""
import hashlib
import json
import os
import sys
import time

import horovod.torch as hvd
import torch

import hvd_compress

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
from harness import parameters_digest  # noqa: E402

RESIZE_AFTER = 3
STEPS_AFTER = 5


def residuals(compressor) -> dict[str, str]:
    """Each residual's SHA-256, by parameter name."""
    return {name: hashlib.sha256(r.numpy().tobytes()).hexdigest()
            for name, r in compressor.memory.residuals().items()}


def write_hosts(hosts_file: str, slots: int) -> None:
    with open(hosts_file + ".new", "w") as f:
        f.write(f"localhost:{slots}\n")
    os.replace(hosts_file + ".new", hosts_file)  # discovery never reads half a file


@hvd.elastic.run
def train(state, hosts_file: str, report: dict) -> None:
    report["entries"].append({"size": hvd.size(), "step": state.step,
                              "residuals": residuals(state.compressor), "committed": report["committed"]})
    # The first world (size 2, step 0) shrinks, the world of size 1 grows back, and the last
    # (size 2, step > 0: a joining rank gets rank 0's step from TorchState.sync) trains to the end.
    resize_to = {(2, True): 1, (1, False): 2}.get((hvd.size(), state.step == 0))
    resize_at = state.step + RESIZE_AFTER
    end = None if resize_to else state.step + STEPS_AFTER
    data = torch.Generator().manual_seed(hvd.rank())
    while end is None or state.step < end:
        state.optimizer.zero_grad()
        x = torch.randn(16, 64, generator=data)
        torch.nn.functional.mse_loss(state.model(x), x[:, :32]).backward()
        state.optimizer.step()
        state.step += 1
        if resize_to and state.step >= resize_at:  # wait for Horovod to resize the job
            if hvd.rank() == 0 and state.step == resize_at:
                write_hosts(hosts_file, resize_to)
            time.sleep(0.1)
        report["committed"] = residuals(state.compressor)
        state.commit()  # raises HostsUpdatedInterrupt once Horovod has seen the change


def main() -> None:
    hvd.init()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 32)  # weight: 2048 elements, compressed; bias: dense
    compressor = hvd_compress.TopK(0.01)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters(), compression=compressor)
    state = hvd.elastic.TorchState(model, optimizer, compressor=compressor, step=0)
    report = {"entries": [], "committed": None}
    train(state, sys.argv[1], report)
    print(json.dumps({"rank": hvd.rank(), "size": hvd.size(), "step": state.step,
                      "finite": all(bool(p.isfinite().all()) for p in model.parameters()),
                      "digest": parameters_digest(model), **report}),
          flush=True)


if __name__ == "__main__":
    main()
