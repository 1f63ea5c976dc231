"""Reading and checking the data a user hands to a model.

Data come as a mapping (NumPy arrays allowed) or as the path of a JSON file
in Stan's JSON format.  Both end up as one JSON document for the native
library, written by ``stanio`` (Stan's own JSON writer, also used by
cmdstanpy and BridgeStan), so that values round-trip exactly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import stanio


def load_data(data: Mapping[str, Any] | str | os.PathLike[str] | None) -> tuple[str, dict[str, Any]]:
    """Return the data as a JSON document and as a dictionary.

    Parameters
    ----------
    data : mapping, path or None
        Variable name to value (scalars, lists or NumPy arrays), or the path
        of a ``.json`` file.  ``None`` means no data.

    Returns
    -------
    (str, dict)
        The JSON text for the native library and the parsed values.

    Raises
    ------
    FileNotFoundError
        If a path is given and does not exist.
    ValueError
        If the file is not valid JSON or not a JSON object.
    TypeError
        If ``data`` is neither a mapping nor a path.
    """
    if data is None:
        return "{}", {}
    if isinstance(data, (str, os.PathLike)):
        path = Path(data).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"data file not found: {data}")
        text = path.read_text()
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"data file {data} is not valid JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise ValueError(f"data file {data} must hold a JSON object of variables")
        return text, parsed
    if isinstance(data, Mapping):
        bad = [k for k in data if not isinstance(k, str)]
        if bad:
            raise TypeError(f"data variable names must be strings, got {bad!r}")
        return stanio.dump_stan_json(dict(data)), dict(data)
    raise TypeError(
        f"data must be a dict of variables or the path of a JSON file, not {type(data).__name__}"
    )


def check_row_count(values: Mapping[str, Any], rows: str) -> int:
    """Check that ``rows`` names a non-negative integer scalar and return it.

    Raises
    ------
    ValueError
        If the variable is absent, not a single integer, or negative.
    """
    if not isinstance(rows, str) or not rows:
        raise ValueError("rows must be the name of the data variable that counts rows")
    if rows not in values:
        raise ValueError(
            f"the row-count variable {rows!r} is not in the data "
            f"(variables: {', '.join(sorted(values)) or 'none'}); "
            "name it with rows=..."
        )
    value = values[rows]
    arr = np.asarray(value)
    # Python ints beyond int64 have object dtype, hence the isinstance test.
    is_int = arr.ndim == 0 and (np.issubdtype(arr.dtype, np.integer) or isinstance(value, int))
    if not is_int or isinstance(value, (bool, np.bool_)):
        raise ValueError(
            f"the row-count variable {rows!r} must be a single integer, got {value!r}"
        )
    count = int(arr)
    if count < 0:
        raise ValueError(f"the row-count variable {rows!r} is negative ({count})")
    return count


def zero_row_data(values: Mapping[str, Any], rows: str, row_vars: Sequence[str]) -> dict[str, Any]:
    """The data with no rows: every row variable truncated to 0 rows, the count 0.

    Everything left is the shared (non-row) data, which the prior part of the
    model depends on and which this package treats as public.

    Parameters
    ----------
    values : mapping
        The parsed data of one shard.
    rows : str
        The row-count variable.
    row_vars : sequence of str
        The variables sliced per row.

    Returns
    -------
    dict
        Variable name to value, ready for ``stanio.dump_stan_json``.
    """
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name == rows:
            out[name] = 0
        elif name in row_vars:
            out[name] = np.asarray(value)[:0]
        else:
            out[name] = value
    return out
