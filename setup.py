"""Builds the compiled event loop of the ``waves`` model (schedsim/sim/_cwaves.c); metadata is in pyproject.toml.

Required: without a C compiler the install fails at this step (install a compiler such as gcc, or a schedsim
wheel, built by cibuildwheel). A package whose build is missing anyway (a checkout run in place without
``pip install -e .``) stops at its first simulation with one ``error:`` line naming the fix
(:func:`schedsim.sim.loop.compiled_loop`).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("schedsim.sim._cwaves", ["schedsim/sim/_cwaves.c"],
                             extra_compile_args=["-O3", "-ffp-contract=off"])])
