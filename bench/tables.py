"""The comparison table of the instruction-count scripts (bench/instructions.py,
bench/replay.py): a figure per build and shape, and this/base when a base
build is counted too.  A module of its own, without imports of tstream, so that
a script counting another source tree can use it."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable


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
