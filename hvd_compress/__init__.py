"""hvd_compress: gradient compression for Horovod + PyTorch, and for torch DDP.

    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=hvd_compress.TopK(ratio=0.01))
    hvd_compress.ddp.register(model, "topk:ratio=0.01")   # model: a DistributedDataParallel

Importing this package installs the hook that lets these compressors' payloads cross the
network compressed (see ``horovod_hook``); Horovod's own compressors behave as before. Where
Horovod is not installed, the package serves DDP alone (``ddp``) and installs nothing. Every
method of the catalogue (``methods.METHODS``) is exported under its class name.
"""
import torch.distributed

from .compressor import Compressor
from .methods import METHODS
from .options import horovod_installed
from .payload import PayloadError
from .spec import from_spec

globals().update({cls.__name__: cls for cls in METHODS.values()})

if torch.distributed.is_available():  # a torch built without it has no DDP to serve
    from . import ddp

if horovod_installed():
    from . import elastic, horovod_hook

    horovod_hook.install()
    elastic.install()

__all__ = ["Compressor", "METHODS", "PayloadError", "from_spec",
           *sorted(cls.__name__ for cls in METHODS.values())]
__version__ = "0.1.0"
