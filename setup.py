"""Builds the compiled event loop of the ``waves`` model (schedsim/sim/_cwaves.c); metadata is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and schedsim runs the Python loop
(it says so on stderr).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("schedsim.sim._cwaves", ["schedsim/sim/_cwaves.c"], optional=True,
                             extra_compile_args=["-O3", "-ffp-contract=off"])])
