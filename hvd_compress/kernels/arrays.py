"""Zero-copy bridges between torch tensors and the arrays kernels work on."""
import functools
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


class _OnStream:
    """A CUDA kernel module whose functions run on one stream."""

    def __init__(self, module, cuda_stream) -> None:
        self._module, self._stream = module, cuda_stream

    def __getattr__(self, name: str):
        return functools.partial(getattr(self._module, name), stream=self._stream)


def kernels(algorithm: str, like: torch.Tensor):
    """``kernels/{algorithm}_cpu`` for CPU tensors; ``kernels/{algorithm}_cuda``, bound to
    torch's current stream, for CUDA ones. Both expose the same functions."""
    if on_cuda(like):
        module = importlib.import_module(f"{__package__}.{algorithm}_cuda")
        return _OnStream(module, stream(like))
    return importlib.import_module(f"{__package__}.{algorithm}_cpu")
