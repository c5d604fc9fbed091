"""The optional C extensions: the request parser's hot path, the DGET page writer,
the XADD id-run replies and the FAST batch-seq check (resp/_speedups.c), and the
MSGID duplicate window's run claim (engine/_window.c), and a run's store into a
stream's active node (engine/_columns.c); everything else is in pyproject.toml.

``optional=True``: where one cannot be compiled (no compiler, no Python headers),
the install goes on without it and its callers (resp/, commands/ingest.py,
engine/ingest.py, engine/stream.py) run their plain-Python paths."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tstream.resp._speedups", ["resp/_speedups.c"], optional=True),
                   Extension("tstream.engine._window", ["engine/_window.c"], optional=True),
                   Extension("tstream.engine._columns", ["engine/_columns.c"], optional=True)])
