"""The layout of a Stan model's ``parameters`` block.

Stan flattens parameters into one vector of constrained values, named like
``beta.2.3`` for ``beta[2, 3]``, in column-major order.  :class:`ParamLayout`
turns such a vector into named, shaped arrays and back; the model classes
(:class:`stan_dp.RowModel`, :class:`stan_dp.StanExpFamilyModel`) supply the
constraining transform itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np


def shapes_from_names(names: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Variable shapes from Stan's flattened names (``b.2.3`` → b, index (2, 3))."""
    shapes: dict[str, list[int]] = {}
    for name in names:
        base, *idx = name.split(".")
        current = shapes.setdefault(base, [0] * len(idx))
        for k, i in enumerate(idx):
            current[k] = max(current[k], int(i) if i.isdigit() else 1)
    return {b: tuple(s) for b, s in shapes.items()}


class ParamLayout:
    """Names and shapes of the ``parameters`` block, in Stan's order.

    Parameters
    ----------
    names : sequence of str
        Stan's flattened constrained names (``bridgestan.StanModel.param_names()``).
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.shapes = shapes_from_names(self.names)

    def split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Named, shaped arrays from a flat vector of constrained values."""
        out: dict[str, np.ndarray] = {}
        pos = 0
        for name, shape in self.shapes.items():
            size = int(np.prod(shape)) if shape else 1
            out[name] = flat[pos:pos + size].reshape(shape, order="F").copy()
            pos += size
        return out

    def join(self, values: Mapping[str, Any]) -> np.ndarray:
        """The flat vector of constrained values from named arrays.

        Raises
        ------
        ValueError
            If a parameter is missing or has the wrong shape.
        """
        missing = [n for n in self.shapes if n not in values]
        if missing:
            raise ValueError(f"missing parameters: {', '.join(missing)}")
        flat = []
        for name, shape in self.shapes.items():
            arr = np.asarray(values[name], dtype=np.float64)
            if arr.shape != shape:
                raise ValueError(f"parameter {name!r} must have shape {shape}, got {arr.shape}")
            flat.append(arr.reshape(-1, order="F"))
        return np.ascontiguousarray(np.concatenate(flat) if flat else np.empty(0))
