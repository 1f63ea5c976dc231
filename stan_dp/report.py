"""Plain-text reports for people: rounded figures, aligned keys.

Printed reports (the command line's privacy report, the comparison's
summary) show about four significant digits: ``epsilon_spent 4`` rather than
``3.999999999999999``, ``noise_multiplier 76.45`` rather than
``76.44968753559586``.  The exact values stay in the fit's ``attrs``.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np

__all__ = ["SIGNIFICANT_DIGITS", "format_value", "format_report", "stan_labels", "stan_summary"]

SIGNIFICANT_DIGITS = 4
"""Significant digits of floats in printed reports."""


def format_value(value: Any, digits: int = SIGNIFICANT_DIGITS) -> str:
    """A value as a person should read it: floats to ``digits`` significant digits.

    Parameters
    ----------
    value : object
        A float, int, bool, string, or a list/tuple/array of those.
    digits : int
        Significant digits of floats.

    Returns
    -------
    str
        Floats in ``%g`` style (``4``, ``76.45``, ``1e-05``), integers and
        strings unchanged, sequences as ``[a, b, ...]``.
    """
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v == int(v) and abs(v) < 10 ** digits:
            return str(int(v))
        return f"{v:.{digits}g}"
    if isinstance(value, (list, tuple, np.ndarray)):
        return "[" + ", ".join(format_value(v, digits) for v in np.asarray(value, dtype=object).ravel()) + "]"
    return str(value)


def format_report(title: str, attrs: Mapping[str, Any], keys: Iterable[str] | None = None,
                  *, digits: int = SIGNIFICANT_DIGITS, width: int = 22) -> str:
    """A titled block of ``key value`` lines with rounded values.

    Parameters
    ----------
    title : str
        First line (e.g. ``"privacy report"``).
    attrs : mapping
        The values (e.g. a fit's ``posterior.attrs``).
    keys : iterable of str, optional
        Keys to print, in order (default: all); missing, empty or ``None``
        values are skipped.
    digits : int
        Significant digits of floats.
    width : int
        Width of the key column.

    Returns
    -------
    str
    """
    lines = [title]
    for key in (attrs.keys() if keys is None else keys):
        if key in attrs and attrs[key] not in ("", None):
            lines.append(f"  {key:{width}s} {format_value(attrs[key], digits)}")
    return "\n".join(lines)


def stan_labels(idata: Any) -> dict[str, str]:
    """ArviZ's component labels of a posterior mapped to Stan's 1-based names.

    ``az.summary`` labels components by their coordinates (``beta[0]``,
    ``Sigma[0, 1]``, or ``beta[school_a]`` with named coordinates); Stan,
    CmdStan and posteriordb call them ``beta[1]`` and ``Sigma[1,2]``.

    Parameters
    ----------
    idata : InferenceData or xarray.Dataset
        A fit (its ``posterior`` group) or a posterior dataset with
        ``chain`` and ``draw`` dimensions.

    Returns
    -------
    dict
        ``{"beta[0]": "beta[1]", "Sigma[0, 1]": "Sigma[1,2]", ...}``.
    """
    from stan_dp.diagnostics import stan_name

    post = getattr(idata, "posterior", idata)
    labels: dict[str, str] = {}
    for name in post.data_vars:
        da = post[name]
        dims = [d for d in da.dims if d not in ("chain", "draw")]
        shape = tuple(da.sizes[d] for d in dims)
        for idx in np.ndindex(*shape):
            coords = [da.coords[d].values[i] if d in da.coords else i for d, i in zip(dims, idx)]
            arviz_label = f"{name}[{', '.join(str(c) for c in coords)}]" if dims else str(name)
            labels[arviz_label] = stan_name(str(name), idx)
    return labels


def stan_summary(idata: Any, **kwargs: Any):
    """``arviz.summary`` with rows labelled by Stan's 1-based names (``beta[1]``).

    Parameters
    ----------
    idata : InferenceData
        A fit.
    **kwargs
        Passed to ``arviz.summary`` (``kind="stats"``, ``var_names=...``).

    Returns
    -------
    pandas.DataFrame
        ArviZ's summary, its index renamed by :func:`stan_labels`.
    """
    from stan_dp.output import _import_arviz

    az = _import_arviz()
    table = az.summary(idata, **kwargs)
    return table.rename(index=stan_labels(idata))
