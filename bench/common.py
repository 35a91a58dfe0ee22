"""What every bench shares: where results go and what machine produced them."""
import json
import os
import platform

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def machine() -> dict:
    return {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version()}


class ResultCache:
    """Results keyed by configuration, saved after each cell: an interrupted sweep re-run
    skips the finished cells."""

    def __init__(self, name: str) -> None:
        self.path = os.path.join(RESULTS, f"{name}.json")
        self.data = {"machine": machine(), "cells": {}}
        if os.path.exists(self.path):
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


def progress(done: int, total: int, label: str) -> None:
    bar = "#" * (20 * done // total)
    print(f"[{bar:20s}] {done}/{total} {label}", flush=True)
