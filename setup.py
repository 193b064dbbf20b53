"""Build the Cython cancellation flag; everything else is in pyproject.toml."""

from setuptools import setup

setup()
