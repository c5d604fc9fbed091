"""The optional C request parser (resp/_speedups.c) and the duplicate window's run
claim (engine/_window.c); everything else is in pyproject.toml.

``optional=True``: where one cannot be compiled (no compiler, no Python headers),
the install goes on without it and resp/parser.py (engine/ingest.py) runs its
plain-Python path."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tstream.resp._speedups", ["resp/_speedups.c"], optional=True),
                   Extension("tstream.engine._window", ["engine/_window.c"], optional=True)])
