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


def _ptb_run(method: str, seed: int, perplexities: list[float]) -> dict:
    return {"workload": "ptb", "np": 4, "rate_mbit": 100, "options": [], "method": method, "seed": seed,
            "valid_perplexity": [(i, p) for i, p in enumerate(perplexities)],
            "train_seconds": [(i, 10.0 * (i + 1)) for i in range(len(perplexities))]}


def test_time_to_accuracy_takes_the_median_over_seeds():
    import time_to_accuracy as tta

    cell = [_ptb_run("none", 42, [900, 600]), _ptb_run("none", 43, [900, 640]), _ptb_run("none", 44, [900, 700]),
            _ptb_run("topk", 42, [650, 600]), _ptb_run("topk", 43, [700, 660]), _ptb_run("topk", 44, [800, 700])]
    assert abs(tta.quality_target(cell[0], cell) - 640 * 1.05) < 1e-9  # 5% above none's median
    topk = tta.summary("topk", cell)
    # seconds to 672: 10, 20 and never: the median run reached it at 20 s
    assert topk == {"seconds": 20.0, "final": 660, "low": 600, "high": 700, "runs": 3}
    assert tta.summary("none", cell)["seconds"] == 20.0  # 600 and 640 meet 672 at the second point
    cell[4]["valid_perplexity"][-1] = (1, 690)  # now two of three runs never reach the target
    assert tta.summary("topk", cell)["seconds"] is None
    assert tta.summary("powersgd", cell) is None


def _quality_run(method: str, seed: int, perplexities: list[float]) -> dict:
    return {"model": "lstm", "np": 4, "method": method, "seed": seed, "options": ["--epochs", "2"], "quick": False,
            "steps_per_epoch": 100, "valid_perplexity": [(0.5 * (i + 1), p) for i, p in enumerate(perplexities)],
            "test_perplexity": [(2, perplexities[-1] * 0.97)]}


def test_converged_quality_reads_steps_and_targets():
    import quality

    # the example's own count: 8 streams a worker at np=4, 35 words a step, over 2% of the text
    sys.path.insert(0, os.path.join(REPO, "examples"))
    from ptb_data import load_ptb, shard_columns

    text = load_ptb()[1]["train"]
    columns = shard_columns(text[:int(0.02 * len(text))], 0, 4, 8)
    assert quality.steps_per_epoch(quality.QUICK) == len(list(range(0, len(columns) - 1, 35)))
    runs = [_quality_run("none", 42, [300, 200, 150, 140]), _quality_run("none", 43, [300, 210, 160, 150]),
            _quality_run("none", 44, [300, 220, 170, 160]), _quality_run("adacomp", 42, [400, 250, 170, 152]),
            _quality_run("topk:ratio=0.001", 42, [400, 250, 160, 156]), _quality_run("ddp:adacomp", 42, [400, 250, 170, 148])]
    assert quality.median_run(runs[:3])["seed"] == 43
    assert quality.steps_to(runs[3], 153) == 200 and quality.steps_to(runs[3], 151) is None
    table = report.quality_table({"cells": {str(i): r for i, r in enumerate(runs)}})
    # none's median final is 150: AdaComp's 152 is within 3%, TopK 0.1%'s 156 within its 5%
    assert "| LSTM | `none` | 3 | loopback | 150.0 [140.0-160.0] |" in table
    assert "1.013x (<= 1.03x: met) | 200 | 200 |  |" in table  # 153 (150 + 2%) first met at its end
    assert "0.987x (<= 1.03x: met) | 200 | 200 | 0.974x |" in table  # the DDP hook beside Horovod's AdaComp
    assert "1.040x (<= 1.05x: met)" in table
    # time to quality, computed: steps to 153 x the step on the simulated link
    cells = {str(i): r for i, r in enumerate(runs + [_quality_run("fp16", 42, [300, 200, 155, 150])])}
    for method, step_s in (("none", 2.0), ("fp16", 1.0), ("adacomp", 0.2), ("ddp:adacomp", 0.1)):
        cells[f"step {method}"] = {"kind": "step", "method": method, "rate_mbit": 100, "step_s": step_s}
    cells["check"] = {"kind": "check", "method": "none", "rate_mbit": 100, "points": [(80, 175.0), (160, 343.0)]}
    table = report.time_to_quality_table({"cells": cells})
    assert "| `none` | *400* |  | 0.50x | *400* |" in table  # 200 steps of 2 s, computed (italics)
    # the best method (the DDP hook, 200 steps of 0.1 s) carries the targets' marks, the others ratios
    assert "| `ddp:adacomp` | *20* | 20x met | 10x met | *20* |" in table
    assert "| `adacomp` | *40* | 10.00x | 5.00x | *40* |" in table
    assert "| `topk:ratio=0.001` |  |  |  |  |" in table  # not timed
    # the second half's 80 steps took 168 s, 160 s computed; the first half 15 s more than computed
    assert "| 100 Mbit/s | `none`, first steps | 80 | 168.0 | 160.0 | 1.05 (met) | 15.0 |  |" in table
    # a run that trained on the simulated link: its own clock, not steps x step time, and checked whole
    # (half-epochs of 50 steps: 9 s, then 5, 5, 5 against 50 x 0.2 = 10 s computed)
    cells[str(3)] = {**cells[str(3)], "rate_mbit": 100, "steps_per_epoch": 100,
                     "train_seconds": [(0.5, 9.0), (1.0, 14.0), (1.5, 19.0), (2.0, 24.0)]}
    table = report.time_to_quality_table({"cells": cells})
    assert "| `adacomp` | 24 | 16.67x | 8.33x | 24 |" in table  # 153 first met at the end, 24 s
    assert "| 100 Mbit/s | `adacomp`, whole run | 200 | 24.0 | 40.0 | 0.60 (**not met**) | 4.0 | 0.50 (slowest: 1.8x the median) |" in table
    # a second model: a section of its own, from its own runs and step cells
    for method, step_s in (("none", 3.0), ("onebit", 1.0)):
        cells[f"transformer {method}"] = {**_quality_run(method, 42, [500, 300, 200, 180]), "model": "transformer"}
        cells[f"transformer step {method}"] = {"kind": "step", "model": "transformer", "method": method,
                                               "rate_mbit": 100, "step_s": step_s}
    table = report.time_to_quality_table({"cells": cells})
    lstm, transformer = table.split("TRANSFORMER:")
    assert lstm.startswith("LSTM:") and "| `adacomp` | 24 |" in lstm and "`onebit`" not in lstm
    assert "| `none` | *600* |" in transformer and "| `onebit` | *200* | 3x met |" in transformer
    # no compressed method ever reaches none's final +2%: the targets are not met, on the first one
    cells["transformer onebit"]["valid_perplexity"][-1] = (2.0, 190)
    transformer = report.time_to_quality_table({"cells": cells}).split("TRANSFORMER:")[1]
    assert "| `onebit` | never | never (**not met**) | never (**not met**) |" in transformer


