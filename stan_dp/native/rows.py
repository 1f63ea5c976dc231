"""ctypes binding of the row extension (``sdp_*``) of a stan_dp model library.

This is the only Python module that knows the C signatures of the row
extension; :class:`stan_dp.model.RowModel` uses it.  Every call checks the
return code and turns the library's error message into a Python exception.

A row whose evaluation throws (Stan's reject, an index out of range, a size
mismatch, anything) is never an error: the library returns NaN for that
row's value and gradient, so that neither whether a call succeeds nor any
message depends on one row.  Only the prior (zero-row) part, which depends
on no row, can fail a call, and its message names the exception's type, not
Stan's text (which may quote data values).  This module adds nothing of its
own to the library's messages.
"""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

_ERR = ctypes.POINTER(ctypes.c_char_p)
_DPTR = ctypes.POINTER(ctypes.c_double)


class NativeError(RuntimeError):
    """An error reported by the native library."""


def _declare(lib: ctypes.CDLL) -> None:
    if getattr(lib, "_stan_dp_declared", False):
        return
    if hasattr(lib, "sdp_rows_construct") and not hasattr(lib, "sdp_clipped_ratio_sums"):
        raise ValueError(
            f"{lib._name} was built by an older stan_dp (no aggregate queries); "
            "compile the model again with stan_dp.compile_model")
    if not hasattr(lib, "sdp_rows_construct"):
        raise ValueError(
            f"{lib._name} is not a stan_dp model library (no row extension); "
            "compile the model with stan_dp.compile_model"
        )
    lib.sdp_rows_construct.restype = ctypes.c_void_p
    lib.sdp_rows_construct.argtypes = [
        ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint, ctypes.c_int, _ERR,
    ]
    lib.sdp_rows_destruct.restype = None
    lib.sdp_rows_destruct.argtypes = [ctypes.c_void_p]
    lib.sdp_rows_n.restype = ctypes.c_longlong
    lib.sdp_rows_n.argtypes = [ctypes.c_void_p]
    lib.sdp_rows_dim.restype = ctypes.c_int
    lib.sdp_rows_dim.argtypes = [ctypes.c_void_p]
    lib.sdp_rows_threads.restype = ctypes.c_int
    lib.sdp_rows_threads.argtypes = [ctypes.c_void_p]
    lib.sdp_rows_sliced.restype = ctypes.c_char_p
    lib.sdp_rows_sliced.argtypes = [ctypes.c_void_p]
    lib.sdp_rows_set_threads.restype = ctypes.c_int
    lib.sdp_rows_set_threads.argtypes = [ctypes.c_void_p, ctypes.c_int, _ERR]
    lib.sdp_log_prior.restype = ctypes.c_int
    lib.sdp_log_prior.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _DPTR, ctypes.c_void_p, _ERR]
    lib.sdp_row_log_lik.restype = ctypes.c_int
    lib.sdp_row_log_lik.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong,
        ctypes.c_void_p, ctypes.c_void_p, _ERR,
    ]
    lib.sdp_param_num.restype = ctypes.c_int
    lib.sdp_param_num.argtypes = [ctypes.c_void_p]
    lib.sdp_param_constrain.restype = ctypes.c_int
    lib.sdp_param_constrain.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, _ERR]
    lib.sdp_param_unconstrain.restype = ctypes.c_int
    lib.sdp_param_unconstrain.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, _ERR]
    _LL = ctypes.POINTER(ctypes.c_longlong)
    lib.sdp_clipped_ratio_sums.restype = ctypes.c_int
    lib.sdp_clipped_ratio_sums.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_double, ctypes.c_double,
        ctypes.c_double, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_int,
        ctypes.c_void_p, _DPTR, _LL, _ERR,
    ]
    lib.sdp_clipped_grad_sum.restype = ctypes.c_int
    lib.sdp_clipped_grad_sum.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_double, ctypes.c_void_p, ctypes.c_int,
        ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, _LL, _ERR,
    ]
    lib.bs_free_error_msg.restype = None
    lib.bs_free_error_msg.argtypes = [ctypes.c_char_p]
    lib._stan_dp_declared = True


