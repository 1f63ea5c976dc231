"""The package version, in a module of its own.

Lower layers (the toolchain's cache key, the ``stan_dp_version`` attribute of
fits) read it from here rather than from the package root, so that nothing
below :mod:`stan_dp` imports the package's ``__init__``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
