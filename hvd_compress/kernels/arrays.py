"""Zero-copy bridges between torch tensors and the arrays kernels work on."""
import importlib

import numpy as np
import torch


def on_cuda(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cuda"


def view(tensor: torch.Tensor):
    """A numpy array (CPU) or Numba device array (CUDA) sharing ``tensor``'s memory."""
    if on_cuda(tensor):
        from numba import cuda

        return cuda.as_cuda_array(tensor.detach())
    return tensor.detach().numpy()


def one_pass_cpu(acc: torch.Tensor, grad: torch.Tensor) -> bool:
    """Whether a method's one-pass CPU kernel (``Compressor.fold_encode``) can fold ``grad``
    into ``acc``: a CPU residual and an fp32 gradient. Others fold in a pass of their own."""
    return not on_cuda(acc) and grad.dtype == torch.float32


def tensor(array, like: torch.Tensor) -> torch.Tensor:
    """A torch tensor sharing ``array``'s memory, on ``like``'s device."""
    if on_cuda(like):
        return torch.as_tensor(array, device=like.device)
    return torch.from_numpy(array)


def stream(like: torch.Tensor):
    """The stream CUDA kernels must run on to stay ordered with torch's work (None on CPU)."""
    if not on_cuda(like):
        return None
    from numba import cuda

    return cuda.external_stream(torch.cuda.current_stream(like.device).cuda_stream)


def join(parts: list[torch.Tensor]) -> torch.Tensor:
    """The bytes of ``parts`` back to back, as one uint8 tensor (the payload body). Empty parts
    are left out: numpy gives an empty array stride 0, which torch refuses to reinterpret."""
    return torch.cat([p.reshape(-1).view(torch.uint8) for p in parts if p.numel()]
                     or [parts[0].new_empty(0, dtype=torch.uint8)])


def spans(parts: list[torch.Tensor]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(buffer, starts, lengths): one uint8 array holding the bytes of ``parts`` (1-D uint8 CPU
    tensors), part r at ``buffer[starts[r]:starts[r] + lengths[r]]``, for a kernel that takes
    them all in one call. Parts that are views of one tensor (the bodies of one collective's
    result) are read where they lie, without a copy; others are joined."""
    lengths = np.array([p.numel() for p in parts], np.int64)
    storage = parts[0].untyped_storage().data_ptr()
    if all(p.is_contiguous() and p.untyped_storage().data_ptr() == storage for p in parts):
        offsets = np.array([p.storage_offset() for p in parts], np.int64)
        first = int(offsets.min())
        size = int((offsets + lengths).max()) - first
        return view(parts[0].as_strided((size,), (1,), first)), offsets - first, lengths
    starts = np.zeros(len(parts), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return view(join(parts)), starts, lengths


def _to_torch(result, like: torch.Tensor):
    """A kernel's result with its arrays turned into tensors on ``like``'s device (an empty one
    made directly: a zero-length device array has no __cuda_array_interface__ pointer)."""
    if isinstance(result, tuple):
        return tuple(_to_torch(r, like) for r in result)
    if isinstance(result, np.ndarray) or hasattr(result, "__cuda_array_interface__"):
        if result.size == 0:
            return torch.from_numpy(np.empty(0, result.dtype)).to(like.device)
        return tensor(result, like)
    return result


class Kernels:
    """One family's kernels for one device, over torch tensors: arguments that are tensors are
    handed to the kernel as arrays sharing their memory, arrays it returns come back as tensors
    sharing theirs (no copy either way), and CUDA kernels run on torch's current stream. With
    ``convert=False`` only the stream is bound (for host code that works on arrays itself:
    kernels/quantize.py)."""

    def __init__(self, module, like: torch.Tensor, convert: bool = True) -> None:
        self._module, self._like, self._stream, self._convert = module, like, stream(like), convert

    def __getattr__(self, name: str):
        function = getattr(self._module, name)
        extra = {} if self._stream is None else {"stream": self._stream}
        if not self._convert:
            return lambda *args: function(*args, **extra)

        def call(*args):
            arrays = [view(a) if isinstance(a, torch.Tensor) else a for a in args]
            return _to_torch(function(*arrays, **extra), self._like)
        return call


def kernels(family: str, like: torch.Tensor, convert: bool = True) -> Kernels:
    """``family``'s kernels (kernels/__init__.py: its SHARED table) for ``like``'s device: the
    ``_cpu`` module for CPU tensors, the ``_cuda`` one for CUDA tensors; over tensors unless
    ``convert=False``."""
    device = "cuda" if on_cuda(like) else "cpu"
    return Kernels(importlib.import_module(f"{__package__}.{family}_{device}"), like, convert)
