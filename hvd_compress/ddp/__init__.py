"""Every method of the catalogue as a torch DistributedDataParallel communication hook.

    model = DistributedDataParallel(model)
    hvd_compress.ddp.register(model, "topk:ratio=0.01")     # or a Compressor instance
    # or: state = hvd_compress.ddp.State("topk:ratio=0.01", model)
    #     model.register_comm_hook(state, hvd_compress.ddp.hook)

Why: most PyTorch data-parallel training runs on DDP, whose own hooks offer fp16/bf16 casts
and PowerSGD only, and Horovod needs our build patch for current torch. This is the second
front door to the same codec: the methods, their payloads, the routes' arithmetic
(communication/codec.py) and the kernels are the Horovod path's; only the collectives differ
(torch.distributed instead of Horovod's), in routes.py. Horovod need not be installed.

What DDP hands the hook is a bucket: the flattened gradients of a few parameters. The hook
compresses each parameter of the bucket on its own, keyed by its name in the model
(``named_parameters()``, the Horovod path's keys, so a checkpoint's residuals mean the same
on both), so every method keeps its per-tensor semantics (TopK's k of each tensor, OneBit's
per-column scales, PowerSGD's per-matrix factors, a majority vote per element) and its error
feedback per parameter across steps. Each parameter takes the route the Horovod path would
give it (communication/route.py: ``auto``, the default, plans from the cost model; forced
routes as forced): ``allgather``, ``twophase`` (DDP buckets take the place of fusion.py's),
PowerSGD's ``lowrank`` (its P and Q of a bucket in one allreduce each), or ``dense`` (one fp32
allreduce for the bucket's small, uncompressible or dense-routed tensors). The aggregate is
the mean over ranks, as DDP's own allreduce gives, then the method's (a vote's sign).

Overlap: the bucket's first collective starts in its hook, during the backward pass; each
later round starts when the next bucket's hook runs (waiting for the round before), and the
last bucket's hook finishes them all, in order. Every rank thus issues its collectives in one
order, which gloo needs (DDP's own PowerSGD hook issues its second allreduce from a completion
callback; with several buckets ranks then disagree on the order: bench/ddp_worker.py).

Guarantees, as on the Horovod path: ranks whose compressor spec or parameters (name, shape,
dtype) differ fail at registration (or the first hook, for ``register_comm_hook`` users) with a
ValueError naming the difference (agreement.py's description and error, gathered over
torch.distributed: one 32-byte allgather); a bad spec is refused at registration
(``from_spec``); a gradient holding NaN or Inf clears that parameter's residual and makes its
aggregate NaN on every rank for that step (codec.py); a parameter this rank computed no
gradient for (``p.grad is None`` in the hook: ``find_unused_parameters=True`` and
``zero_grad(set_to_none=True)``, torch's default) sends nothing and keeps its residual.
Checkpoints: ``State.state_dict()``/``load_state_dict()``, one per rank, as the compressor's.

Cost, beyond the methods' own: a gather of 8 bytes a rank per bucket and variable-length round
(the lengths, before the frames), which adds a round of latency; frames are padded to the
longest rank's (the sparse methods' payloads differ by a few percent). Two-phase costs four
collectives per bucket, PowerSGD two, allgather two, dense one. Not done: the measured plan of
``communication="auto"`` (planner.py: trials of real steps) is Horovod's only; here auto plans
from the cost model for the compressor's ``link_gbit`` (default 1 Gbit/s). DDP's ``join()``
for uneven inputs is not supported, as ``hvd.join()`` is not.

The CPU kernels size their thread pools by the ranks per host: torchrun's ``LOCAL_WORLD_SIZE``
(kernels/threads.py); a job started otherwise should set it.

Measured: every method's aggregate, at 2 and 3 ranks, equals the single-process reference of
tests/test_horovod.py (to the bit but for PowerSGD's rounding), and ranks stay bitwise identical
(tests/test_ddp.py). Speed, indicative only (loopback, unthrottled, 2 ranks on this 2-core
machine while other jobs ran; WideMLP, batch 8, median of 10 steps): TopK 0.01 as this hook
72 ms a step, through Horovod's DistributedOptimizer 76 ms; PowerSGD rank 1 as this hook 89 to
98 ms, DDP's own powerSGD_hook at rank 1 177 to 180 ms. The simulated cluster's DDP cells
(bench/throughput.py, ``DDP_METHODS``) are still to be run.
"""
import torch
import torch.distributed as dist

from .. import agreement
from ..communication import route
from ..compressor import Compressor
from ..spec import from_spec
from .routes import ROUTES, Entry, Group, all_gather


def _compressor(compression: str | Compressor) -> Compressor:
    """The compressor ``compression`` names; refuses what is not one of the catalogue's."""
    if isinstance(compression, type) and issubclass(compression, Compressor):
        raise TypeError(f"pass a compressor instance, hvd_compress.{compression.__name__}() with its "
                        "options, or a spec string, not the class")
    if isinstance(compression, str):
        compression = from_spec(compression)  # a bad spec raises ValueError here
    if not isinstance(compression, Compressor):
        raise ValueError(
            f"hvd_compress.ddp takes a method of the catalogue (a spec such as 'topk:ratio=0.01' "
            f"or a Compressor), got {compression!r}; for fp16 use DDP's own "
            "default_hooks.fp16_compress_hook, for no compression register no hook")
    return compression


