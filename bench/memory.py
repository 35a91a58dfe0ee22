"""Memory: each method's peak resident memory on one large layer, over uncompressed Horovod's.

    .venv/bin/python bench/memory.py            # every method of the catalogue
    .venv/bin/python bench/memory.py --quick    # `none` and the five methods issue 30 names

Each cell launches ``horovodrun -np 2 -H localhost:2 --gloo`` (plain loopback: no simulated
cluster, no root) on bench/memory_worker.py: one nn.Linear(10000, 5000) (50M elements, a
190.7 MB fp32 gradient), plain SGD (momentum 0; DGC brings its own), 6 steps after a warm-up
of the same size. A rank's peak is the high-water mark of its resident set during the steps
above its RSS just before them (the parameter and everything imported are there already);
a method's cost is its peak minus `none`'s, rank by rank. Blocks of 1 MB and up are mapped
and unmapped by glibc as they are allocated and freed (``MALLOC``), so the resident set is
what is alive, not what the allocator kept. Rank 0's input is sparse (a bag-of-words layer:
under 1% of its gradient nonzero), which makes TopK's sampled selection fall back to the
exact one there every step, as issue 30 found on one rank; rank 1's is Gaussian.
memory_worker.py has the details, and each phase's own peak (``phases`` in the results),
which is how the causes were found.

Writes bench/results/memory.json (cached per cell: a re-run skips finished cells; --fresh
starts over); bench/report.py turns it into the table in docs/benchmarks.md. The budget (issue 30): one
gradient-sized buffer, the residual (every compressor keeps one, error feedback on or off),
one more for DGC's velocity and Signum's momentum, and payload-sized buffers:
``PAYLOADS_PER_RANK`` payloads of the larger rank's size (a rank's encoded parts and its framed
payload), every rank's payload once gathered, and ``SLACK_OF_GRADIENT`` of a gradient for bit
masks and bookkeeping. Payloads are the largest a rank sent for the layer in a step.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ResultCache  # noqa: E402

REPO = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "memory_worker.py")
METHODS = ["none", "fp16", "topk", "topk:selection=exact", "onebit", "adacomp", "powersgd", "dgc",
           "randomk", "threshold", "signsgd", "signum", "efsignsgd", "qsgd", "terngrad", "u8bit",
           "natural"]
QUICK = ["none", "onebit", "adacomp", "powersgd", "topk", "dgc"]
WORKERS = 2
#: payload-sized buffers a rank may hold at once besides the p it receives: its encoded parts
#: and its framed payload
PAYLOADS_PER_RANK = 2
#: bit masks (AdaComp's n/8 bytes), per-chunk counts, small tensors: a fraction of a gradient
SLACK_OF_GRADIENT = 1 / 16
MB = 1 << 20
#: glibc malloc serves every block from 1 MB up with its own mmap and unmaps it when freed, so
#: the resident set follows what is alive. Its default raises that threshold to the size of the
#: last block freed (up to 32 MB), and freed payload-sized blocks then stay in the heap, a few
#: MB more each step in an order that depends on the threads (measured: OneBit's rank 0 grew
#: 36 MB over 6 steps, rank 1 7 MB).
MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}


def measure(method: str, rows: int, cols: int, steps: int, batch_size: int) -> dict:
    """One cell: both ranks' reports (memory_worker.py)."""
    with tempfile.TemporaryDirectory() as out:
        command = [os.path.join(os.path.dirname(sys.executable), "horovodrun"), "-np", str(WORKERS),
                   "-H", f"localhost:{WORKERS}", "--gloo", sys.executable, WORKER, "--method", method,
                   "--rows", str(rows), "--cols", str(cols), "--steps", str(steps),
                   "--batch-size", str(batch_size), "--out", out]
        run = subprocess.run(command, capture_output=True, text=True, timeout=1200, cwd=REPO,
                             env={**os.environ, **MALLOC})
        if run.returncode != 0:  # the workers' own output names the cause; horovodrun's does not
            lines = (run.stdout + run.stderr).splitlines()
            worker = [line for line in lines if "]<stderr>:" in line] or lines
            raise RuntimeError(f"{method}: horovodrun failed\n" + "\n".join(worker[-40:]))
        ranks = []
        for rank in range(WORKERS):
            with open(os.path.join(out, f"rank{rank}.json")) as f:
                ranks.append(json.load(f))
    return {"method": method, "rows": rows, "cols": cols, "np": WORKERS, "steps": steps,
            "batch_size": batch_size, "ranks": ranks}


