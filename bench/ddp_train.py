"""The peer for time to accuracy: examples/pytorch_mnist.py or examples/pytorch_ptb_lm.py trained
under torch DDP on gloo with one of DDP's communication hooks (bench/ddp_worker.py's ``wrap``:
``--hook allreduce | fp16 | powersgd:RANK``, or an hvd_compress spec), the same model, data, optimizer, clipping and
evaluation as the Horovod run, only the gradient exchange differs.

    torchrun --nproc_per_node 2 bench/ddp_train.py ptb --hook powersgd:1 --epochs 1

Reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment (bench/netsim.py sets
them). Takes the example's own options after the workload's name.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)
from ddp_worker import wrap  # noqa: E402
from training import World  # noqa: E402


def _sum(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.clone()
    dist.all_reduce(tensor)
    return tensor


def main() -> None:
    workload = sys.argv.pop(1)
    if workload == "mnist":
        import pytorch_mnist as example
    elif workload == "ptb":
        import pytorch_ptb_lm as example
    else:
        sys.exit(f"ddp_train.py: the workload is mnist or ptb, got {workload!r}")
    args = example.parse_args(lambda p: p.add_argument("--hook", default="powersgd:1"))
    dist.init_process_group("gloo")
    world = World(dist.get_rank(), dist.get_world_size(), _sum)
    model, optimizer, data = example.build(args, world.size)
    ddp = wrap(model, args.hook, optimizer)
    clip = getattr(args, "clip", None)

    def step(loss: torch.Tensor) -> None:
        optimizer.zero_grad()
        loss.backward()  # DDP's hook aggregates during the backward pass
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()

    metrics = example.train(args, ddp, optimizer, data, step, world)
    if args.metrics and world.rank == 0:
        with open(args.metrics, "w") as f:
            json.dump(metrics, f)  # no per-layer compression: DDP's hooks keep no statistics
    # every rank past its last collective before any tears down: a rank whose peer closed the
    # group first could abort at exit (std::terminate in a gloo thread, seen under load)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # torch's gloo threads can still be joinable when the interpreter's destructors run, and a
    # rank then aborts at exit (std::terminate) after its work is done and reported: leave now
    sys.stdout.flush()
    os._exit(0)
