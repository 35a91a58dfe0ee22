"""Compression kernels: pure functions over numpy arrays (CPU, Numba) and CUDA device arrays.

No torch inside a kernel. Each kernel has a plain-numpy reference in ``tests/references.py``.

A family is two modules, ``NAME_cpu`` and ``NAME_cuda``. The CPU module declares ``SHARED``,
the functions both offer with the same arguments (CUDA ones take a ``stream=`` keyword more),
and ``CPU_ONLY``, the one-pass kernels a method uses on CPU tensors only
(``arrays.one_pass_cpu``). Methods reach them through ``arrays.kernels(NAME, like)``, which
picks the module for ``like``'s device and turns tensors into arrays and back: the one place a
gradient's walk crosses between torch and Numba. Every family found here is checked when the
package is imported: a CUDA twin that lacks a shared function is an ImportError, not a failure
on the first GPU step. A new family is its two files; nothing here changes.
"""
import importlib
import pkgutil


def families() -> list[str]:
    """The families: every ``NAME_cpu`` module with a ``SHARED`` table and a ``NAME_cuda`` twin."""
    names = {m.name for m in pkgutil.iter_modules(__path__)}
    return sorted(n[:-4] for n in names if n.endswith("_cpu") and f"{n[:-4]}_cuda" in names)


def _check() -> None:
    for family in families():
        cpu = importlib.import_module(f"{__name__}.{family}_cpu")
        cuda = importlib.import_module(f"{__name__}.{family}_cuda")
        for module, offered in ((cpu, cpu.SHARED + cpu.CPU_ONLY), (cuda, cpu.SHARED)):
            missing = [f for f in offered if not callable(getattr(module, f, None))]
            if missing:
                raise ImportError(f"{module.__name__} lacks {missing}, which {family}_cpu's "
                                  "SHARED/CPU_ONLY tables say it offers")


_check()
