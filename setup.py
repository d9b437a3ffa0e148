"""Builds the Cython engine; everything else lives in pyproject.toml."""

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    Extension(
        "lc_cfr.game.cy_engine",
        ["lc_cfr/game/cy_engine.pyx"],
        include_dirs=[numpy.get_include(), "lc_cfr/game"],
        extra_compile_args=["-O3"],
    ),
    Extension(
        "lc_cfr.bots.cy_bots",
        ["lc_cfr/bots/cy_bots.pyx"],
        include_dirs=[numpy.get_include(), "lc_cfr/game"],
        extra_compile_args=["-O3"],
    ),
    Extension(
        "lc_cfr.traversal.cy_traversal",
        ["lc_cfr/traversal/cy_traversal.pyx"],
        include_dirs=[numpy.get_include(), "lc_cfr/game"],
        # no contraction into fused multiply-adds: the float32 bits must match policy.py
        extra_compile_args=["-O3", "-ffp-contract=off"],
    ),
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )
)
