"""Writes the README's result tables from bench/results/*.json, so no number is typed by hand.

    .venv/bin/python bench/report.py

Each table sits between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` in README.md; a
missing results file leaves its table as it is.
"""
import json
import os
import re

from common import RESULTS

README = os.path.join(os.path.dirname(RESULTS), "..", "README.md")


def _load(name: str):
    path = os.path.join(RESULTS, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def kernels_table(result: dict) -> str:
    sizes = list(result["sizes"])
    head = "| compress + residual update | " + " | ".join(
        f"{int(n) / 1e6:g}M ms | vs copy_ | vs torch" for n in sizes) + " |"
    lines = [head, "|---" * (1 + 3 * len(sizes)) + "|"]
    references = {"TopK": "torch topk 1% + gather", "OneBit": "torch one-bit (masked means)"}
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
              f"torch using {result['torch_threads']} threads; medians of 7 runs."]
    return "\n".join(lines)


def wire_bytes_table(result: dict) -> str:
    rates = sorted({c["rate_mbit"] for c in result["cells"].values()}, reverse=True)
    return "\n\n".join(_wire_bytes_at(result, rate) for rate in rates)


def _wire_bytes_at(result: dict, rate: float) -> str:
    cells = [c for c in result["cells"].values() if c["rate_mbit"] == rate]
    sizes = sorted({c["np"] for c in cells})
    dense = {c["np"]: c["tx_bytes_per_step"] for c in result["cells"].values() if c["method"] == "none"}
    lines = ["| method | " + " | ".join(f"np={p} MB sent/step | fewer than dense | samples/s"
                                        for p in sizes) + " |",
             "|---" * (1 + 3 * len(sizes)) + "|"]
    for method in dict.fromkeys(c["method"] for c in cells):
        row = []
        for p in sizes:
            cell = next((c for c in cells if c["method"] == method and c["np"] == p), None)
            row += (["", "", ""] if cell is None else
                    [f"{cell['tx_bytes_per_step'] / 1e6:.2f}",
                     f"{dense[p] / cell['tx_bytes_per_step']:.1f}x",
                     f"{cell['samples_per_s']:.0f}"])
        lines.append(f"| `{method}` | " + " | ".join(row) + " |")
    first = cells[0]
    lines += ["", f"Model `{first['model']}`, links at {first['rate_mbit']:g} Mbit/s; bytes are "
              "each worker's interface tx counter (mean over workers), by `bench/wire_bytes.py`."]
    return "\n".join(lines)


def small_tensors_table(result: dict) -> str:
    cells = sorted(result["cells"].values(), key=lambda c: c["min_numel"])
    lines = ["| min_numel | samples/s | MB sent/step |", "|---|---|---|"]
    lines += [f"| {c['min_numel']} | {c['samples_per_s']:.1f} | {c['tx_bytes_per_step'] / 1e6:.2f} |"
              for c in cells]
    lines += ["", f"ResNet-18, np=2, `{cells[0]['method']}`, links at {cells[0]['rate_mbit']:g} "
              "Mbit/s, by `bench/small_tensors.py`."]
    return "\n".join(lines)


TABLES = {"kernels": kernels_table, "wire_bytes": wire_bytes_table,
          "small_tensors": small_tensors_table}


def main() -> None:
    with open(README) as f:
        text = f.read()
    for name, render in TABLES.items():
        result = _load(name)
        if result is None:
            continue
        pattern = re.compile(rf"(<!-- bench:{name} -->\n).*?(<!-- /bench:{name} -->)", re.S)
        text = pattern.sub(lambda m: m.group(1) + render(result) + "\n" + m.group(2), text)
    with open(README, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
