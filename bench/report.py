"""Writes the README's result tables from bench/results/*.json, so no number is typed by hand.

    .venv/bin/python bench/report.py

Each table sits between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` in README.md; a
missing results file leaves its table as it is.
"""
import os
import re

from common import RESULTS, by_rate, load, longest_run, rate_label

README = os.path.join(os.path.dirname(RESULTS), "..", "README.md")


def kernels_table(result: dict) -> str:
    sizes = list(result["sizes"])
    head = "| compress + residual update | " + " | ".join(
        f"{int(n) / 1e6:g}M ms | vs copy_ | vs torch" for n in sizes) + " |"
    lines = [head, "|---" * (1 + 3 * len(sizes)) + "|"]
    references = {"TopK": "torch topk 1% + gather", "OneBit": "torch one-bit (masked means)",
                  "finite check + add, fused": "finite check + add, torch"}
    for label in result["sizes"][sizes[0]]["compress_ms"]:
        cells = []
        for n in sizes:
            rows = result["sizes"][n]["compress_ms"]
            ms = rows[label]
            ref = next((rows[r] for key, r in references.items() if label.startswith(key)), None)
            cells += [f"{ms:.2f}", f"{ms / rows['copy_ (bandwidth floor)']:.1f}x",
                      f"{ref / ms:.1f}x faster" if ref else ""]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", f"| decode + sum of {result['aggregated_ranks']} payloads | "
              + " | ".join(f"{int(n) / 1e6:g}M ms | payload bytes" for n in sizes) + " |",
              "|---" * (1 + 2 * len(sizes)) + "|"]
    for label, value in result["sizes"][sizes[0]]["decode_ms"].items():
        if label.endswith("payload bytes"):
            continue
        cells = []
        for n in sizes:
            d = result["sizes"][n]["decode_ms"]
            cells += [f"{d[label]:.2f}", f"{int(d[label + ' payload bytes']):,}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    m = result["machine"]
    lines += ["", f"Measured by `bench/kernels.py` on {m['cpus']} CPUs ({m['processor']}), "
              f"torch using {result['torch_threads']} threads; medians of 7 runs. Rows without "
              "\"serial build\" take the parallel kernel builds from 1M elements on; a rank that "
              "fills its host runs the serial ones."]
    return "\n".join(lines)


def wire_bytes_table(result: dict) -> str:
    groups = dict.fromkeys((c["model"], c["rate_mbit"]) for c in result["cells"].values())
    return "\n\n".join(_wire_bytes_of(result, model, rate) for model, rate in groups)


def _wire_bytes_of(result: dict, model: str, rate: float) -> str:
    cells = [c for c in result["cells"].values() if (c["model"], c["rate_mbit"]) == (model, rate)]
    sizes = sorted({c["np"] for c in cells})
    dense = {c["np"]: c["tx_bytes_per_step"] for c in cells if c["method"] == "none"}
    lines = ["| method | " + " | ".join(f"np={p} MB sent/step | fewer than dense | samples/s"
                                        for p in sizes) + " | np={0} / np={1} bytes |".format(sizes[-1], sizes[0]),
             "|---" * (2 + 3 * len(sizes)) + "|"]
    for method in dict.fromkeys(c["method"] for c in cells):
        row, sent = [], {}
        for p in sizes:
            cell = next((c for c in cells if c["method"] == method and c["np"] == p), None)
            if cell is None:
                row += ["", "", ""]
                continue
            sent[p] = cell["tx_bytes_per_step"]
            row += [f"{sent[p] / 1e6:.2f}", f"{dense[p] / sent[p]:.1f}x" if p in dense else "",
                    f"{cell['samples_per_s']:.1f}"]
        growth = f"{sent[sizes[-1]] / sent[sizes[0]]:.2f}x" if len(sent) == len(sizes) else ""
        lines.append(f"| `{method}` | " + " | ".join(row) + f" | {growth} |")
    lines += ["", f"Model `{model}`, links at {rate:g} Mbit/s, batch {cells[0].get('batch_size', 32)} "
              "per worker; bytes are each worker's interface tx counter (mean over workers), by "
              "`bench/wire_bytes.py`. The workers of a cell share 2 cores: compare samples/s within a "
              "column, not across world sizes."]
    return "\n".join(lines)


SCALE_FEWER_BYTES = {"topk:ratio=0.01": 40, "onebit": 25, "adacomp": 10}


def scale_targets_table(result: dict) -> str:
    """Issue 11's targets, per model, from the cells of bench/wire_bytes.py."""
    cells = {(c["model"], c["np"], c["method"]): c for c in result["cells"].values()}
    largest = max(c["np"] for c in result["cells"].values())
    lines = ["| model | method | np={0} / np=2 bytes (<= 1.3x) | fewer bytes than dense at np={0} | "
             "samples/s vs uncompressed at np={0} (>= 5x) | auto vs best forced route, np=4 / np={0} "
             "(>= 0.95x) |".format(largest), "|---" * 6 + "|"]
    for model in dict.fromkeys(c["model"] for c in result["cells"].values()):
        for method, fewer in SCALE_FEWER_BYTES.items():
            top, two, dense = (cells.get((model, largest, method)), cells.get((model, 2, method)),
                               cells.get((model, largest, "none")))
            if not (top and two and dense):
                continue
            growth = top["tx_bytes_per_step"] / two["tx_bytes_per_step"]
            saved = dense["tx_bytes_per_step"] / top["tx_bytes_per_step"]
            speed = top["samples_per_s"] / dense["samples_per_s"]
            auto = []
            for p in (4, largest):
                forced = [c["samples_per_s"] for (m, q, meth), c in cells.items()
                          if (m, q) == (model, p) and meth.startswith(method) and "communication=" in meth]
                if forced and (model, p, method) in cells:
                    auto.append(_mark(cells[model, p, method]["samples_per_s"] / max(forced), 0.95))
            lines.append(f"| {model} | `{method}` | {growth:.2f}x {'met' if growth <= 1.3 else '**not met**'} | "
                         + (_mark(saved, fewer) if model == "widemlp" else f"{saved:.3g}x")
                         + f" | {_mark(speed, 5)} | {' / '.join(auto)} |")
    return "\n".join(lines)


def cost_model_table(result: dict) -> str:
    """Predicted / measured, per method and cell, for bytes and for communication time."""
    lines = []
    for kind, target, what in [("bytes", 0.10, "bytes sent per worker and step"),
                               ("seconds", 0.25, "communication time per step at 100 Mbit/s")]:
        rows = [r for r in result["check"] if r["kind"] == kind]
        columns = list(dict.fromkeys((r["model"], r["np"]) for r in rows))
        lines += [f"| {what}: predicted / measured | " + " | ".join(f"{m} np={p}" for m, p in columns) + " |",
                  "|---" * (1 + len(columns)) + "|"]
        for method in dict.fromkeys(r["method"] for r in rows):
            cells = []
            for column in columns:
                r = next((r for r in rows if (r["model"], r["np"], r["method"]) == (*column, method)), None)
                if r is None or r["measured"] <= 0:
                    cells.append("" if r is None else "(not measurable)")
                    continue
                ratio = r["predicted"] / r["measured"]
                cells.append(f"{ratio:.2f}" + ("" if abs(ratio - 1) <= target else " *"))
            lines.append(f"| `{method}` | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(f"Per-collective overhead {result['overhead_s'] * 1e6:.0f} us and per-round latency "
                 f"{result['latency_s'] * 1e6:.0f} us, fitted by `bench/cost_model.py fit`; * marks a "
                 "cell outside the target (bytes within 10%, time within 25%). Measured time is the "
                 "step time at 100 Mbit/s less the unthrottled one, from `bench/results/throughput.json`.")
    return "\n".join(lines)


def small_tensors_table(result: dict) -> str:
    cells = sorted(result["cells"].values(), key=lambda c: c["min_numel"])
    lines = ["| min_numel | samples/s | MB sent/step |", "|---|---|---|"]
    lines += [f"| {c['min_numel']} | {c['samples_per_s']:.1f} | {c['tx_bytes_per_step'] / 1e6:.2f} |"
              for c in cells]
    lines += ["", f"ResNet-18, np=2, `{cells[0]['method']}`, links at {cells[0]['rate_mbit']:g} "
              "Mbit/s, by `bench/small_tensors.py`."]
    return "\n".join(lines)


def _mark(value: float, target: float) -> str:
    return f"{value:.3g}x {'met' if value >= target else '**not met**'}"


def _ours(method: str) -> bool:
    """An hvd_compress compressor, not Horovod's own nor a DDP hook."""
    return method not in ("none", "fp16") and not method.startswith("ddp:")


def _throughput_cells(result: dict) -> dict:
    return {(c["model"], c["np"], c["rate_mbit"], c["method"]): c for c in result["cells"].values()}


def throughput_table(result: dict) -> str:
    cells = _throughput_cells(result)
    models = list(dict.fromkeys(k[0] for k in cells))
    sizes = sorted({k[1] for k in cells})
    rates = sorted({k[2] for k in cells}, key=by_rate)
    methods = list(dict.fromkeys(k[3] for k in cells))
    out = []
    for model in models:
        columns = [(p, r) for p in sizes for r in rates]
        lines = ["| method | " + " | ".join(f"np={p} {rate_label(r)}" for p, r in columns)
                 + " | " + " | ".join(f"np={p} MB sent/step" for p in sizes) + " |",
                 "|---" * (1 + len(columns) + len(sizes)) + "|"]
        for method in methods:
            row = []
            for p, r in columns:
                cell, dense = cells.get((model, p, r, method)), cells.get((model, p, r, "none"))
                row.append("" if cell is None else f"{cell['samples_per_s']:.1f}" + (
                    f" ({cell['samples_per_s'] / dense['samples_per_s']:.1f}x)" if dense else ""))
            for p in sizes:
                cell = cells.get((model, p, rates[0], method))
                row.append("" if cell is None else f"{cell['tx_bytes_per_step'] / 1e6:.2f}")
            lines.append(f"| `{method}` | " + " | ".join(row) + " |")
        batch = next(c["batch_size"] for k, c in cells.items() if k[0] == model)
        lines += ["", f"`{model}`, batch {batch} per worker: samples/s of all workers (and "
                  f"the ratio to uncompressed Horovod in the same cell); MB sent per worker and "
                  f"step at {rate_label(rates[0])} (interface counters)."]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def throughput_targets_table(result: dict) -> str:
    """Issue 5's targets, np=2, ResNet-18: checked for each hvd_compress compressor."""
    cells = _throughput_cells(result)

    def ratio(rate, method, baseline):
        a, b = cells.get(("resnet18", 2, rate, method)), cells.get(("resnet18", 2, rate, baseline))
        return None if a is None or b is None else a["samples_per_s"] / b["samples_per_s"]

    targets = [(100, "none", 5.0), (100, "fp16", 2.5), (1000, "none", 1.5), (None, "none", 0.9)]
    lines = ["| compressor | " + " | ".join(f"{rate_label(r)} vs `{b}` (>= {t:g}x)" for r, b, t in targets)
             + " |", "|---" * (1 + len(targets)) + "|"]
    for method in dict.fromkeys(k[3] for k in cells):
        if not _ours(method):
            continue
        values = [ratio(r, method, b) for r, b, _ in targets]
        lines.append(f"| `{method}` | " + " | ".join(
            "not measured" if v is None else _mark(v, t) for v, (_, _, t) in zip(values, targets)) + " |")
    return "\n".join(lines)


def powersgd_table(result: dict) -> str:
    """Per cell, the fastest hvd_compress compressor against the fastest torch DDP hook."""
    cells = _throughput_cells(result)
    lines = ["| model | np | link | fastest hvd_compress | samples/s | fastest DDP hook | samples/s "
             "| hvd_compress / DDP |", "|---" * 8 + "|"]
    for key in dict.fromkeys(k[:3] for k in cells):
        ours = [c for k, c in cells.items() if k[:3] == key and _ours(k[3])]
        theirs = [c for k, c in cells.items() if k[:3] == key and k[3].startswith("ddp:")]
        if not ours or not theirs:
            continue
        a = max(ours, key=lambda c: c["samples_per_s"])
        b = max(theirs, key=lambda c: c["samples_per_s"])
        lines.append(f"| {key[0]} | {key[1]} | {rate_label(key[2])} | `{a['method']}` | "
                     f"{a['samples_per_s']:.1f} | `{b['method']}` | {b['samples_per_s']:.1f} | "
                     f"{a['samples_per_s'] / b['samples_per_s']:.2f}x |")
    return "\n".join(lines)


def convergence_table(result: dict) -> str:
    cells = longest_run(result)
    sizes = sorted({c["np"] for c in cells})
    final = {(c["np"], c["method"]): c["test_accuracy"][-1][1] for c in cells}
    lines = ["| method | error feedback | " + " | ".join(f"np={p} test accuracy | vs `none`" for p in sizes)
             + " | within 0.5 points of `none` |", "|---" * (3 + 2 * len(sizes)) + "|"]
    for method in dict.fromkeys(c["method"] for c in cells):
        feedback = next(c["error_feedback"] for c in cells if c["method"] == method)
        row, met = [], []
        for p in sizes:
            if (p, method) not in final:
                row += ["", ""]
                continue
            delta = final[(p, method)] - final.get((p, "none"), float("nan"))
            row += [f"{final[(p, method)]:.2f}%", f"{delta:+.2f}"]
            met.append(delta >= -0.5)
        target = ("n/a" if feedback is not True else
                  "met" if all(met) else "**not met**")
        lines.append(f"| `{method}` | {'-' if feedback is None else 'on' if feedback else 'off'} | "
                     + " | ".join(row) + f" | {target} |")
    c = cells[0]
    lines += ["", f"LeNet-5 on MNIST, {c['epochs']} epochs, seed {c['seed']}, batch 64 per worker, "
              "by `bench/convergence.py`; the target applies to the compressors with error feedback."]
    return "\n".join(lines)


PAPER_ADACOMP = {"conv": "about 40x", "fc": "about 200x"}


def adacomp_layers_table(result: dict) -> str:
    cells = [c for c in longest_run(result)
             if c["method"] == "adacomp" and "per_tensor" in c]
    if not cells:
        return "Not measured yet: run `bench/convergence.py`."
    lines = ["| layer | " + " | ".join(f"np={c['np']} fewer bytes than fp32" for c in cells)
             + " | paper (Chen et al. 2018) |", "|---" * (2 + len(cells)) + "|"]
    for layer in cells[0]["per_tensor"]:
        kind = "conv" if layer.startswith("conv") else "fc"
        lines.append(f"| `{layer}` | " + " | ".join(
            f"{c['per_tensor'][layer]['dense_bytes'] / c['per_tensor'][layer]['sent_bytes']:.1f}x"
            for c in cells) + f" | {PAPER_ADACOMP[kind]} ({kind}) |")
    return "\n".join(lines)


# README marker -> (results file, renderer)
TABLES = {"kernels": ("kernels", kernels_table), "wire_bytes": ("wire_bytes", wire_bytes_table),
          "scale_targets": ("wire_bytes", scale_targets_table),
          "cost_model": ("cost_model", cost_model_table),
          "small_tensors": ("small_tensors", small_tensors_table),
          "throughput": ("throughput", throughput_table),
          "throughput_targets": ("throughput", throughput_targets_table),
          "powersgd": ("throughput", powersgd_table),
          "convergence": ("convergence", convergence_table),
          "adacomp_layers": ("convergence", adacomp_layers_table)}


def render(text: str) -> str:
    """``text`` with every table between its markers regenerated from the results on disk."""
    for name, (results, table) in TABLES.items():
        result = load(results)
        if result is None:
            continue
        pattern = re.compile(rf"(<!-- bench:{name} -->\n).*?(<!-- /bench:{name} -->)", re.S)
        text = pattern.sub(lambda m: m.group(1) + table(result) + "\n" + m.group(2), text)
    return text


def main() -> None:
    with open(README) as f:
        text = f.read()
    with open(README, "w") as f:
        f.write(render(text))

if __name__ == "__main__":
    main()
