"""Routes the gradients of an hvd_compress compressor around Horovod's summing allreduce.

Horovod hands ``compression.compress(grad)`` to an allreduce, which sums it: right for fp16,
garbage for indices or packed bits. So at import this module wraps one method of Horovod's
``_DistributedOptimizer`` (whose ``__dict__`` ``hvd.DistributedOptimizer`` copies into every
optimizer class it builds):

* ``_allreduce_grad_async(p)``, called from the gradient hook, starts our compressed collective
  for ``p`` (named after the parameter) and returns a callable handle. Horovod's
  ``synchronize()`` already accepts callables and takes their return value as the reduced
  gradient; it then calls ``compression.decompress``, which is the identity for our compressors.
  Communication stays asynchronous: it starts in the hook and is waited on in ``synchronize()``.
* Any other compression object (``Compression.none``, ``Compression.fp16``, user classes), and
  the gradients we do not compress (small, sparse, non-float, or routed dense by
  ``communication/route.py``), take Horovod's original path.

``__init__`` is wrapped too, to refuse up front the options the compressed path cannot honour.
The wrapped methods are those of Horovod 0.28.1, checked at import.
"""
import functools
import gc
import weakref

import horovod
import horovod.torch as hvd
import torch
from horovod.torch import mpi_ops
from horovod.torch import optimizer as hvd_optimizer

from .agreement import Agreement, optimizer_id
from .communication import allgather, dense, fusion, hierarchical, lowrank, route, topology, twophase
from .communication.planner import Planner
from .communication.base import Exchange
from .compressor import Compressor

SUPPORTED_HOROVOD = "0.28.1"
#: how each route (a method's ROUTES; "auto" resolves to one of them per tensor) starts a tensor
STARTS = {"allgather": allgather.start, "twophase": twophase.start, "lowrank": lowrank.start,
          **{way: hierarchical.starter(way) for way in hierarchical.ROUTES}}

if horovod.__version__ != SUPPORTED_HOROVOD:
    raise ImportError(
        f"hvd_compress hooks into Horovod {SUPPORTED_HOROVOD}'s DistributedOptimizer internals, "
        f"but Horovod {horovod.__version__} is installed. Install {SUPPORTED_HOROVOD} "
        "(see README: 'make test' builds it).")

_Distributed = hvd_optimizer._DistributedOptimizer
_Adasum = hvd_optimizer._DistributedAdasumOptimizer
_horovod_allreduce_grad_async = _Distributed._allreduce_grad_async
_horovod_synchronize = _Distributed.synchronize
_horovod_init = _Distributed.__init__
_horovod_adasum_init = _Adasum.__init__
_horovod_join = mpi_ops.join

# Which Horovod world this process is in: elastic.py counts every reset. The agreement check
# runs once per optimizer and world, so that a rank joining an elastic job and the ranks
# already there run it together (running it on the newcomer alone would deadlock).
_world = 0
# Optimizers using an hvd_compress compressor, for the hvd.join() refusal. Empty in a process
# that never built one, so that plain Horovod's join pays nothing for the import.
_compressed = weakref.WeakSet()


def new_world() -> None:
    global _world
    _world += 1


