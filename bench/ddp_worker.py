"""The peer a PyTorch user would pick instead of hvd_compress: the synthetic benchmark of
examples/pytorch_synthetic_benchmark.py under torch DDP on gloo, with one of DDP's communication
hooks.

    --hook allreduce     no hook: DDP's bucketed fp32 allreduce
    --hook fp16          default_hooks.fp16_compress_hook
    --hook powersgd:R    powerSGD_hook, matrix_approximation_rank=R, error feedback and warm start
                         on (PyTorch's defaults), PowerSGD from the second step on, all
                         gradients in one bucket (see ``wrap``)
    --hook SPEC          any other value: an hvd_compress spec (topk:ratio=0.01, onebit,
                         powersgd:rank=1, ...) as hvd_compress.ddp's hook, DDP's default buckets

Reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment (bench/netsim.py sets
them), as ``torchrun`` would.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

import hvd_compress

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from pytorch_synthetic_benchmark import benchmark, parse_args, synthetic_model_and_batch  # noqa: E402


def wrap(model: torch.nn.Module, hook: str,
         optimizer: torch.optim.Optimizer | None = None) -> DistributedDataParallel:
    """``model`` under DDP (which broadcasts rank 0's parameters) with ``hook`` registered; for
    an hvd_compress spec the hook's state is ``.hvd_compress`` of the result (``optimizer``, if
    given, is checked against the method: DGC refuses momentum of its own)."""
    if hook == "allreduce":
        return DistributedDataParallel(model)
    if hook == "fp16":
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return ddp
    if hook.startswith("powersgd:") and hook[len("powersgd:"):].isdigit():
        # One bucket: the hook issues each bucket's second allreduce from the first one's
        # completion callback, so with several buckets ranks may issue collectives in different
        # orders, which gloo reports as a size mismatch and aborts (seen here, about one run
        # in three).
        ddp = DistributedDataParallel(model, bucket_cap_mb=4096)
        # start_powerSGD_iter=2: the first (warm-up) step is a plain allreduce, every timed one
        # is PowerSGD; 1 is refused when error feedback is on.
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                           matrix_approximation_rank=int(hook.split(":")[1]),
                                           start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return ddp
    ddp = DistributedDataParallel(model)
    ddp.hvd_compress = hvd_compress.ddp.register(ddp, hook, optimizer=optimizer)  # a bad spec raises
    return ddp


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument("--hook", default="allreduce"))
    dist.init_process_group("gloo")
    model, x, y = synthetic_model_and_batch(args)
    # DGC applies the momentum itself (and refuses an optimizer with momentum of its own)
    momentum = 0.0 if args.hook.partition(":")[0] == "dgc" else 0.9
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=momentum)
    model = wrap(model, args.hook, optimizer)
    ours = getattr(model, "hvd_compress", None)

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    phases = (lambda: ours.stats()["seconds"]) if ours else dict
    benchmark(step, dist.barrier, dist.get_rank(), dist.get_world_size(), args, phases)
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
