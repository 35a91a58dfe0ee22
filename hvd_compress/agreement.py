"""Every rank must give an optimizer the same compression and the same parameters: checked once
per optimizer and Horovod world, before any of its collectives is waited on.

Why: a rank that takes another path for a tensor (another compressor or option, Horovod's own
compression where others use ours, a parameter of another shape) would leave every rank waiting
forever on a collective the others never start. Instead every rank raises a ValueError that
names the difference.

How: at the optimizer's first gradient in a world (or in its ``synchronize()``, on a rank that
computed none) a 32-byte digest of its description (the compression, and the name, shape and
dtype of every parameter Horovod reduces for it) is allgathered asynchronously over the
optimizer's process set; ``synchronize()`` waits for it before it waits on anything else of the
optimizer. Only when the digests differ do the ranks exchange the full descriptions, to name the
difference. The collective is named after the optimizer's identity (``OptimizerId``): a digest
of its parameter names, and its place among this process's optimizers with those same names.
So one optimizer's description can never meet another's, whatever order ranks build or step
their optimizers in.

Cost: one 32-byte allgather per optimizer and world. Optimizers with Horovod's own compressors
are checked too (it is the only way a rank that passed ``Compression.none`` where the others
pass TopK gets an error instead of a hang); that is all hvd_compress does for them.

The description, its digest and the error that names a difference (``description``,
``digest``, ``disagreement``) are the DDP hook's too (ddp.py), which gathers them over
torch.distributed; Horovod is imported only by what gathers over it.
"""
import hashlib
import pickle
import zlib
from collections import Counter
from typing import Iterable

import torch

DIGEST_BYTES = 32
_seen: Counter = Counter()  # parameter-name digests of the optimizers built in this process


def optimizer_id(parameter_names: list[str]) -> str:
    """``DIGEST.N``: the digest of the optimizer's parameter names and how many optimizers with
    the same names this process built before it. The same on every rank that builds the same
    optimizers; two optimizers of one process never share it."""
    digest = f"{zlib.crc32('|'.join(sorted(parameter_names)).encode()):08x}"
    index = _seen[digest]
    _seen[digest] += 1
    return f"{digest}.{index}"


def description(compression: str, parameters: Iterable[tuple[str, torch.Tensor]]) -> dict:
    """What every rank must agree on: the compression, and the name, shape and dtype of every
    parameter reduced with it."""
    return {"compression": compression,
            "parameters": sorted((name, tuple(p.shape), str(p.dtype)) for name, p in parameters)}


def digest(description: dict) -> torch.Tensor:
    """The description's ``DIGEST_BYTES``-byte SHA-256, as a uint8 tensor to gather."""
    return torch.frombuffer(bytearray(hashlib.sha256(repr(description).encode()).digest()),
                            dtype=torch.uint8)


def disagreement(everyone: list[dict]) -> ValueError:
    """The error that names how the ranks' descriptions (in rank order) differ."""
    first = everyone[0]
    for rank, theirs in enumerate(everyone):
        if theirs["compression"] != first["compression"]:
            return ValueError(
                f"hvd_compress: ranks disagree on compression=: rank 0 uses "
                f"{first['compression']!r}, rank {rank} uses {theirs['compression']!r}; "
                "every rank must pass the same one")
        if theirs["parameters"] != first["parameters"]:
            differing = sorted(set(theirs["parameters"]) ^ set(first["parameters"]))
            return ValueError(
                f"hvd_compress: ranks disagree on the model: rank 0 and rank {rank} differ in "
                f"parameters (name, shape, dtype) {differing[:4]}; every rank must build the "
                "same model and optimizers")
    return ValueError("hvd_compress: ranks disagree on the optimizer's description")


def _allgather_objects(obj: object, name: str, process_set) -> list:
    """Horovod 0.28.1's allgather_object, over a process set."""
    import horovod.torch as hvd

    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    sizes = hvd.allgather(torch.tensor([data.numel()]), name=f"{name}.sizes", process_set=process_set)
    gathered = hvd.allgather(data, name=f"{name}.data", process_set=process_set)
    parts = gathered.split(sizes.tolist())
    return [pickle.loads(part.numpy().tobytes()) for part in parts]


class Agreement:
    """One optimizer's check in one world: ``start()`` it, then ``verify()`` it."""

    def __init__(self, name: str, description: dict, process_set) -> None:
        """``process_set``: a horovod.torch.ProcessSet."""
        self.name, self.description, self.process_set = name, description, process_set
        self._mine = digest(description)
        self._handle = None
        self._verified = False

    def start(self) -> None:
        import horovod.torch as hvd

        if self._handle is None:
            self._handle = hvd.allgather_async(self._mine, name=self.name, process_set=self.process_set)

    def verify(self) -> None:
        """Waits for every rank's digest; raises a ValueError naming the difference if any
        differs (on every rank, since every rank sees every digest)."""
        import horovod.torch as hvd

        if self._verified:
            return
        self.start()
        digests = hvd.synchronize(self._handle).view(-1, DIGEST_BYTES)
        if bool((digests == self._mine).all()):
            self._verified = True
            return
        raise disagreement(_allgather_objects(self.description, f"{self.name}.details", self.process_set))
