"""Runs a function on N Horovod workers over gloo on localhost and returns each rank's result.

Workers unpickle the function, and pytest's rootdir is not on their path: ``run_workers`` pickles
the caller's module by value and puts ``tests/`` and ``examples/`` on the workers' PYTHONPATH.
"""
import hashlib
import inspect
import os

import cloudpickle
import horovod

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER_PATH = [os.path.join(REPO, "tests"), os.path.join(REPO, "examples")]


def run_workers(fn, num_proc: int, *args) -> list:
    cloudpickle.register_pickle_by_value(inspect.getmodule(fn))
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    os.environ["PYTHONPATH"] = os.pathsep.join(WORKER_PATH + [p for p in path if p and p not in WORKER_PATH])
    return horovod.run(fn, args=args, num_proc=num_proc, use_gloo=True,
                       hosts=f"localhost:{num_proc}")


def parameters_digest(model) -> str:
    """A bitwise fingerprint of a model's parameters."""
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()
