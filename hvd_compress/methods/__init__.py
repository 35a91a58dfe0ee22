"""The catalogue: one file per compression method, each a ``Compressor`` subclass whose
docstring states the algorithm, its paper, its payload and its cost.

A method touches kernels only through ``kernels.arrays.kernels`` and what ``compressor.py``
gives every method (options, error-feedback memory, per-parameter state). It declares the
routes its payloads may take (``ROUTES``); which one a tensor takes is decided in
``hvd_compress/communication``.

Adding a method: its file here, and its class in ``METHODS`` below. The package exports it,
``from_spec`` knows it, the catalogue's tests run its ``EXAMPLES``, the benches and docs/methods.md's
method table list it.
"""
from ..compressor import Compressor
from .adacomp import AdaComp
from .dgc import DGC
from .efsignsgd import EFSignSGD
from .natural import Natural
from .onebit import OneBit
from .powersgd import PowerSGD
from .qsgd import QSGD
from .randomk import RandomK
from .signsgd import SignSGD
from .signum import Signum
from .terngrad import TernGrad
from .threshold import Threshold
from .topk import TopK
from .u8bit import U8Bit

#: every method, by the name ``from_spec`` knows it by, in the method table's order
METHODS: dict[str, type[Compressor]] = {cls.name: cls for cls in (
    TopK, OneBit, AdaComp, PowerSGD, DGC, RandomK, Threshold, SignSGD, Signum, EFSignSGD,
    QSGD, TernGrad, U8Bit, Natural)}
