"""Render locust's ``<prefix>_stats.csv`` as a markdown table (for RESULTS.md).

    .venv/bin/python loadtest/report.py [loadtest/runs/<run>/run]   (default: the committed loadtest/results/run)
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workload import SINGLE  # noqa: E402


def table(prefix: str) -> str:
    rows = list(csv.DictReader(open(f"{prefix}_stats.csv", newline="")))
    lines = [
        "| command | requests | failures | req/s | p50 ms | p95 ms | p99 ms | p99.9 ms | max ms | avg bytes |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    rows.sort(key=lambda r: (r["Name"] == "Aggregated", -int(r["Request Count"])))
    for row in rows:
        name = row["Name"]
        label = "**all commands**" if name == "Aggregated" else name + (" (single)" if name in SINGLE else "")
        lines.append(
            f"| {label} | {int(row['Request Count']):,} | {int(row['Failure Count']):,} | "
            f"{float(row['Requests/s']):,.1f} | {row['50%']} | {row['95%']} | {row['99%']} | {row['99.9%']} | "
            f"{float(row['Max Response Time']):.0f} | {float(row['Average Content Size']):.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parent / "results" / "run")))
