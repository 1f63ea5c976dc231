"""ctypes binding of Stan's NUTS service (``sdp_nuts``) in a reference library.

A reference library is a model library compiled with
``compile_model(..., variant="reference")``; ``stan_dp/native/services.cpp``
defines the C functions bound here.  This is the only Python module that
knows their signatures.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import logging
import threading
from pathlib import Path
from typing import Callable

import numpy as np

logger = logging.getLogger(__name__)

_CHARP = ctypes.POINTER(ctypes.c_char)
_OUT_CHARP = ctypes.POINTER(_CHARP)

#: Return code of sdp_nuts when the model cannot be built from the data.
DATA_ERROR = -2


class NutsError(RuntimeError):
    """The NUTS service failed (the message is the sampler's own report)."""


class NutsDataError(ValueError):
    """The model could not be instantiated with the data."""


@dataclasses.dataclass(frozen=True)
class NutsSettings:
    """Stan's NUTS settings, named as in CmdStan (``sample adapt``, ``algorithm=hmc``)."""

    init_radius: float = 2.0
    stepsize: float = 1.0
    stepsize_jitter: float = 0.0
    max_depth: int = 10
    delta: float = 0.8
    gamma: float = 0.05
    kappa: float = 0.75
    t0: float = 10.0
    init_buffer: int = 75
    term_buffer: int = 50
    window: int = 25
    dense: bool = False
    """CmdStan's ``metric=dense_e`` (a full inverse metric adapted in warm-up) where true, else
    ``diag_e``."""

    def as_array(self) -> np.ndarray:
        """The ``options`` array of ``sdp_nuts``, in the order of its C struct."""
        return np.array([float(getattr(self, f.name)) for f in dataclasses.fields(self)])


@dataclasses.dataclass
class NutsOutput:
    """What ``sdp_nuts`` hands back.

    Attributes
    ----------
    names : list of str
        Column names: sampler diagnostics (``lp__`` ... ``energy__``), then the
        constrained parameters, transformed parameters and generated quantities.
    values : ndarray, shape (chains, warmup + draws, len(names))
        Every iteration, warm-up first.
    messages : str
        The sampler's log, one message per line.
    """

    names: list[str]
    values: np.ndarray
    messages: str


@functools.lru_cache(maxsize=None)
def load(library: Path) -> ctypes.CDLL:
    """Load a reference library and declare its ``sdp_nuts`` functions."""
    lib = ctypes.CDLL(str(library))
    if not (hasattr(lib, "sdp_nuts") and hasattr(lib, "sdp_nuts_option_count")):
        raise ValueError(
            f"{library} has no NUTS service (or one from an older stan_dp); build it with "
            "compile_model(..., variant='reference')"
        )
    lib.sdp_nuts.restype = ctypes.c_int
    lib.sdp_nuts.argtypes = [
        ctypes.c_char_p, ctypes.c_uint, ctypes.c_int, ctypes.c_int, ctypes.c_int,
        ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int), _OUT_CHARP, ctypes.POINTER(ctypes.POINTER(ctypes.c_double)),
        _OUT_CHARP, _OUT_CHARP,
    ]
    lib.sdp_nuts_option_count.restype = ctypes.c_int
    lib.sdp_nuts_option_count.argtypes = []
    lib.sdp_free.restype = None
    lib.sdp_free.argtypes = [ctypes.c_void_p]
    lib.sdp_stan_version.restype = ctypes.c_char_p
    lib.sdp_stan_version.argtypes = []
    return lib


def stan_version(lib: ctypes.CDLL) -> str:
    """The Stan version the service was compiled with (``"2.35.0"``)."""
    return lib.sdp_stan_version().decode()


def _take_string(lib: ctypes.CDLL, ptr: ctypes.POINTER(ctypes.c_char)) -> str:
    if not ptr:
        return ""
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        lib.sdp_free(ptr)


def run_nuts(
    lib: ctypes.CDLL,
    data_json: str,
    *,
    seed: int,
    chains: int,
    warmup: int,
    draws: int,
    settings: NutsSettings,
    threads: int,
    on_progress: Callable[[int], None] | None = None,
) -> NutsOutput:
    """Run ``chains`` chains of Stan's adaptive NUTS (diagonal or dense metric: ``settings.dense``).

    The native call runs in a helper thread so that Ctrl-C (KeyboardInterrupt)
    in the calling thread stops the chains at their next iteration.

    Parameters
    ----------
    lib : ctypes.CDLL
        A library returned by :func:`load`.
    data_json : str
        The model's data as a JSON document.
    seed : int
        Stan's seed (0 <= seed < 2**32); chain ``k`` uses chain id ``k``.
    chains, warmup, draws : int
        Number of chains; warm-up and post-warm-up iterations per chain.
    settings : NutsSettings
        Step-size adaptation and tree settings.
    threads : int
        Chains run at most this many at a time.
    on_progress : callable, optional
        Called now and then with the total number of iterations done.

    Raises
    ------
    NutsDataError
        If the model cannot be instantiated with the data.
    NutsError
        If a chain fails.
    KeyboardInterrupt
        If interrupted; the chains are stopped first.
    """
    stop = ctypes.c_int(0)
    progress = np.zeros(chains, dtype=np.int64)
    options = settings.as_array()
    if lib.sdp_nuts_option_count() != options.size:   # a library built from other services
        raise NutsError(f"the reference library reads {lib.sdp_nuts_option_count()} NUTS options, "
                        f"this binding passes {options.size}: rebuild it (compile_model(..., "
                        "variant='reference'))")
    n_cols = ctypes.c_int(0)
    header, messages, error = _CHARP(), _CHARP(), _CHARP()
    values = ctypes.POINTER(ctypes.c_double)()
    result: list[int] = []

    def call() -> None:
        result.append(lib.sdp_nuts(
            data_json.encode(), seed, chains, warmup, draws,
            options.ctypes.data, threads, ctypes.addressof(stop), progress.ctypes.data,
            ctypes.byref(n_cols), ctypes.byref(header), ctypes.byref(values),
            ctypes.byref(messages), ctypes.byref(error),
        ))

    worker = threading.Thread(target=call, name="stan_dp-nuts", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
            if on_progress is not None:
                on_progress(int(progress.sum()))
    except KeyboardInterrupt:
        stop.value = 1
        worker.join()
        logger.warning("reference NUTS interrupted after %d of %d iterations",
                       int(progress.sum()), chains * (warmup + draws))
        _take_string(lib, header)
        _take_string(lib, messages)
        _take_string(lib, error)
        if values:
            lib.sdp_free(values)
        raise
    log = _take_string(lib, messages)
    names = _take_string(lib, header)
    if result[0] != 0:
        message = _take_string(lib, error)
        raise (NutsDataError if result[0] == DATA_ERROR else NutsError)(message)
    try:
        count = chains * (warmup + draws) * n_cols.value
        flat = np.ctypeslib.as_array(values, shape=(count,)).copy()
    finally:
        lib.sdp_free(values)
    return NutsOutput(
        names=names.split(",") if names else [],
        values=flat.reshape(chains, warmup + draws, n_cols.value),
        messages=log,
    )