def _raise(lib: ctypes.CDLL, err: ctypes.c_char_p, exc: type[Exception] = NativeError) -> None:
    msg = err.value.decode("utf-8", "replace") if err.value else "unknown native error"
    if err.value:
        lib.bs_free_error_msg(err)
    raise exc(msg)


class NativeRows:
    """Owns one ``sdp_rows`` object: the per-row model instances.

    Parameters
    ----------
    lib : ctypes.CDLL
        A loaded stan_dp model library.
    data_json : str
        The full data as JSON.
    rows : str
        Name of the row-count variable.
    row_vars : sequence of str or None
        Variables to slice per row; ``None`` slices every variable whose
        leading dimension equals the row count.
    seed : int
        Seed for RNG calls in ``transformed data``.
    threads : int
        Worker threads; ``<= 0`` means all hardware threads.
    """

    def __init__(
        self,
        lib: ctypes.CDLL,
        data_json: str,
        rows: str,
        row_vars: Sequence[str] | None,
        seed: int,
        threads: int,
    ) -> None:
        _declare(lib)
        self._lib = lib
        err = ctypes.c_char_p()
        csv = None if row_vars is None else ",".join(row_vars).encode()
        ptr = lib.sdp_rows_construct(
            data_json.encode(), rows.encode(), csv, seed, threads, ctypes.byref(err)
        )
        if not ptr:
            _raise(lib, err, ValueError)
        self._ptr = ctypes.c_void_p(ptr)
        self.n_rows = int(lib.sdp_rows_n(self._ptr))
        self.dim = int(lib.sdp_rows_dim(self._ptr))
        sliced = lib.sdp_rows_sliced(self._ptr).decode()
        self.sliced = tuple(s for s in sliced.split(",") if s)

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr:
            self._lib.sdp_rows_destruct(ptr)
            self._ptr = None

    @property
    def threads(self) -> int:
        return int(self._lib.sdp_rows_threads(self._ptr))

    @threads.setter
    def threads(self, value: int) -> None:
        err = ctypes.c_char_p()
        if self._lib.sdp_rows_set_threads(self._ptr, int(value), ctypes.byref(err)) != 0:
            _raise(self._lib, err)

    def log_prior(self, theta: np.ndarray, with_grad: bool) -> tuple[float, np.ndarray | None]:
        """Log density of the zero-row model (prior and Jacobian).

        Parameters
        ----------
        theta : ndarray, shape (dim,), float64, contiguous
            Unconstrained parameters.
        with_grad : bool
            Also return the gradient.

        Returns
        -------
        lp : float
            ``-inf`` where Stan rejects the point.
        grad : ndarray of shape (dim,) or None

        Raises
        ------
        NativeError
            If the prior part throws anything but a reject (the message names
            the exception's type only).
        """
        lp = ctypes.c_double()
        grad = np.empty(self.dim) if with_grad else None
        err = ctypes.c_char_p()
        rc = self._lib.sdp_log_prior(
            self._ptr, theta.ctypes.data, ctypes.byref(lp),
            None if grad is None else grad.ctypes.data, ctypes.byref(err),
        )
        if rc != 0:
            _raise(self._lib, err)
        return float(lp.value), grad

    def param_constrain(self, theta: np.ndarray) -> np.ndarray:
        """Constrained ``parameters`` values, by the zero-row instance."""
        out = np.empty(int(self._lib.sdp_param_num(self._ptr)))
        err = ctypes.c_char_p()
        if self._lib.sdp_param_constrain(self._ptr, theta.ctypes.data, out.ctypes.data, ctypes.byref(err)) != 0:
            _raise(self._lib, err, ValueError)
        return out

    def param_unconstrain(self, values: np.ndarray) -> np.ndarray:
        """Unconstrained parameters from constrained values, by the zero-row instance."""
        if values.shape != (int(self._lib.sdp_param_num(self._ptr)),):
            raise ValueError("wrong number of constrained values")
        out = np.empty(self.dim)
        err = ctypes.c_char_p()
        if self._lib.sdp_param_unconstrain(self._ptr, values.ctypes.data, out.ctypes.data, ctypes.byref(err)) != 0:
            _raise(self._lib, err, ValueError)
        return out

    def row_log_lik(
        self, theta: np.ndarray, idx: np.ndarray | None, with_grad: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Per-row log-likelihood values (and gradients) at ``theta``.

        Parameters
        ----------
        theta : ndarray, shape (dim,), float64, contiguous
            Unconstrained parameters.
        idx : ndarray of int64 or None
            Row indices (validated by the caller), or ``None`` for all rows.
        with_grad : bool
            Also return the gradients.

        Returns
        -------
        values : ndarray, shape (m,)
            NaN for a row whose evaluation threw (whatever it threw) or for
            every row if the prior part rejects ``theta``.
        grads : ndarray of shape (m, dim) or None
            NaN rows where ``values`` is NaN.

        Raises
        ------
        NativeError
            For bad arguments, or if the prior part throws anything but a
            reject; never because of a row.
        """
        m = self.n_rows if idx is None else idx.shape[0]
        out = np.empty(m)
        grad = np.empty((m, self.dim)) if with_grad else None
        err = ctypes.c_char_p()
        rc = self._lib.sdp_row_log_lik(
            self._ptr, theta.ctypes.data, None if idx is None else idx.ctypes.data, m,
            out.ctypes.data, None if grad is None else grad.ctypes.data, ctypes.byref(err),
        )
        if rc != 0:
            _raise(self._lib, err)
        return out, grad

    def clipped_ratio_sums(
        self, theta_new: np.ndarray, theta_old: np.ndarray, bound: float, pre: float, post: float,
        idx: np.ndarray | None, groups: np.ndarray | None, n_groups: int,
    ) -> tuple[np.ndarray, int, float, int]:
        """Clipped ratio sums in C++ (``sdp_clipped_ratio_sums``).

        Parameters
        ----------
        theta_new, theta_old : ndarray, shape (dim,), float64, contiguous
        bound, pre, post : float
            ``x_j = post * clip(pre * r_j, ±bound)``.
        idx : ndarray of int64 or None
            Validated row indices, or all rows.
        groups : ndarray of int32 (one per row of the data) or None
        n_groups : int

        Returns
        -------
        totals : ndarray, shape (n_groups,)
        count : int
        m2 : float
        n_clipped : int
        """
        m = self.n_rows if idx is None else idx.shape[0]
        totals = np.empty(n_groups)
        m2 = ctypes.c_double()
        n_clipped = ctypes.c_longlong()
        err = ctypes.c_char_p()
        rc = self._lib.sdp_clipped_ratio_sums(
            self._ptr, theta_new.ctypes.data, theta_old.ctypes.data, float(bound), float(pre),
            float(post), None if idx is None else idx.ctypes.data, m,
            None if groups is None else groups.ctypes.data, int(n_groups), totals.ctypes.data,
            ctypes.byref(m2), ctypes.byref(n_clipped), ctypes.byref(err),
        )
        if rc != 0:
            _raise(self._lib, err)
        return totals, int(m), float(m2.value), int(n_clipped.value)

    def clipped_grad_sum(
        self, theta: np.ndarray, bound: float, frame: np.ndarray | None, idx: np.ndarray | None,
    ) -> tuple[np.ndarray, int]:
        """Sum of clamped per-row gradients in C++ (``sdp_clipped_grad_sum``).

        ``frame`` is a C-contiguous float64 ``(dim, k)`` array or None.
        """
        m = self.n_rows if idx is None else idx.shape[0]
        k = self.dim if frame is None else frame.shape[1]
        total = np.empty(k)
        n_clipped = ctypes.c_longlong()
        err = ctypes.c_char_p()
        rc = self._lib.sdp_clipped_grad_sum(
            self._ptr, theta.ctypes.data, float(bound), None if frame is None else frame.ctypes.data,
            int(k), None if idx is None else idx.ctypes.data, m, total.ctypes.data,
            ctypes.byref(n_clipped), ctypes.byref(err),
        )
        if rc != 0:
            _raise(self._lib, err)
        return total, int(n_clipped.value)
