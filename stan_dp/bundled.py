"""The Stan models shipped inside the package (``stan_dp/stan_models/*.stan``).

They are package data, so they are found through the installed package and
not through a source checkout:

>>> import stan_dp
>>> stan_dp.bundled_model("logistic_regression").name
'logistic_regression.stan'

(A checkout also has a top-level ``stan_models`` link to the same folder, for
the paths used in the README, the examples and the tests.)
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BUNDLED_DIR", "bundled_model", "bundled_model_names"]

BUNDLED_DIR = Path(__file__).resolve().parent / "stan_models"
"""The folder of the bundled ``.stan`` files inside the installed package."""


def bundled_model_names() -> list[str]:
    """Names of the bundled models, sorted (file names without ``.stan``).

    Returns
    -------
    list of str
        E.g. ``["banana", "linear_regression", ..., "logistic_regression", ...]``.
    """
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.stan"))


def bundled_model(name: str) -> Path:
    """Path of a bundled Stan model.

    Parameters
    ----------
    name : str
        The model's name, e.g. ``"logistic_regression"`` (a trailing
        ``".stan"`` is accepted).

    Returns
    -------
    pathlib.Path
        Absolute path of the ``.stan`` file, e.g. for
        :func:`stan_dp.compile_model` or :class:`stan_dp.RowModel`.

    Raises
    ------
    ValueError
        If no bundled model has that name; the message lists the names.
    FileNotFoundError
        If the installation ships no bundled models at all (a broken install).
    """
    if not isinstance(name, str):
        raise TypeError(f"the model name must be a string, got {type(name).__name__}")
    stem = name[: -len(".stan")] if name.endswith(".stan") else name
    names = bundled_model_names()
    if not names:
        raise FileNotFoundError(
            f"no bundled Stan models in {BUNDLED_DIR}: the installation is incomplete "
            "(the package data stan_dp/stan_models/*.stan is missing)"
        )
    if stem not in names:
        raise ValueError(
            f"no bundled model named {name!r}; the bundled models are: {', '.join(names)}"
        )
    return BUNDLED_DIR / f"{stem}.stan"
