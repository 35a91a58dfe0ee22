"""What every bench shares: where results go and what machine produced them."""
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from typing import Callable

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def machine() -> dict:
    return {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version()}


class ResultCache:
    """Results keyed by configuration, saved after each cell: an interrupted sweep re-run
    skips the finished cells."""

    def __init__(self, name: str, fresh: bool = False) -> None:
        self.path = os.path.join(RESULTS, f"{name}.json")
        self.data = {"machine": machine(), "cells": {}}
        if os.path.exists(self.path) and not fresh:
            with open(self.path) as f:
                self.data = json.load(f)

    def get(self, key: str):
        return self.data["cells"].get(key)

    def put(self, key: str, value) -> None:
        self.data["cells"][key] = value
        os.makedirs(RESULTS, exist_ok=True)
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(self.path + ".tmp", self.path)

    def sweep(self, cells: dict[str, Callable[[], dict]], show: Callable[[dict], str]) -> None:
        """Measures each cell not yet on record, in order, with a progress bar; each result is
        saved as soon as it is measured."""
        for done, (key, measure) in enumerate(cells.items()):
            progress(done, len(cells), key)
            if self.get(key) is None:
                self.put(key, measure())
            print("    " + show(self.get(key)), flush=True)
        progress(len(cells), len(cells), "done")


def launch_metrics(workers: int, argv: list[str], timeout: float = 3600, ddp: bool = False) -> dict:
    """Runs a training script (``argv``: its path and options, without ``--metrics``) on
    ``workers`` gloo ranks of this machine, under horovodrun or, with ``ddp``, torchrun, and
    returns what its rank 0 wrote with ``--metrics``, plus the run's wall-clock seconds (start-up
    and evaluation included)."""
    scripts = os.path.dirname(sys.executable)
    launcher = ([os.path.join(scripts, "torchrun"), "--standalone", "--nproc_per_node", str(workers)] if ddp else
                [os.path.join(scripts, "horovodrun"), "-np", str(workers), "-H", f"localhost:{workers}", "--gloo",
                 sys.executable])
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.json")
        started = time.perf_counter()
        run = subprocess.run([*launcher, *argv, "--metrics", metrics], capture_output=True, text=True,
                             timeout=timeout)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} at np={workers} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        with open(metrics) as f:
            result = json.load(f)
    result["wall_s"] = time.perf_counter() - started
    return result


def load(name: str) -> dict | None:
    """bench/results/NAME.json, or None if that bench has not run."""
    path = os.path.join(RESULTS, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def with_option(spec: str, option: str) -> str:
    """``spec`` with ``option`` ("KEY=VALUE") added: "topk:ratio=0.01" -> "topk:ratio=0.01,KEY=VALUE"."""
    return f"{spec}{',' if ':' in spec else ':'}{option}"


def ddp_own(method: str) -> bool:
    """Whether a bench method is one of torch DDP's own hooks (bench/ddp_worker.py: ``ddp:fp16``,
    ``ddp:allreduce``, ``ddp:powersgd:RANK``), not an hvd_compress spec run as a DDP hook
    (``ddp:topk:ratio=0.01``)."""
    hook = method[len("ddp:"):] if method.startswith("ddp:") else None
    return hook is not None and (hook in ("allreduce", "fp16") or
                                 (hook.startswith("powersgd:") and hook[len("powersgd:"):].isdigit()))


def rate_label(rate_mbit: float | None) -> str:
    """A link rate of the simulated cluster; None is an unthrottled link."""
    return "unthrottled" if rate_mbit is None else f"{rate_mbit:g} Mbit/s"


def by_rate(rate_mbit: float | None) -> float:
    """Sort key: slowest link first, unthrottled last."""
    return float("inf") if rate_mbit is None else rate_mbit


def longest_run(result: dict) -> list[dict]:
    """The cells of the longest convergence run on record (a --quick run's one-epoch cells are
    kept apart from the full run's)."""
    epochs = max(c["epochs"] for c in result["cells"].values())
    return [c for c in result["cells"].values() if c["epochs"] == epochs]


def progress(done: int, total: int, label: str) -> None:
    bar = "#" * (20 * done // total)
    print(f"[{bar:20s}] {done}/{total} {label}", flush=True)
