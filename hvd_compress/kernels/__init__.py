"""Compression kernels: pure functions over numpy arrays (CPU, Numba) and CUDA device arrays.

No torch inside a kernel. Each kernel has a plain-numpy reference in ``tests/references.py``.
"""