def state_gradients(method: str) -> int | None:
    """Gradient-sized buffers ``method`` may keep (issue 30): the residual, and DGC's velocity
    or Signum's momentum; None for Horovod's own compressors, which are not ours to budget."""
    import hvd_compress
    from hvd_compress.compressor import Compressor

    compressor = hvd_compress.from_spec(method)
    if not isinstance(compressor, Compressor):
        return None
    kind = type(compressor).__name__
    momentum = kind in ("DGC", "SignSGD", "Signum") and (
        getattr(compressor, "momentum", 0) or getattr(compressor, "clip_norm", None) is not None)
    return 1 + bool(momentum)


def over_none(result: dict, cell: dict) -> list[float | None]:
    """Per rank: the cell's peak above its pre-step RSS minus `none`'s, in bytes (None when
    `none` was not measured at that size)."""
    dense = next((c for c in result["cells"].values() if c["method"] == "none"
                  and (c["rows"], c["cols"], c["steps"]) == (cell["rows"], cell["cols"], cell["steps"])), None)
    if dense is None:
        return [None] * len(cell["ranks"])
    return [(r["peak_rss"] - r["base_rss"]) - (d["peak_rss"] - d["base_rss"])
            for r, d in zip(cell["ranks"], dense["ranks"])]


def budget(cell: dict) -> tuple[float, str] | None:
    """(bytes, how they add up) the method may use over `none` on either rank; None for
    Horovod's own compressors."""
    states = state_gradients(cell["method"])
    if states is None:
        return None
    gradient = cell["ranks"][0]["gradient_bytes"]
    payloads = [r["payload_bytes_per_step"] or 0 for r in cell["ranks"]]
    # a rank holds its own parts and framed payload, and every rank's payload once gathered
    allowed = PAYLOADS_PER_RANK * max(payloads) + sum(payloads)
    slack = SLACK_OF_GRADIENT * gradient
    return (states * gradient + allowed + slack,
            f"{states} x {gradient / MB:.1f} + {allowed / MB:.1f} + {slack / MB:.1f}")


def show(cell: dict) -> str:
    gradient = cell["ranks"][0]["gradient_bytes"]
    return "  ".join(f"rank {r['rank']}: peak {(r['peak_rss'] - r['base_rss']) / MB:.0f} MB above "
                     f"{r['base_rss'] / MB:.0f} MB ({(r['peak_rss'] - r['base_rss']) / gradient:.2f} "
                     f"gradients), exact selections {r['exact_selections']}" for r in cell["ranks"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="none, onebit, adacomp, powersgd, topk, dgc")
    parser.add_argument("--fresh", action="store_true", help="ignore cached cells")
    parser.add_argument("--methods", nargs="+", default=None, metavar="SPEC")
    parser.add_argument("--rows", type=int, default=5000, help="out_features")
    parser.add_argument("--cols", type=int, default=10000, help="in_features")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8, help="per worker")
    args = parser.parse_args()
    methods = args.methods or (QUICK if args.quick else METHODS)
    if "none" not in methods:
        methods = ["none", *methods]  # the baseline every method is read against
    cells = {f"linear{args.cols}x{args.rows}|np={WORKERS}|{method}|steps={args.steps}|batch={args.batch_size}":
             lambda method=method: measure(method, args.rows, args.cols, args.steps, args.batch_size)
             for method in methods}
    ResultCache("memory", args.fresh).sweep(cells, show)


if __name__ == "__main__":
    main()
