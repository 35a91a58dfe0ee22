"""hvd_compress: gradient compression for Horovod + PyTorch.

    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=hvd_compress.TopK(ratio=0.01))

Importing this package installs the hook that lets these compressors' payloads cross the
network compressed (see ``horovod_hook``); Horovod's own compressors behave as before. Every
method of the catalogue (``methods.METHODS``) is exported under its class name.
"""
from . import elastic, horovod_hook
from .compressor import Compressor
from .methods import METHODS
from .payload import PayloadError
from .spec import from_spec

globals().update({cls.__name__: cls for cls in METHODS.values()})

horovod_hook.install()
elastic.install()

__all__ = ["Compressor", "METHODS", "PayloadError", "from_spec",
           *sorted(cls.__name__ for cls in METHODS.values())]
__version__ = "0.1.0"
