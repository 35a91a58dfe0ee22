"""The catalogue: one file per compression method, each a ``Compressor`` subclass whose
docstring states the algorithm, its paper, its payload and its cost.

A method may touch only its own kernels (``hvd_compress/kernels``) and what ``compressor.py``
gives every method (options, error-feedback memory). How its payloads travel is decided in
``hvd_compress/communication``, never here.
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

#: every method, by the name ``from_spec`` knows it by
METHODS: dict[str, type[Compressor]] = {cls.name: cls for cls in (TopK, OneBit, AdaComp, PowerSGD)}
METHODS.update({cls.name: cls for cls in (RandomK, Threshold, SignSGD, Signum, EFSignSGD, DGC)})
METHODS.update({cls.name: cls for cls in (QSGD, TernGrad, U8Bit, Natural)})
