"""Zero-copy bridges between torch tensors and the arrays kernels work on."""
import functools
import importlib

import torch


def on_cuda(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cuda"


def view(tensor: torch.Tensor):
    """A numpy array (CPU) or Numba device array (CUDA) sharing ``tensor``'s memory."""
    if on_cuda(tensor):
        from numba import cuda

        return cuda.as_cuda_array(tensor.detach())
    return tensor.detach().numpy()


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
    """The bytes of ``parts`` back to back, as one uint8 tensor (the payload body)."""
    return torch.cat([p.reshape(-1).view(torch.uint8) for p in parts])


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