def test_converged_quality_counts_the_steps_a_run_sent_compressed():
    import quality

    sys.path.insert(0, os.path.join(REPO, "examples"))
    from ptb_data import load_ptb

    steps = quality.steps_per_epoch(quality.QUICK) * 2  # QUICK trains 2 epochs
    table = len(load_ptb()[0]) * 128  # the example's embedding and softmax weights at its default width
    run = {"options": quality.QUICK, "steps_per_epoch": steps // 2, "per_tensor": {
        "embedding.weight": {"dense_bytes": 4 * table * steps, "sent_bytes": 1},  # every step
        "softmax.weight": {"dense_bytes": 4 * table * steps // 2, "sent_bytes": 1}}}  # half of them
    assert abs(quality.compressed_share(run) - 0.75) < 1e-6
    # the transformer's tensors, sized from its own example: 64 words a step, the tied embedding
    options = quality.TRANSFORMER_QUICK
    steps = quality.steps_per_epoch(options) * 2
    run = {"model": "transformer", "options": options, "steps_per_epoch": steps // 2, "per_tensor": {
        "embedding.weight": {"dense_bytes": 4 * len(load_ptb()[0]) * 256 * steps, "sent_bytes": 1},
        "position.weight": {"dense_bytes": 0, "sent_bytes": 1}}}  # 64 x 256, never compressed
    share = quality.compressed_share(run)
    assert abs(share - 2_560_000 / (2_560_000 + 64 * 256)) < 1e-6
    assert quality.compressed_share({"per_tensor": {}}) is None  # Horovod's own: nothing to count
    assert quality.train_rate("none") is None and quality.train_rate("fp16") is None


def _cell(method: str, samples_per_s: float, run: int) -> dict:
    return {"model": "lenet5", "np": 2, "rate_mbit": None, "method": method, "batch_size": 8, "run": run,
            "samples_per_s": samples_per_s, "tx_bytes_per_step": 0.0, "plan": {"chosen": 0}}


def test_throughput_cells_launched_several_times_read_their_median_launch():
    runs = {"none": [5000, 4100, 6800], "onebit": [4900, 5200, 2500, 5000], "adacomp": [3500, 2500, 3000]}
    result = {"cells": {f"{m}|{i}": _cell(m, s, i) for m, speeds in runs.items() for i, s in enumerate(speeds)}}
    cells = report._throughput_cells(result)
    none, onebit = cells["lenet5", 2, None, "none"], cells["lenet5", 2, None, "onebit"]
    assert none["samples_per_s"] == 5000 and none["launches"] == [4100, 5000, 6800]
    assert onebit["samples_per_s"] == 4900  # the lower middle launch of an even count
    table = report.auto_targets_table(result)
    assert "| lenet5, `onebit` | 0.98x met (dense) |" in table
    assert "medians of 3 or 4 launches a cell" in table and "spread by up to 66%" in table
    assert "| lenet5, `adacomp` | 0.6x **not met** (dense; launches 2500-3500 vs 4100-6800 samples/s) |" in table
    single = {"cells": {"a": _cell("none", 5000, 0), "b": _cell("onebit", 4000, 0)}}
    assert "launches" not in report._throughput_cells(single)["lenet5", 2, None, "none"]
    assert "one launch a cell" in report.auto_targets_table(single)
