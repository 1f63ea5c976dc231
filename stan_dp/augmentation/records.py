"""The model side of data augmentation: a Stan program for i.i.d. records.

:class:`StanRecordModel` wraps a Stan program written for rows as in
:class:`stan_dp.RowModel` (a row-count variable ``N``; record variables with
leading dimension ``N``) whose ``generated quantities`` draw one fresh record
per row from ``f(· | θ)`` with ``_rng`` functions, e.g.

    generated quantities {
      array[N] real y_new = normal_rng(rep_vector(mu, N), sigma);
    }

By default the generated variable ``v_new`` supplies record variable ``v``.
It gives the two things Algorithm 1 of Ju, Awan, Gong, Rao (2022) needs:

- :meth:`generate`: all ``n`` independent proposals ``x_i* ~ f(· | θ)`` in one
  call (step 2a), through one model instance built once;
- :meth:`density`: ``log p(θ | x)`` and its gradient on the current imputed
  records ``x`` (step 1), through a model instance built from the records in
  memory (``sdp_model_construct_overlay``: no JSON, no name tables).

The record values in ``data`` are placeholders: only their shapes and types
are used, and they are replaced by records drawn from the model before any
use.  The generator must not read the record variables (checked).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np

from stan_dp.data import check_row_count, load_data
from stan_dp.native.overlay import OverlayBuilder, OverlayModel
from stan_dp.params import ParamLayout
from stan_dp.toolchain import as_library

__all__ = ["StanRecordModel"]

Records = Mapping[str, np.ndarray]


class StanRecordModel:
    """A Stan model of i.i.d. records with a record generator in generated quantities.

    Parameters
    ----------
    model : path
        A ``.stan`` file (compiled and cached on first use) or a library
        built by :func:`stan_dp.compile_model`.
    data : dict or path
        The model's data.  The record variables must be present with their
        full shapes (leading dimension ``n``) and types; their values are
        ignored (replaced by draws from the model).
    rows : str, default "N"
        The integer data variable that counts records.
    generate : mapping, optional
        ``{record variable: generated-quantities variable}``.  By default
        every data variable ``v`` for which a generated quantity ``v_new``
        exists.
    seed : int, default 1234
        Seed for RNG calls in ``transformed data``.
    stanc_args, cache_dir
        As for :func:`stan_dp.compile_model`.

    Attributes
    ----------
    n_records : int
    dim : int
        Number of unconstrained parameters.
    record_vars : tuple of str
    param_names : list of str
        Stan's constrained parameter names.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        data: Mapping[str, Any] | str | os.PathLike[str],
        *,
        rows: str = "N",
        generate: Mapping[str, str] | None = None,
        seed: int = 1234,
        stanc_args: Sequence[str] = (),
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        import bridgestan
        import stanio

        data_json, values = load_data(data)
        self.n_records = check_row_count(values, rows)
        if self.n_records < 1:
            raise ValueError(f"the record count {rows!r} must be at least 1")
        self.rows_var = rows
        self.library = as_library(model, stanc_args, cache_dir)
        try:
            self._gen = bridgestan.StanModel(str(self.library), data_json, seed=seed, warn=False)
        except RuntimeError as exc:
            raise ValueError(f"the model rejected the data: {exc}") from exc
        self.param_names = list(self._gen.param_names())
        self._layout = ParamLayout(self.param_names)
        self._all = ParamLayout(self._gen.param_names(include_tp=False, include_gq=True))
        self.dim = int(self._gen.param_unc_num())
        self.generate_map = self._resolve_generate(generate, values)
        self.record_vars = tuple(self.generate_map)
        self._offsets = self._gq_offsets()
        is_int = {v: bool(np.issubdtype(np.asarray(values[v]).dtype, np.integer))
                  for v in self.record_vars}
        self._int_vars = {v for v, flag in is_int.items() if flag}
        shared = {k: v for k, v in values.items() if k not in self.record_vars}
        self._builder = OverlayBuilder(self._gen.stanlib, stanio.dump_stan_json(shared), is_int, seed)
        self._seed = seed
        self._values = values

    # ------------------------------------------------------------ setup --
    def _resolve_generate(self, generate: Mapping[str, str] | None, values: dict) -> dict[str, str]:
        shapes = self._all.shapes
        gq_names = [k for k in shapes if k not in self._layout.shapes]
        if generate is None:
            generate = {v: f"{v}_new" for v in values if f"{v}_new" in gq_names}
            if not generate:
                raise ValueError(
                    "no record generator found: add a generated quantity `v_new` for every "
                    "record variable `v` (drawn with _rng functions from f(. | theta)), or "
                    "name them with generate={'v': 'gq_name'}"
                )
        generate = dict(generate)
        for v, g in generate.items():
            if v not in values:
                raise ValueError(f"record variable {v!r} (in generate=) is not in the data")
            if g not in gq_names:
                raise ValueError(
                    f"generated quantity {g!r} for record variable {v!r} not found "
                    f"(generated quantities: {', '.join(gq_names) or 'none'})"
                )
            want = np.shape(values[v])
            if not want or want[0] != self.n_records:
                raise ValueError(
                    f"record variable {v!r} must have leading dimension {self.rows_var} = "
                    f"{self.n_records}, got shape {want}"
                )
            if tuple(shapes[g]) != tuple(want):
                raise ValueError(
                    f"generated quantity {g!r} has shape {tuple(shapes[g])} but record variable "
                    f"{v!r} has shape {want}"
                )
        return generate

    def _gq_offsets(self) -> dict[str, tuple[int, int, tuple[int, ...]]]:
        pos = 0
        spans = {}
        for name, shape in self._all.shapes.items():
            size = int(np.prod(shape)) if shape else 1
            spans[name] = (pos, pos + size, shape)
            pos += size
        return {v: spans[g] for v, g in self.generate_map.items()}

    # ------------------------------------------------------------ model --
    @property
    def native_library(self):
        """The loaded model library (``ctypes.CDLL``), for the native record sweep."""
        return self._gen.stanlib

    def new_rng(self, seed: int):
        """A Stan RNG for :meth:`generate`."""
        return self._gen.new_rng(int(seed))

    def generate(self, theta: np.ndarray, rng: Any) -> dict[str, np.ndarray]:
        """One fresh record per row, ``x_i* ~ f(· | θ)``, from generated quantities.

        Parameters
        ----------
        theta : ndarray, shape (dim,)
            Unconstrained parameters.
        rng : bridgestan.StanRNG
            From :meth:`new_rng`.
        """
        flat = self._gen.param_constrain(
            np.ascontiguousarray(theta, dtype=float), include_tp=False, include_gq=True, rng=rng
        )
        return self._split(flat)

    def _split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        for v, (a, b, shape) in self._offsets.items():
            x = flat[a:b].reshape(shape, order="F")
            out[v] = np.rint(x).astype(np.int64) if v in self._int_vars else x
        return out

    def density(self, records: Records) -> OverlayModel:
        """The model on ``records``: ``log_density_gradient(θ)`` of ``log p(θ | records)``."""
        return self._builder.build(records)

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """The ``parameters`` block's variables at unconstrained θ, by name and shape."""
        return self._layout.split(self._gen.param_constrain(np.ascontiguousarray(theta, dtype=float)))

    def unconstrain(self, values: Mapping[str, Any]) -> np.ndarray:
        """Unconstrained parameters from a dict of constrained values."""
        try:
            return self._gen.param_unconstrain(self._layout.join(values))
        except RuntimeError as exc:
            raise ValueError(f"could not unconstrain the values: {exc}") from exc

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of every variable in the ``parameters`` block."""
        return dict(self._layout.shapes)

    def check_generator(self, theta: np.ndarray, seed: int = 20240917) -> dict[str, np.ndarray]:
        """Check that generated records and constraints do not read the record data.

        Draws records at ``theta``, rebuilds the model on them, and compares
        draws from the same RNG seed and the constrained parameters.

        Returns
        -------
        dict
            The records drawn (data-independent).

        Raises
        ------
        ValueError
            If the generator or a parameter constraint depends on the record values.
        """
        import bridgestan
        import stanio

        first = self.generate(theta, self.new_rng(seed))
        values = dict(self._values)
        values.update(first)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "already loaded": same library
            other = bridgestan.StanModel(str(self.library), stanio.dump_stan_json(values),
                                         seed=self._seed, warn=False)
        again = self._split(other.param_constrain(theta, include_tp=False, include_gq=True,
                                                  rng=other.new_rng(seed)))
        for v in self.record_vars:
            if not np.array_equal(first[v], again[v]):
                raise ValueError(
                    f"the generated records {self.generate_map[v]!r} depend on the data's record "
                    "values; generated quantities must draw x_i* ~ f(. | theta) from parameters "
                    "and shared data only"
                )
        if not np.array_equal(other.param_constrain(theta), self._gen.param_constrain(theta)):
            raise ValueError("the constraints of the parameters depend on the record values")
        return first