class _State:
    """What hvd_compress keeps per DistributedOptimizer (as ``optimizer._hvd_compress``)."""

    def __init__(self, optimizer) -> None:
        self.id = optimizer_id(list(optimizer._parameter_names.values()))
        self.exchange = Exchange(f"hvd_compress.{self.id}", optimizer.process_set,
                                 optimizer.op == hvd.Average)
        self.agreement: Agreement | None = None
        self.world: int | None = None
        #: this world's route of each compressible parameter's gradient (route.plan, or the
        #: planner's when they are measured)
        self.routes: dict[str, str] = {}
        self.planner: Planner | None = None
        #: ids of the parameters whose gradients go straight to Horovod's own path this world
        #: (``use``): a model of many small tensors pays no more per tensor than without us
        self.straight: frozenset[int] = frozenset()

    def agree(self, optimizer) -> Agreement:
        """This world's agreement check, started (and its routes and two-phase buckets planned)."""
        if self.world != _world:
            description = {"compression": _describe(optimizer._compression),
                           "parameters": sorted((optimizer._parameter_names.get(p), tuple(p.shape),
                                                 str(p.dtype)) for p in optimizer._requires_update)}
            self.agreement = Agreement(f"hvd_compress.agreement.{self.id}", description,
                                       optimizer.process_set)
            # first: a rank that disagrees must get its error, not wait in the topology's allgather
            self.agreement.start()
            self.world = _world
            compressor = optimizer._compression
            if isinstance(compressor, Compressor):
                self.exchange.nodes = _nodes(compressor, optimizer.process_set)
                self.planner, tensors = None, _compressible(optimizer)
                if tensors and measured(compressor, optimizer.process_set.size()):
                    self.planner = Planner(compressor, tensors, self.exchange, _world)
                self.use(optimizer, self.planner.routes if self.planner else _routes(optimizer))
            else:
                self.straight = frozenset(id(p) for _, p in _parameters(optimizer))
        return self.agreement

    def use(self, optimizer, routes: dict[str, str]) -> None:
        """Takes ``routes`` from the next gradient on, with their two-phase buckets."""
        self.routes = routes
        parameters = _parameters(optimizer)
        self.exchange.buckets = fusion.Buckets(
            fusion.plan(parameters, lambda name: routes.get(name) in fusion.ALLTOALL_ROUTES),
            self.exchange)
        # Dense by plan, or too small or of a dtype never compressed (a parameter's gradient has
        # its shape and dtype), and Horovod reduces their dtype itself; none with a residual
        # still to release.
        release = self.planner.release if self.planner else set()
        self.straight = frozenset(
            id(p) for name, p in parameters
            if routes.get(name, "dense") == "dense" and name not in release
            and p.dtype not in dense.WIDENED)


def measured(compressor: Compressor, ranks: int) -> bool:
    """Whether ``communication="auto"`` measures and tries its routes (communication/planner.py):
    when it is not told the link rate (``link_gbit``, ``HVD_COMPRESS_LINK_GBIT``), which plans
    from the cost model's fitted constants instead, and there is more than one rank."""
    return compressor.communication == "auto" and compressor.link_gbit is None and ranks > 1


def _parameters(optimizer) -> list[tuple[str, torch.Tensor]]:
    """The parameters the optimizer reduces, by name, in registration order."""
    return [(optimizer._parameter_names.get(p), p) for group in optimizer.param_groups
            for p in group["params"] if p in optimizer._requires_update]


def _compressible(optimizer) -> list[route.Tensor]:
    """The compressible parameters, each standing in for its gradient (same shape and dtype)."""
    return [(name, p.shape, p.element_size()) for name, p in _parameters(optimizer)
            if optimizer._compression.compressible(p)]


def _routes(optimizer) -> dict[str, str]:
    """The route of each compressible parameter's gradient, planned together (route.plan)."""
    return route.plan(optimizer._compression, _compressible(optimizer), optimizer.process_set.size(),
                      nodes=optimizer._hvd_compress.exchange.nodes)


def _nodes(compressor: Compressor, process_set) -> topology.Nodes | None:
    """This rank's place among nodes, where the compressor may take the hierarchical route."""
    if (set(hierarchical.ROUTES) & set(compressor.ROUTES) and process_set.size() > 1
            and compressor.communication in ("auto", *hierarchical.ROUTES)):
        return topology.of(process_set, _world)
    return None


def _describe(compression) -> str:
    if isinstance(compression, Compressor):
        return compression.spec()
    return getattr(compression, "__name__", type(compression).__name__)


def _validate(compression) -> None:
    """Refuses at construction what would otherwise fail inside the first gradient hook."""
    if isinstance(compression, type) and issubclass(compression, Compressor):
        raise TypeError(f"compression= takes a compressor instance, got the class "
                        f"{compression.__name__}: pass compression=hvd_compress.{compression.__name__}()"
                        " (with its options), unlike Horovod's own compressors, which are classes")
    if isinstance(compression, str):
        raise TypeError(f"compression= takes a compressor, got the string {compression!r}: "
                        f"pass compression=hvd_compress.from_spec({compression!r})")
    if not (callable(getattr(compression, "compress", None))
            and callable(getattr(compression, "decompress", None))):
        raise TypeError(f"compression= takes an hvd_compress compressor or one of Horovod's "
                        f"(hvd.Compression.none, hvd.Compression.fp16), got {compression!r}")


