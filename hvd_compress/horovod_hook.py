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
  the gradients we do not compress (small, sparse, non-float), take Horovod's original path.

``__init__`` is wrapped too, to refuse up front the options the compressed path cannot honour.
The wrapped methods are those of Horovod 0.28.1, checked at import.
"""
import functools

import horovod
import horovod.torch as hvd
from horovod.torch import optimizer as hvd_optimizer

from .communication import allgather, twophase
from .compressor import Compressor

SUPPORTED_HOROVOD = "0.28.1"
COMMUNICATORS = {"allgather": allgather.start, "twophase": twophase.start}

if horovod.__version__ != SUPPORTED_HOROVOD:
    raise ImportError(
        f"hvd_compress hooks into Horovod {SUPPORTED_HOROVOD}'s DistributedOptimizer internals, "
        f"but Horovod {horovod.__version__} is installed. Install {SUPPORTED_HOROVOD} "
        "(see README: 'make test' builds it).")

_Distributed = hvd_optimizer._DistributedOptimizer
_Adasum = hvd_optimizer._DistributedAdasumOptimizer
_horovod_allreduce_grad_async = _Distributed._allreduce_grad_async
_horovod_init = _Distributed.__init__
_horovod_adasum_init = _Adasum.__init__

# Which Horovod world this process is in: elastic.py counts every reset. The agreement check
# runs once per optimizer and world, so that a rank joining an elastic job and the ranks
# already there run it together (running it on the newcomer alone would deadlock).
_world = 0


def new_world() -> None:
    global _world
    _world += 1


@functools.wraps(_horovod_init)
def _init(self, params, named_parameters, compression, backward_passes_per_step=1,
          op=hvd.Average, gradient_predivide_factor=1.0, groups=None, *args, **kwargs):
    if isinstance(compression, Compressor):
        if groups is not None:
            raise ValueError(
                "groups= is not supported with hvd_compress compressors: Horovod sends a group "
                "as one fused dense allreduce, which would sum compressed payloads. Leave "
                "groups unset; small tensors are fused by Horovod's own tensor fusion anyway.")
        if op not in (hvd.Average, hvd.Sum):
            raise ValueError(f"hvd_compress compressors support op=hvd.Average or hvd.Sum, got {op}")
    _horovod_init(self, params, named_parameters, compression, backward_passes_per_step, op,
                  gradient_predivide_factor, groups, *args, **kwargs)


@functools.wraps(_horovod_adasum_init)
def _adasum_init(self, params, named_parameters, compression, *args, **kwargs):
    if isinstance(compression, Compressor):
        raise ValueError("hvd_compress compressors support op=hvd.Average or hvd.Sum, not Adasum")
    _horovod_adasum_init(self, params, named_parameters, compression, *args, **kwargs)


def _describe(compression) -> str:
    if isinstance(compression, Compressor):
        return compression.spec()
    return getattr(compression, "__name__", type(compression).__name__)


def _check_agreement(self) -> None:
    """Once per optimizer and Horovod world, before its first collective: every rank must use
    the same compression and the same parameter names, shapes and dtypes. A rank that differs would
    otherwise take another path for some tensor and every rank would wait forever on a
    collective the others never start; instead every rank raises a ValueError naming the
    difference. Runs over the global process set (Horovod 0.28.1's allgather_object knows no
    other), so optimizers on a smaller process set are not checked."""
    self._hvd_compress_world = _world
    if self.process_set != hvd.global_process_set:
        return
    mine = {"compression": _describe(self._compression),
            "parameters": sorted((name, tuple(p.shape), str(p.dtype))
                                 for p, name in self._parameter_names.items() if p.requires_grad)}
    everyone = hvd.allgather_object(mine, name="hvd_compress.agreement")
    for rank, theirs in enumerate(everyone):
        if theirs["compression"] != everyone[0]["compression"]:
            raise ValueError(f"hvd_compress: ranks disagree on compression=: rank 0 uses "
                             f"{everyone[0]['compression']!r}, rank {rank} uses "
                             f"{theirs['compression']!r}; every rank must pass the same one")
        if theirs["parameters"] != everyone[0]["parameters"]:
            differing = sorted(set(theirs["parameters"]) ^ set(everyone[0]["parameters"]))
            raise ValueError(f"hvd_compress: ranks disagree on the model: rank 0 and rank {rank} "
                             f"differ in parameters (name, shape, dtype) {differing[:4]}")


@functools.wraps(_horovod_allreduce_grad_async)
def _allreduce_grad_async(self, p):
    if getattr(self, "_hvd_compress_world", None) != _world:
        _check_agreement(self)
    compressor = self._compression
    if not isinstance(compressor, Compressor):
        return _horovod_allreduce_grad_async(self, p)
    if p.grad is None:
        # As Horovod does: other ranks may have a gradient for p this step.
        p.grad = p.data.new(p.size()).zero_()
    if not compressor.compressible(p.grad):
        return _horovod_allreduce_grad_async(self, p)
    # gradient_predivide_factor only splits Horovod's scaling of a summing allreduce into a
    # pre- and a post-factor; we sum in fp32 and scale once, which is the same average.
    name = self._parameter_names.get(p)
    start = COMMUNICATORS[compressor.communication]
    return start(compressor, p.grad, name, self.op == hvd.Average, self.process_set), None


def install() -> None:
    _Distributed.__init__ = _init
    _Distributed._allreduce_grad_async = _allreduce_grad_async
    _Adasum.__init__ = _adasum_init
