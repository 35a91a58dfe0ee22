"""Checking a compressor's constructor arguments, and the settings it reads from the
environment: every bad argument gets a ValueError naming it, what is allowed and what was given.
"""
import functools
import importlib.util
import os
from typing import Any

#: the ``communication=`` choices every method takes (communication/route.py); a method whose
#: payloads travel one way only declares its own (``Compressor.ROUTES``)
ROUTES = ("auto", "allgather", "twophase", "hierarchical", "hierarchical_compressed", "dense")


def require(ok: bool, argument: str, allowed: str, value: Any) -> None:
    """Raises the ValueError a bad constructor argument gets: its name, what is allowed, what
    was given."""
    if not ok:
        raise ValueError(f"{argument} must be {allowed}, got {value!r}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def one_of(argument: str, value: Any, allowed: tuple) -> None:
    require(value in allowed, argument, f"one of {allowed}", value)


def ratio(value: Any) -> None:
    """A fraction of entries to send: in (0, 1] (NaN fails the comparison too)."""
    require(is_number(value) and 0 < value <= 1, "ratio", "a number in (0, 1]", value)


def default_link_gbit() -> float | None:
    """The link rate ``communication="auto"`` plans for when a compressor is built without
    ``link_gbit``: ``HVD_COMPRESS_LINK_GBIT`` from the environment (so a job launched with
    ``horovodrun -x HVD_COMPRESS_LINK_GBIT=10`` plans for 10 Gbit/s without a change to the
    script), else None: measured on the cluster (communication/planner.py). A compressor's
    spec() carries what it was built with, so ranks that disagree are caught by the agreement
    check."""
    value = os.environ.get("HVD_COMPRESS_LINK_GBIT")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"HVD_COMPRESS_LINK_GBIT must be a number > 0, got {value!r}") from None


@functools.cache
def horovod_installed() -> bool:
    """Whether Horovod can be imported here: without it the package serves torch DDP only
    (ddp.py), and Horovod's front door (horovod_hook.py, elastic.py) is not installed."""
    return importlib.util.find_spec("horovod") is not None


def position() -> tuple[int | None, int | None]:
    """(rank, world size): Horovod's when Horovod is initialized, else torch.distributed's
    default group's when it is (a DDP job), else (None, None)."""
    if horovod_installed():
        import horovod.torch as hvd

        if hvd.is_initialized():
            return hvd.rank(), hvd.size()
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None, None
