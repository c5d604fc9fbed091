"""What the instruction-count scripts share (bench/instructions.py,
bench/replay.py, bench/pages.py, bench/ingest_cost.py): running a workload
under valgrind's callgrind for its total, and the comparison table (a figure
per build and shape, and this/base when a base build is counted too).  No
imports of tstream, so that a script counting another source tree can use it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Callable, Iterable

_COLLECTED = re.compile(r"Collected : (\d+)")


def total(argv: list[str], label: str) -> int:
    """The instructions callgrind counts for the command ``argv`` (run from /,
    hash randomization off, so that two runs lay their dicts out alike)."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
                          capture_output=True, text=True, check=True, cwd="/",
                          env=dict(os.environ, PYTHONHASHSEED="0"))
    match = _COLLECTED.search(done.stderr)
    if match is None:
        raise SystemExit(f"no callgrind total for {label}:\n{done.stderr[-2000:]}")
    return int(match.group(1))


def compare(builds: dict, shapes: Iterable[str], figure: Callable[[object, str], float], column: str,
            label: Callable[[str], str] = str, out: str = "-") -> str:
    """A markdown table of ``figure(build, shape)`` for each build of ``builds``
    (name -> what ``figure`` takes; "base" and "this" get a this/base column),
    each row printed as soon as it is counted; written to ``out`` unless "-"."""
    based = "base" in builds
    lines = ["| shape | " + " | ".join(f"{name} ({column})" for name in builds) + (" | this/base |" if based else " |"),
             "| --- |" + " ---: |" * (len(builds) + based)]
    for shape in shapes:
        figures = {name: figure(build, shape) for name, build in builds.items()}
        row = f"| {label(shape)} | " + " | ".join(f"{value:,.0f}" for value in figures.values())
        row += f" | {figures['this'] / figures['base']:.2f} |" if based else " |"
        lines.append(row)
        print(row, flush=True)
    text = "\n".join(lines) + "\n"
    if out != "-":
        Path(out).write_text(text)
    print(text)
    return text
