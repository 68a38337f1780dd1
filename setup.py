"""Build step for the one compiled part: the idle painting's sweep (analysis/diagnosis/_sweep.c), a plain C
shared library that analysis/diagnosis/sweep.py loads with ctypes. Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("analysis.diagnosis._sweep", ["analysis/diagnosis/_sweep.c"],
                             extra_compile_args=["-O2", "-fvisibility=hidden"])])
