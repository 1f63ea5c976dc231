"""ctypes binding of the data-augmentation helpers of a stan_dp model library.

``sdp_model_construct_overlay`` builds a model instance on shared data (JSON,
parsed once per call, small) overlaid with record arrays held in memory, and
``sdp_augment_sweep`` runs one sweep of record accept/reject decisions
(see the end of ``bridge.cpp``).  Only :mod:`stan_dp.augmentation` uses them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence

import numpy as np

from stan_dp.native.rows import NativeError, _raise

_ERR = ctypes.POINTER(ctypes.c_char_p)
_DPTR = ctypes.POINTER(ctypes.c_double)

#: ``kind`` codes of ``sdp_augment_sweep``.
SWEEP_KINDS = {"l1": 1, "l2": 2}


def _declare(lib: ctypes.CDLL) -> None:
    if getattr(lib, "_stan_dp_overlay_declared", False):
        return
    if not hasattr(lib, "sdp_model_construct_overlay"):
        raise ValueError(
            f"{lib._name} has no data-augmentation extension; it was built by an older "
            "stan_dp: recompile it with stan_dp.compile_model"
        )
    lib.sdp_model_construct_overlay.restype = ctypes.c_void_p
    lib.sdp_model_construct_overlay.argtypes = [
        ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, _ERR,
    ]
    lib.bs_model_destruct.restype = None
    lib.bs_model_destruct.argtypes = [ctypes.c_void_p]
    lib.bs_param_unc_num.restype = ctypes.c_int
    lib.bs_param_unc_num.argtypes = [ctypes.c_void_p]
    lib.bs_log_density_gradient.restype = ctypes.c_int
    lib.bs_log_density_gradient.argtypes = [
        ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool, ctypes.c_void_p, _DPTR, ctypes.c_void_p, _ERR,
    ]
    lib.sdp_augment_sweep.restype = ctypes.c_longlong
    lib.sdp_augment_sweep.argtypes = [
        ctypes.c_longlong, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, _DPTR,
    ]
    lib.bs_free_error_msg.restype = None
    lib.bs_free_error_msg.argtypes = [ctypes.c_char_p]
    lib._stan_dp_overlay_declared = True


class OverlayModel:
    """One model instance on in-memory records; owns the native object."""

    def __init__(self, lib: ctypes.CDLL, ptr: int) -> None:
        self._lib = lib
        self._ptr = ctypes.c_void_p(ptr)
        self.dim = int(lib.bs_param_unc_num(self._ptr))

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr:
            self._lib.bs_model_destruct(ptr)
            self._ptr = None

    def log_density_gradient(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """``log p(θ | records)`` up to a constant (Jacobian included) and its gradient.

        A point Stan rejects gives ``-inf`` and a zero gradient.
        """
        theta = np.ascontiguousarray(theta, dtype=np.float64)
        val = ctypes.c_double()
        grad = np.zeros(self.dim)
        err = ctypes.c_char_p()
        rc = self._lib.bs_log_density_gradient(
            self._ptr, True, True, theta.ctypes.data, ctypes.byref(val), grad.ctypes.data,
            ctypes.byref(err),
        )
        if rc != 0:
            if err.value:
                self._lib.bs_free_error_msg(err)
            return -np.inf, np.zeros(self.dim)
        return float(val.value), grad


class OverlayBuilder:
    """Builds model instances on shared data plus in-memory record arrays.

    Parameters
    ----------
    lib : ctypes.CDLL
        A loaded stan_dp model library.
    base_json : str
        The shared data (everything but the record variables) as JSON.
    int_vars : mapping
        ``{record variable: is_int}``, in a fixed order.
    seed : int
        Seed for ``transformed data`` RNG calls.
    """

    def __init__(self, lib: ctypes.CDLL, base_json: str, int_vars: Mapping[str, bool], seed: int) -> None:
        _declare(lib)
        self._lib = lib
        self._base = base_json.encode()
        self._names = list(int_vars)
        self._c_names = (ctypes.c_char_p * len(self._names))(*[n.encode() for n in self._names])
        self._is_int = np.array([int(int_vars[n]) for n in self._names], dtype=np.intc)
        self._seed = int(seed)

    def build(self, records: Mapping[str, np.ndarray]) -> OverlayModel:
        """A model instance whose record variables hold ``records`` (first axis: records)."""
        flat = [np.ascontiguousarray(np.asarray(records[n], dtype=np.float64).ravel(order="F"))
                for n in self._names]
        shapes = [np.shape(records[n]) for n in self._names]
        n_dims = np.array([len(s) for s in shapes], dtype=np.intc)
        dims = np.array([d for s in shapes for d in s] or [0], dtype=np.longlong)
        ptrs = (ctypes.c_void_p * len(flat))(*[a.ctypes.data for a in flat])
        err = ctypes.c_char_p()
        ptr = self._lib.sdp_model_construct_overlay(
            self._base, len(self._names), self._c_names, self._is_int.ctypes.data,
            n_dims.ctypes.data, dims.ctypes.data, ptrs, self._seed, ctypes.byref(err),
        )
        if not ptr:
            _raise(self._lib, err, ValueError)
        return OverlayModel(self._lib, ptr)


def augment_sweep(lib: ctypes.CDLL, kind: str, s_dp: np.ndarray, weights: np.ndarray,
                  delta: np.ndarray, log_u: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, float]:
    """One sweep of record decisions in native code; updates ``s`` in place.

    Returns the boolean acceptance of every record and ``min_i min(0, log ratio_i)``.
    """
    _declare(lib)
    n, k = delta.shape
    for arr in (s_dp, weights, delta, log_u, s):
        if arr.dtype != np.float64 or not arr.flags.c_contiguous:
            raise ValueError("augment_sweep needs C-contiguous float64 arrays")
    accepted = np.empty(n, dtype=np.uint8)
    min_lr = ctypes.c_double()
    rc = lib.sdp_augment_sweep(
        n, k, SWEEP_KINDS[kind], s_dp.ctypes.data, weights.ctypes.data, delta.ctypes.data,
        log_u.ctypes.data, s.ctypes.data, accepted.ctypes.data, ctypes.byref(min_lr),
    )
    if rc < 0:  # pragma: no cover - kinds are validated above
        raise NativeError("bad sweep kind")
    return accepted.view(bool), float(min_lr.value)


__all__: Sequence[str] = ["OverlayBuilder", "OverlayModel", "augment_sweep", "SWEEP_KINDS"]
