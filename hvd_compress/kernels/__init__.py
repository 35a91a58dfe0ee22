"""Compression kernels: pure functions over numpy arrays (CPU, Numba) and CUDA device arrays.

No torch inside a kernel. Each kernel has a plain-numpy reference in ``tests/references.py``.

A family is two modules, ``NAME_cpu`` and ``NAME_cuda``, offering the functions ``FAMILIES``
lists with the same arguments (CUDA ones take a ``stream=`` keyword more); ``CPU_ONLY`` lists
the one-pass CPU kernels a method uses only on CPU tensors (``arrays.one_pass_cpu``). Methods
reach them through ``arrays.kernels(NAME, like)``, which picks the module for ``like``'s device
and turns tensors into arrays and back: the one place a gradient's walk crosses between torch
and Numba. Both builds are checked against this table when the package is imported.
"""
import importlib

#: the functions each family offers on both devices
FAMILIES: dict[str, tuple[str, ...]] = {
    "topk": ("select",),
    "sparse": ("scatter_add",),
    "threshold": ("select",),
    "onebit": ("quantize", "dequantize_add"),
    "adacomp": ("select", "decode_add"),
    "randomk": ("select", "decode_add"),
    "signsgd": ("pack", "unpack_add"),
    "momentum": ("accumulate", "mask"),
    "quantize": ("bucket_scales", "codes", "decode"),
}
#: the functions a family offers on the CPU only
CPU_ONLY: dict[str, tuple[str, ...]] = {
    "topk": ("fold_topk_sampled",),
    "sparse": ("scatter_add_all",),
    "onebit": ("fold_quantize", "dequantize_add_all"),
    "adacomp": ("fold_select", "decode_add_all"),
}


def _check() -> None:
    for family, functions in FAMILIES.items():
        for device in ("cpu", "cuda"):
            module = importlib.import_module(f"{__name__}.{family}_{device}")
            offered = functions + (CPU_ONLY.get(family, ()) if device == "cpu" else ())
            missing = [f for f in offered if not callable(getattr(module, f, None))]
            if missing:
                raise ImportError(f"hvd_compress.kernels.{family}_{device} lacks {missing}, which "
                                  "kernels/__init__.py FAMILIES says both builds offer")


_check()