@functools.wraps(_horovod_init)
def _init(self, params, named_parameters, compression, backward_passes_per_step=1,
          op=hvd.Average, gradient_predivide_factor=1.0, groups=None, *args, **kwargs):
    _validate(compression)
    if named_parameters is not None:
        named_parameters = list(named_parameters)  # read twice below; Horovod lists it too
    if isinstance(compression, Compressor):
        if groups is not None:
            raise ValueError(
                "groups= is not supported with hvd_compress compressors: Horovod sends a group "
                "as one fused dense allreduce, which would sum compressed payloads. Leave "
                "groups unset; small tensors are fused by Horovod's own tensor fusion anyway.")
        if op not in (hvd.Average, hvd.Sum):
            raise ValueError(f"hvd_compress compressors support op=hvd.Average or hvd.Sum, got {op}")
        # Before Horovod's __init__, which registers gradient hooks that a refused optimizer
        # must not leave behind.
        params = list(params)
        compression.check_optimizer([group for group in params if isinstance(group, dict)])
        compression.serve(sorted(name for name, _ in named_parameters or ()))
    _horovod_init(self, params, named_parameters, compression, backward_passes_per_step, op,
                  gradient_predivide_factor, groups, *args, **kwargs)
    self._hvd_compress = _State(self)
    if isinstance(compression, Compressor):
        _compressed.add(self)


@functools.wraps(_horovod_adasum_init)
def _adasum_init(self, params, named_parameters, compression, *args, **kwargs):
    if isinstance(compression, Compressor):
        raise ValueError("hvd_compress compressors support op=hvd.Average or hvd.Sum, not Adasum")
    _horovod_adasum_init(self, params, named_parameters, compression, *args, **kwargs)


@functools.wraps(_horovod_allreduce_grad_async)
def _allreduce_grad_async(self, p):
    state = self._hvd_compress
    if state.world == _world and id(p) in state.straight and p.layout == torch.strided:
        return _horovod_allreduce_grad_async(self, p)
    state.agree(self)
    compressor = self._compression
    if not isinstance(compressor, Compressor):
        return _horovod_allreduce_grad_async(self, p)
    # No gradient this step: none computed (Horovod zero-fills it below) or a frozen parameter.
    absent = p.grad is None or not p.requires_grad
    if p.grad is None:
        # As Horovod does: other ranks may have a gradient for p this step.
        p.grad = p.data.new(p.size()).zero_()
    name = self._parameter_names.get(p)
    way = "dense"
    if compressor.compressible(p.grad):
        way = state.routes.get(name) or route.choose(compressor, p.grad, self.process_set.size())
    if way == "dense":
        if state.planner is not None and not absent and name in state.planner.release:
            state.planner.fold_released(name, p.grad)
            if p.grad.dtype not in dense.WIDENED:  # released: straight to Horovod from now on
                state.straight = state.straight | {id(p)}
        if p.grad.dtype in dense.WIDENED:
            return dense.start(p.grad, name, state.exchange), None
        return _horovod_allreduce_grad_async(self, p)
    # gradient_predivide_factor only splits Horovod's scaling of a summing allreduce into a
    # pre- and a post-factor; we sum in fp32 and scale once, which is the same average.
    return STARTS[way](compressor, p.grad, name, state.exchange, absent), None


@functools.wraps(_horovod_synchronize)
def _synchronize(self):
    if not self.process_set.included():
        return _horovod_synchronize(self)
    state = self._hvd_compress
    ours = isinstance(self._compression, Compressor)
    if ours and self._synchronized and not self._handles:
        # A second synchronize() in one step (step() without skip_synchronize(); Horovod warns):
        # the gradients already hold the aggregate, and compressing it again would put the
        # average into the residuals and send it twice.
        return None
    state.agree(self).verify()
    result = _horovod_synchronize(self)
    if ours and state.planner is not None and state.planner.step_finished():
        state.use(self, state.planner.routes)
    return result


@functools.wraps(_horovod_join)
def _join(*args, **kwargs) -> int:
    if _compressed:
        gc.collect()  # optimizers of finished training loops live in reference cycles until then
    if _compressed:
        raise ValueError(
            "hvd.join() is not supported with hvd_compress compressors: Horovod cannot run the "
            "allgather and alltoall collectives compressed gradients travel by once a rank has "
            "joined. Give every rank the same number of steps instead (e.g. cut each rank's "
            "batches to the smallest count: n = hvd.allreduce(torch.tensor(len(loader)), "
            "op=hvd.Min)), or use hvd.Compression.none/fp16 for a job with uneven data.")
    return _horovod_join(*args, **kwargs)


def install() -> None:
    _Distributed.__init__ = _init
    _Distributed._allreduce_grad_async = _allreduce_grad_async
    _Distributed.synchronize = _synchronize
    _Adasum.__init__ = _adasum_init
    mpi_ops.join = _join
    hvd.join = _join
