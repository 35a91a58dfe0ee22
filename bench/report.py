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


TABLES = {"kernels": kernels_table}


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
