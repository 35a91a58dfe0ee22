"""The examples and the benchmarks' workers run as documented, and the README's result tables
are what bench/report.py generates from bench/results (no number typed by hand)."""
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
sys.path.insert(0, os.path.join(REPO, "bench"))
import report  # noqa: E402

SMALL = ["--model", "lenet5", "--batch-size", "4", "--num-warmup-batches", "1", "--num-iters", "2"]


def _run(command: list[str]) -> str:
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def test_synthetic_benchmark_example_under_horovodrun():
    out = _run([os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo",
                sys.executable, "examples/pytorch_synthetic_benchmark.py", *SMALL,
                "--compression", "onebit"])
    assert "lenet5, batch 4 per worker, 2 workers:" in out and "samples/s" in out


def test_ddp_peer_with_powersgd_under_torchrun():
    # --standalone: a free port of its own (the default 29500 may still be held by an earlier test)
    out = _run([os.path.join(BIN, "torchrun"), "--standalone", "--nproc_per_node", "2", "bench/ddp_worker.py",
                *SMALL, "--num-warmup-batches", "2", "--hook", "powersgd:1", "--json"])
    # both ranks share torchrun's stdout, so their lines may land on one line
    decoder = json.JSONDecoder()
    reports = [decoder.raw_decode(out, m.start())[0] for m in re.finditer(r'\{"rank"', out)]
    assert sorted(r["rank"] for r in reports) == [0, 1]
    assert all(r["size"] == 2 and r["samples_per_s"] > 0 for r in reports)


def test_readme_tables_are_generated_from_the_results():
    with open(report.README) as f:
        readme = f.read()
    assert report.render(readme) == readme, "README tables are stale: run bench/report.py"
