import os
import shutil

# Without a GPU, CUDA kernels run under Numba's simulator; it must be chosen before Numba loads.
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

# The tests' tensors are small (thousands of elements), and on a 1 Gbit/s link communication="auto"
# sends such tensors dense (route.py): plan for a slow link so that they are compressed. Every
# test that spawns workers hands them this environment; tests/test_route.py plans for the default.
os.environ["HVD_COMPRESS_LINK_GBIT"] = "0.01"

import numpy as np
import pytest

# Inputs every kernel is checked on: random ones and the adversarial cases.
ADVERSARIAL = {
    "zeros": np.zeros(1000, np.float32),
    "ties": np.repeat(np.float32([1.0, -1.0, 0.5]), 337),
    "one_huge": np.where(np.arange(1001) == 500, np.float32(3e38), np.float32(1e-3)).astype(np.float32),
    "negative_zero": np.full(777, -0.0, np.float32),
    "denormals": (np.arange(1, 1030) * np.float32(1e-45)).astype(np.float32),
    "length_1": np.float32([-2.5]),
    "odd_length": np.random.default_rng(1).standard_normal(1237).astype(np.float32),
}


@pytest.fixture(params=sorted(ADVERSARIAL) + ["random_big"])
def vector(request) -> np.ndarray:
    if request.param == "random_big":
        return np.random.default_rng(0).standard_normal(300_001).astype(np.float32)
    return ADVERSARIAL[request.param].copy()
