"""hvd_compress: gradient compression for Horovod + PyTorch.

    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=hvd_compress.TopK(ratio=0.01))

Importing this package installs the hook that lets these compressors' payloads cross the
network compressed (see ``horovod_hook``); Horovod's own compressors behave as before.
"""
from . import elastic, horovod_hook
from .compressor import Compressor
from .methods import AdaComp, OneBit, PowerSGD, TopK
from .methods import DGC, EFSignSGD, RandomK, SignSGD, Signum, Threshold
from .methods import QSGD, Natural, TernGrad, U8Bit
from .spec import from_spec

horovod_hook.install()
elastic.install()

__all__ = ["AdaComp", "Compressor", "OneBit", "PowerSGD", "TopK", "from_spec"]
__all__ += ["DGC", "EFSignSGD", "RandomK", "SignSGD", "Signum", "Threshold"]
__all__ += ["Natural", "QSGD", "TernGrad", "U8Bit"]
__version__ = "0.1.0"
