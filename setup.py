"""The optional C request parser and DGET page writer (resp/_speedups.c); everything else is in pyproject.toml.

``optional=True``: where it cannot be compiled (no compiler, no Python headers),
the install goes on without it and resp/parser.py runs its plain-Python path."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tstream.resp._speedups", ["resp/_speedups.c"], optional=True)])
