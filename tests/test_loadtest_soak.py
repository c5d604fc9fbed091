"""A short smoke run of the loadtest soak (loadtest/soak.py) with its default
primary and two replicas: no error, the replicas' lag recorded in every row,
and after the load the replicas catch up and hold what the primary holds."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

LOADTEST = Path(__file__).resolve().parent.parent / "loadtest"


@pytest.mark.slow
def test_a_short_soak_with_two_replicas_converges(tmp_path):
    sys.path.insert(0, str(LOADTEST))
    try:
        import soak
    finally:
        sys.path.remove(str(LOADTEST))
    assert soak.main(["--duration", "6", "--interval", "2", "--no-render", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader(open(tmp_path / "soak.csv", newline="")))
    assert len(rows) == 3
    assert all(float(row["replica_lag_kb"]) >= 0 for row in rows)  # (-1: a link down)
    summary = (tmp_path / "soak-summary.md").read_text()
    assert "| replicas converge after the load |" in summary and "data equal: yes" in summary
    assert "| errors | 0 |" in summary