class State:
    """The hook's state: the compressor (residuals and per-parameter state, by parameter
    name), the parameters' names and routes, the process group, and the buckets in flight.

    ``compression``: a spec or a Compressor; ``model``: the DistributedDataParallel (or the
    module it wraps); ``process_group``: DDP's (None: the default group); ``optimizer``: if
    given, checked as the Horovod path checks it (DGC refuses an optimizer with momentum)."""

    def __init__(self, compression: str | Compressor, model: torch.nn.Module,
                 process_group: dist.ProcessGroup | None = None,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        compressor = _compressor(compression)
        named = [(n, p) for n, p in getattr(model, "module", model).named_parameters() if p.requires_grad]
        if optimizer is not None:
            compressor.check_optimizer(optimizer.param_groups)
        compressor.serve(sorted(name for name, _ in named))
        self.compressor, self.group = compressor, Group(compressor, process_group)
        self.names = {id(p): name for name, p in named}
        #: each compressible parameter's route, planned together as the Horovod path plans them
        #: (a world without known nodes: a forced hierarchical route takes the allgather there)
        self.routes = route.plan(compressor, [(name, p.shape, p.element_size()) for name, p in named
                                              if compressor.compressible(p)], self.group.ranks)
        unknown = sorted(set(self.routes.values()) - set(ROUTES))
        if unknown:
            raise ValueError(f"hvd_compress.ddp: {compressor.spec()!r} routes tensors by "
                             f"{unknown[0]!r}, which only the Horovod path runs; DDP's routes: "
                             f"{', '.join(ROUTES)}")
        self.description = agreement.description(compressor.spec(), named)
        self.device = named[0][1].device if named else torch.device("cpu")
        self.agreed = False
        self.pending: list[_Bucket] = []

    def agree(self) -> None:
        """Every rank's description against every other's: a ValueError naming the difference
        on every rank where they differ (once; agreement.py)."""
        if self.agreed:
            return
        mine = agreement.digest(self.description).to(self.device)
        everyone = torch.empty(self.group.ranks * agreement.DIGEST_BYTES, dtype=torch.uint8, device=self.device)
        all_gather(everyone, mine, group=self.group.group)
        if not bool((everyone.view(-1, agreement.DIGEST_BYTES) == mine).all()):
            descriptions = [None] * self.group.ranks
            dist.all_gather_object(descriptions, self.description, group=self.group.group)
            raise agreement.disagreement(descriptions)
        self.agreed = True

    def route(self, name: str, grad: torch.Tensor) -> str:
        """This step's route of ``grad``: dense for what the method does not compress, and
        for PowerSGD's first ``start_step`` steps of a matrix (counted here, once a step)."""
        way = self.routes.get(name, "dense") if self.compressor.compressible(grad) else "dense"
        if way == "lowrank" and not self.compressor.compressing(name):
            return "dense"
        return way

    def state_dict(self) -> dict:
        """The compressor's ``state_dict()``: this rank's residuals and per-parameter state."""
        return self.compressor.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.compressor.load_state_dict(state)

    def stats(self) -> dict:
        return self.compressor.stats()


class _Bucket:
    """One bucket's routes, advanced a round at a time (module docstring, Overlap)."""

    def __init__(self, state: State, bucket: dist.GradBucket) -> None:
        self.buffer = bucket.buffer()
        self.future: torch.futures.Future = torch.futures.Future()
        by_route: dict[str, list[Entry]] = {}
        for p, grad in zip(bucket.parameters(), bucket.gradients()):
            name = state.names.get(id(p))
            if name is None:
                raise ValueError(f"hvd_compress.ddp: a parameter of shape {tuple(p.shape)} in DDP's "
                                 "bucket is not one of the model's given to State")
            by_route.setdefault(state.route(name, grad), []).append((name, grad, p.grad is None))
        what = f"DDP bucket {bucket.index()}"
        # in ROUTES' order, the same on every rank
        self.rounds = [ROUTES[way](state.group, by_route[way], what) for way in ROUTES if way in by_route]
        self.done = False
        self.advance()

    def advance(self) -> None:
        """Resumes every route by one round; the future is set once all are done."""
        self.rounds = [r for r in self.rounds if next(r, StopIteration) is not StopIteration]
        if not self.rounds:
            self.done = True
            self.future.set_result(self.buffer)


def hook(state: State, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The communication hook: a future of ``bucket``'s buffer holding the aggregate of its
    gradients, set by the time the last bucket's hook returns."""
    try:
        state.agree()
        for pending in state.pending:  # their next round, before this bucket's first
            pending.advance()
        state.pending = [b for b in state.pending if not b.done]
        current = _Bucket(state, bucket)
        state.pending.append(current)
        if bucket.is_last():
            while state.pending:
                for pending in state.pending:
                    pending.advance()
                state.pending = [b for b in state.pending if not b.done]
        return current.future
    except BaseException:
        state.pending = []  # a failed step leaves nothing for the next one to resume
        raise


def register(model: torch.nn.Module, compression: str | Compressor,
             process_group: dist.ProcessGroup | None = None,
             optimizer: torch.optim.Optimizer | None = None) -> State:
    """Registers ``compression`` (a spec or a Compressor) as ``model``'s communication hook
    and returns the hook's state (for ``state_dict()`` and ``stats()``). ``model`` must be a
    DistributedDataParallel that has not run a step. Raises ValueError for a bad spec, and on
    every rank when the ranks' specs or parameters differ."""
    if not callable(getattr(model, "register_comm_hook", None)):
        raise TypeError(f"hvd_compress.ddp.register takes a DistributedDataParallel model, got "
                        f"{type(model).__name__}: wrap it first, DistributedDataParallel(model)")
    state = State(compression, model, process_group if process_group is not None
                  else getattr(model, "process_group", None), optimizer)
    state.agree()
    model.register_comm_hook(state, hook)
    return state
