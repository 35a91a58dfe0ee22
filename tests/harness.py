"""Runs a function on N Horovod workers over gloo on localhost and returns each rank's result.

Workers unpickle the function, and pytest's rootdir is not on their path: ``run_workers`` pickles
the caller's module by value and puts ``tests/`` and ``examples/`` on the workers' PYTHONPATH.
"""
import hashlib
import inspect
import os
import threading

import cloudpickle
import horovod
import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER_PATH = [os.path.join(REPO, "tests"), os.path.join(REPO, "examples")]


def launched() -> list[psutil.Process]:
    """This process's living descendants except multiprocessing's resource tracker, which is
    pytest's own: the launcher's helpers and the workers."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def run_workers(fn, num_proc: int, *args, timeout: float = 600, nodes: int = 1) -> list:
    """``fn(*args)`` on ``num_proc`` workers; their results in rank order. ``nodes=2`` splits
    them into two nodes as Horovod sees them (local_rank, cross_rank): "localhost" and
    "127.0.0.1" are two hosts to Horovod's launcher and both this machine.

    A launch that outlives ``timeout`` seconds (a hang: every launch here takes well under a
    minute) has its worker processes killed and raises TimeoutError, so that a regression to a
    deadlock fails the test instead of stalling the suite until CI's limit. The watchdog is a
    thread that kills this process's descendants: ``horovod.run`` must stay on the main thread
    (it installs signal handlers), and workers outlive a killed pytest."""
    cloudpickle.register_pickle_by_value(inspect.getmodule(fn))
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    os.environ["PYTHONPATH"] = os.pathsep.join(WORKER_PATH + [p for p in path if p and p not in WORKER_PATH])
    finished, timed_out = threading.Event(), threading.Event()

    def watchdog() -> None:
        if not finished.wait(timeout):
            timed_out.set()
            for child in launched():
                child.kill()

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        per_node = num_proc // nodes
        hosts = ",".join(f"{host}:{per_node}" for host in ("localhost", "127.0.0.1")[:nodes])
        return horovod.run(fn, args=args, num_proc=num_proc, use_gloo=True, hosts=hosts)
    except Exception as err:
        if timed_out.is_set():
            raise TimeoutError(f"{fn.__name__} on {num_proc} workers ran past {timeout} s "
                               "(a hang?); its workers were killed") from err
        raise
    finally:
        finished.set()


def parameters_digest(model) -> str:
    """A bitwise fingerprint of a model's parameters."""
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()
