"""Sharded models on Dask: rows held by workers, or by separate data owners.

A :class:`ShardedModel` is built from a Dask ``distributed.Client``, a Stan
program and one data source per shard (a JSON path that the worker holding
the shard opens itself).  Each shard lives in a Dask *actor*
(:class:`ShardActor`), a :class:`stan_dp.RowModel` of that shard's rows
resident on its worker, and answers the aggregate queries of
:mod:`stan_dp.aggregates` there: clipped log-ratio sums, clipped gradient
sums, per-row statistics kept where the rows are and additive reductions of
them.  The driver fans a query out to every shard at once, merges the
partial results with :meth:`~stan_dp.aggregates.RatioSums.merge` /
:meth:`~stan_dp.aggregates.GradSum.merge`, and never holds a row or a
per-row value.  Every sampler that is written against
:func:`stan_dp.aggregates.queries` runs on it unchanged.

Two noise placements
--------------------
*Single curator* (``owners=False``): shards return clipped partial sums; the
sampler, on the driver, adds the noise once.  With a fixed seed the draws are
those of the in-process run on the concatenated data (up to the rounding of
summing per shard, see ``docs/distributed.md``).

*Multi-owner* (``owners=True``, Yıldırım's Algorithm 2): every shard is one
data owner on its own worker.  The only data query an owner answers is
:meth:`ShardedModel.release_owner_ratio_sums`: the owner computes its clipped
log-ratio sum and adds its own Gaussian noise on its worker before anything
leaves it (the owner's actor enforces this, not just the driver); the
un-noised queries are refused on both sides (:class:`OwnerNoiseError`).

What the driver learns
----------------------
The shards' sizes (to translate global row indices and to know ``n``) and the
shared, non-row data (the zero-row model, for the prior and the parameter
transforms).  The sizes are public under the replace-one relation (a
neighbouring data set changes one row's values, never which shard holds how
many rows).  Under add/remove they are private.  With a single curator the
driver is the curator: it knows the sizes as an in-process driver knows
``n``, and publishes nothing derived from them (the samplers' add/remove
rules for ``n``), so both relations work.  In owners mode the sizes leave
the owners for a driver they do not trust: that mode is replace-one only
(:attr:`ShardedModel.relations`).  Shared data are public in this
package's privacy model: the prior depends on them and on no row.

Faults
------
A query whose shard's worker dies (connection closed, worker killed, actor
gone) is retried on a recreated actor, on a live or restarted worker that
reloads the shard's data source itself.  A result that never arrived was
never released, so the retry costs no budget.  After ``max_attempts`` failed
attempts the query raises :class:`ShardFailure` (naming the shard and the
cause), which stops the run: nothing un-accounted is returned.

``distributed`` is an optional dependency (``pip install stan_dp[distributed]``);
this module imports it only when a ShardedModel is built.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from stan_dp.aggregates import GradSum, RatioSums, RowStatistic, local_statistic, queries
from stan_dp.data import zero_row_data
from stan_dp.mechanisms import gaussian_release
from stan_dp.model import ZeroRowPart
from stan_dp.params import ParamLayout
from stan_dp.secure_noise import SecureNoise

logger = logging.getLogger(__name__)

__all__ = [
    "OwnerNoiseError",
    "ShardActor",
    "ShardFailure",
    "ShardedModel",
    "zero_row_data",
]

#: RowModel keyword arguments a ShardedModel passes on to every shard.
ROWMODEL_OPTIONS = ("row_vars", "threads", "seed", "check", "stanc_args", "cache_dir", "cmdstan")


#: Shard methods that always run in the actor's thread pool, whatever ``inline``:
#: a row statistic of the private adaptation evaluates 2 dim + 1 gradients per
#: row (about a minute on 2e6 rows at dim 11), too long to hold a worker's event
#: loop (its heartbeats and comms stop meanwhile).
_HEAVY = frozenset({"statistic"})


class ShardFailure(RuntimeError):
    """A shard could not answer a query (or be built) after the allowed attempts.

    Attributes
    ----------
    shard : int
        Index of the shard in the ``shards`` list.
    source : str
        The shard's data source (a path; not data).
    reason : str
        What failed: the infrastructure's error (a closed connection, a
        worker that did not come back) or the error of reloading the data
        source.  It quotes no data value.
    """

    def __init__(self, shard: int, source: str, reason: str) -> None:
        self.shard = shard
        self.source = source
        self.reason = reason
        super().__init__(f"shard {shard} ({source}) failed: {reason}")


class OwnerNoiseError(RuntimeError):
    """An un-noised query on a multi-owner model: only noised releases may leave an owner."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# ------------------------------------------------------------------ worker side

def _worker_threads() -> int | None:
    """Threads of the Dask worker this runs on (its share of the cores), if on a worker."""
    try:
        from distributed import get_worker

        return max(1, int(get_worker().state.nthreads))
    except Exception:  # noqa: BLE001 - not on a worker
        return None


CALLS = frozenset({"describe", "ping", "ratio_sums", "grad_sum", "set_groups", "statistic",
                   "reduce", "drop", "release", "release_count"})
"""The ShardActor methods a driver may call (through :meth:`ShardActor.call`)."""


class ShardActor:
    """One shard's rows, resident on a Dask worker (created with ``actor=True``).

    The worker opens the data source itself; the rows and every per-row value
    stay in this object.  Methods return clipped sums (single curator), or
    only noised sums (``owner=True``).

    Parameters
    ----------
    library : str
        The compiled model library (:func:`stan_dp.toolchain.as_library`).
        A worker on which it does not exist compiles ``stan_file`` itself.
    stan_file : str or None
        The Stan program.
    source : str
        The shard's data file (Stan JSON), read on the worker.
    rows : str
        The row-count variable.
    options : dict
        :class:`stan_dp.RowModel` keyword arguments; ``threads`` defaults to
        the worker's thread count.
    owner : bool
        Multi-owner: answer only noised releases.
    """

    def __init__(self, library: str, stan_file: str | None, source: str, rows: str,
                 options: Mapping[str, Any], owner: bool = False) -> None:
        import stanio

        from stan_dp.data import load_data
        from stan_dp.model import RowModel
        from stan_dp.toolchain import as_library

        start = time.perf_counter()
        opts = dict(options)
        lib: str | Path = library
        if not Path(library).exists():
            if stan_file is None:
                raise FileNotFoundError(f"model library not found on this worker: {library}")
            lib = as_library(stan_file, opts.get("stanc_args", ()), opts.get("cache_dir"),
                             cmdstan=opts.get("cmdstan"))
        if opts.get("threads") is None:
            opts["threads"] = _worker_threads()
        self.model = RowModel(lib, source, rows=rows, **opts)
        # The shared data (public), for the driver's zero-row model.  The file is
        # parsed a second time here: RowModel keeps no parsed values.
        _, values = load_data(source)
        self.zero_row_json = stanio.dump_stan_json(zero_row_data(values, rows, self.model.row_vars))
        del values
        self.owner = bool(owner)
        self.n_rows = int(self.model.n_rows)
        self._queries = queries(self.model)
        self._stats: dict[str, RowStatistic] = {}
        self._groups: dict[str, np.ndarray] = {}
        self.releases = 0
        self.build_seconds = time.perf_counter() - start

    # -- facts (public: sizes, names, shared data) --
    def describe(self) -> dict[str, Any]:
        """Public facts of the shard: size, dimension, names, shared data, process."""
        return {
            "n_rows": self.n_rows,
            "dim": int(self.model.dim),
            "param_names": list(self.model.param_names),
            "row_vars": list(self.model.row_vars),
            "zero_row_json": self.zero_row_json,
            "pid": os.getpid(),
            "threads": int(self.model.threads),
            "build_seconds": self.build_seconds,
        }

    def ping(self) -> int:
        """A no-op round trip (latency measurements)."""
        return 0

    def call(self, blob: bytes) -> bytes:
        """Run one of the methods in :data:`CALLS` from a pickled ``(name, args)``; pickled result.

        The driver sends every query this way: one bytes object, pickled
        once, instead of one Dask-serialised object per argument (which cost
        ~0.5 ms per request here, half of a round trip).
        """
        from distributed.protocol import pickle as dask_pickle

        name, args = dask_pickle.loads(blob)
        if name not in CALLS:
            raise AttributeError(f"ShardActor has no query {name!r}")
        return dask_pickle.dumps(getattr(self, name)(*args))

    def _refuse_if_owner(self) -> None:
        if self.owner:
            raise OwnerNoiseError("this shard belongs to a data owner: it releases only noised "
                                  "sums (release), never un-noised sums or statistics")

    # -- single-curator queries --
    def ratio_sums(self, theta_new: np.ndarray, theta_old: np.ndarray, bound: float,
                   pre_scale: float, post_scale: float, rows: np.ndarray | None,
                   groups: np.ndarray | str | None, n_groups: int) -> RatioSums:
        """:meth:`stan_dp.aggregates.AggregateDensity.clipped_ratio_sums` on this shard (local rows)."""
        self._refuse_if_owner()
        if isinstance(groups, str):
            groups = self._groups[groups]
        return self._queries.clipped_ratio_sums(theta_new, theta_old, bound, pre_scale=pre_scale,
                                                post_scale=post_scale, rows=rows, groups=groups,
                                                n_groups=n_groups)

    def grad_sum(self, theta: np.ndarray, bound: float, rows: np.ndarray | None,
                 frame: np.ndarray | None) -> GradSum:
        """:meth:`stan_dp.aggregates.AggregateDensity.clipped_grad_sum` on this shard."""
        self._refuse_if_owner()
        return self._queries.clipped_grad_sum(theta, bound, rows=rows, frame=frame)

    def set_groups(self, key: str, groups: np.ndarray) -> None:
        """Keep this shard's slice of a per-row group index under ``key``."""
        self._refuse_if_owner()
        self._groups = {key: np.asarray(groups)}

    def statistic(self, key: str, fn: Callable[..., np.ndarray], args: tuple) -> int:
        """Compute ``fn(model, *args)`` per row and keep it under ``key``; return its columns."""
        self._refuse_if_owner()
        stat = local_statistic(self.model, fn, *args)
        if stat.key.shape[0] != self.n_rows:
            raise ValueError("a row statistic must have one row per data row")
        self._stats[key] = stat
        return int(stat.columns)

    def reduce(self, key: str, fn: Callable[..., np.ndarray], args: tuple) -> np.ndarray:
        """``fn(statistic, *args)`` on this shard's rows (additive over rows)."""
        self._refuse_if_owner()
        return np.asarray(fn(self._stats[key].key, *args), dtype=float)

    def drop(self, keys: Sequence[str]) -> None:
        """Forget statistics the driver no longer holds a handle to."""
        for key in keys:
            self._stats.pop(key, None)

    # -- multi-owner release --
    def release_count(self) -> int:
        """Releases this owner has made (its own ledger; public: the run's plan fixes it)."""
        return self.releases

    def release(self, seed: int | None, theta_new: np.ndarray, theta_old: np.ndarray,
                bound: float, sd: float, temperature: float) -> float:
        """``temperature * Σ clip(l_j(θ') − l_j(θ), ±bound) + N(0, sd²)`` over this shard's rows.

        The noise is drawn here, before the value leaves the worker: from a
        fresh :class:`~stan_dp.secure_noise.SecureNoise` when ``seed`` is None
        (publishable runs), else from ``numpy.random.default_rng(seed)``
        (seeded runs, reproducible: the driver that chose the seed can
        recompute the noise, so such a run does not protect the owner from
        the driver; it is labelled seeded like every seeded run).

        Raises
        ------
        ValueError
            If ``sd`` is not positive and finite, or ``bound`` or
            ``temperature`` are not finite (a release without noise, or with an
            unbounded sensitivity, would not be private).
        """
        sd, bound, temperature = float(sd), float(bound), float(temperature)
        if not (np.isfinite(sd) and sd > 0.0):
            raise ValueError(f"an owner releases only with positive finite noise, got sd={sd!r}")
        if not (np.isfinite(bound) and bound >= 0.0):
            raise ValueError(f"an owner releases only clipped sums (finite bound), got {bound!r}")
        if not (np.isfinite(temperature) and temperature > 0.0):
            raise ValueError(f"temperature must be positive and finite, got {temperature!r}")
        sums = self._queries.clipped_ratio_sums(theta_new, theta_old, bound)
        with np.errstate(all="ignore"):
            value = temperature * float(sums.totals[0])
        rng: Any = SecureNoise() if seed is None else np.random.default_rng(int(seed))
        released = float(gaussian_release(rng, value, sd))
        self.releases += 1
        return released


# ------------------------------------------------------------------ driver side

@dataclass
class _Shard:
    index: int
    source: str
    placement: Any           # worker name (or address) the shard is pinned to
    n_rows: int = -1
    future: Any = None       # keeps the actor alive
    key: str = ""
    address: str = ""
    pid: int = -1
    build_seconds: float = float("nan")


class _Lost(Exception):
    """A shard did not answer (infrastructure failure)."""


class ShardedModel(ZeroRowPart):
    """A Stan model whose rows are split over Dask workers (or data owners).

    Parameters
    ----------
    client : distributed.Client
        A synchronous client of the cluster.
    stan_file : path
        The Stan program (or a compiled library); compiled on the driver,
        which reads only the program.  Workers load the compiled library
        from the same path, or compile the program themselves where the
        library is missing (on other machines: the program must be at the
        same path there, e.g. on a shared file system).
    shards : sequence of path
        One Stan JSON data file per shard, opened by the worker that holds the
        shard (never by the driver).  Each holds the shard's rows and the same
        shared (non-row) data.  Global row ``i`` is row ``i - offset_k`` of
        shard ``k``, offsets in shard order.
    rows : str, default "N"
        The row-count variable.
    owners : bool, default False
        Multi-owner placement: each shard is one data owner that adds its own
        noise; only :meth:`release_owner_ratio_sums` is allowed (the penalty
        sampler).
    owner_labels : sequence of str, optional
        Public owner labels, one per shard (owners mode); default ``"0"``,
        ``"1"``, ...
    workers : sequence, optional
        Worker name or address per shard.  Default: the workers sorted by
        name, shard ``k`` on worker ``k mod W``.  In owners mode every shard
        needs its own worker.
    max_attempts : int, default 3
        Attempts per shard and query (the first included) before
        :class:`ShardFailure`.
    timeout : float, optional
        Seconds one shard may take to answer one query before it counts as
        failed (default: no limit; a dead worker is detected by its closed
        connection).
    restart_timeout : float, default 60
        Seconds to wait for a live worker (owners: the owner's own worker)
        when a shard is recreated.
    inline : bool, default True
        Run each query on the worker's event loop instead of its actor
        thread pool: one thread hop less per round trip (0.2-0.6 ms on the
        2-core test machine), but the worker's loop is busy while a query
        computes (Dask logs a warning past ~3 s).  Set False for shards whose
        queries take seconds.  The adaptation's row statistics always run in
        the thread pool.
    **rowmodel_kwargs
        ``row_vars``, ``threads`` (default: the worker's thread count),
        ``seed``, ``check``, ``stanc_args``, ``cache_dir``, ``cmdstan``, as
        for :class:`stan_dp.RowModel`.

    Attributes
    ----------
    n_rows : int
        Total rows (the sum of the public shard sizes).
    shard_sizes : tuple of int
        Rows per shard, public under replace-one.
    relations : tuple of str
        The neighbouring relations the model supports: both with a single
        curator (the driver is the curator; under add/remove it treats the
        shard sizes as it treats ``n``, publishing nothing derived from
        them), ``("replace_one",)`` in owners mode (the owners' sizes reach
        the driver, public only under replace-one).  A sampler must refuse
        any other.
    owner_noise : bool
        True in owners mode (samplers then ask for released values only).
    owner_labels : list of str
        Owners mode only.

    Raises
    ------
    ShardFailure
        If a shard cannot be built (its data source cannot be read or is
        rejected by the model).
    ValueError
        For bad arguments, or shards whose shared data, parameters or row
        variables differ.
    """

    def __init__(self, client: Any, stan_file: str | os.PathLike[str], shards: Sequence[Any],
                 rows: str = "N", owners: bool = False, *,
                 owner_labels: Sequence[str] | None = None, workers: Sequence[Any] | None = None,
                 max_attempts: int = 3, timeout: float | None = None,
                 restart_timeout: float = 60.0, inline: bool = True,
                 **rowmodel_kwargs: Any) -> None:
        import bridgestan
        import distributed

        from stan_dp.native.rows import NativeRows
        from stan_dp.toolchain import as_library

        if not isinstance(client, distributed.Client):
            raise TypeError(f"client must be a distributed.Client, got {type(client).__name__}")
        if client.asynchronous:
            raise ValueError("ShardedModel needs a synchronous Client (asynchronous=False)")
        if isinstance(shards, (str, os.PathLike)) or len(shards) == 0:
            raise ValueError("shards must be a non-empty list of data sources (one path per shard)")
        if not isinstance(rows, str) or not rows:
            raise ValueError("rows must be the name of the data variable that counts rows")
        if not isinstance(owners, (bool, np.bool_)):
            raise ValueError("owners must be a bool")
        unknown = sorted(set(rowmodel_kwargs) - set(ROWMODEL_OPTIONS))
        if "public_data" in unknown:
            raise ValueError("public_data is not supported by ShardedModel yet: declare the "
                             "constants in each shard's data and in the data block instead")
        if unknown:
            raise TypeError(f"unexpected argument(s): {', '.join(unknown)}")
        if not isinstance(max_attempts, (int, np.integer)) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive integer, got {max_attempts!r}")
        if timeout is not None and not float(timeout) > 0:
            raise ValueError(f"timeout must be positive or None, got {timeout!r}")
        k = len(shards)
        if owner_labels is not None:
            if not owners:
                raise ValueError("owner_labels is for owners=True")
            owner_labels = [str(label) for label in owner_labels]
            if len(owner_labels) != k or len(set(owner_labels)) != k:
                raise ValueError("owner_labels must give one distinct label per shard")

        self._client = client
        self.owner_noise = bool(owners)
        self.relations = ("replace_one",) if owners else ("replace_one", "add_remove")
        self.rows_var = rows
        self.max_attempts = int(max_attempts)
        self.timeout = None if timeout is None else float(timeout)
        self.restart_timeout = float(restart_timeout)
        self.inline = bool(inline)
        self._options = {key: value for key, value in rowmodel_kwargs.items()}
        stanc_args = tuple(str(a) for a in self._options.get("stanc_args", ()))
        self._options["stanc_args"] = stanc_args
        self._stanc_args, self._cmdstan = stanc_args, self._options.get("cmdstan")
        self.library = Path(as_library(stan_file, stanc_args, self._options.get("cache_dir"),
                                       cmdstan=self._cmdstan))
        source = Path(stan_file)
        self.stan_file = source.resolve() if source.suffix == ".stan" else None
        self._token = uuid.uuid4().hex
        self._lock = threading.RLock()
        self._recipes: dict[str, tuple[Callable[..., np.ndarray], tuple]] = {}
        self._dead_stats: list[str] = []
        self._groups_key: str | None = None
        self._groups_value: np.ndarray | None = None
        self.zero_row_json: str | None = None
        self.recoveries = 0

        placement = self._placement(workers, k)
        self._shards = [_Shard(i, str(path), placement[i]) for i, path in enumerate(shards)]
        try:
            self._build([s.index for s in self._shards])
            facts = self._call("describe", {s.index: () for s in self._shards})
            first = facts[0]
            for i in range(1, k):
                other = facts[i]
                for field in ("dim", "param_names", "row_vars"):
                    if other[field] != first[field]:
                        raise ValueError(f"shard {i} differs from shard 0 in its "
                                         f"{field.replace('_', ' ')}")
                if other["zero_row_json"] != first["zero_row_json"]:
                    a, b = json.loads(first["zero_row_json"]), json.loads(other["zero_row_json"])
                    names = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
                    raise ValueError(f"shard {i}'s shared (non-row) data differ from shard 0's: "
                                     f"{', '.join(names)} (every shard needs the same shared data)")
            for s in self._shards:
                s.n_rows = int(facts[s.index]["n_rows"])
                s.build_seconds = float(facts[s.index]["build_seconds"])
            self.shard_sizes = tuple(s.n_rows for s in self._shards)
            self._offsets = np.concatenate([[0], np.cumsum(self.shard_sizes)]).astype(np.int64)
            self.n_rows = int(self._offsets[-1])
            self.row_vars = tuple(first["row_vars"])
            self.zero_row_json = first["zero_row_json"]
            seed = int(self._options.get("seed", 1234))
            # The driver's zero-row model: prior, Jacobian and transforms, no row.
            self.bridge = bridgestan.StanModel(str(self.library), self.zero_row_json, seed=seed,
                                               warn=False)
            self._zero = NativeRows(self.bridge.stanlib, self.zero_row_json, rows,
                                     list(self.row_vars), seed, 1)
            self.dim = int(self._zero.dim)
            self.param_names = list(self.bridge.param_names())
            if self.param_names != list(first["param_names"]) or self.dim != int(first["dim"]):
                raise ValueError("the model's parameters depend on the rows (the zero-row model "
                                 "differs from the shards'); such a model cannot be split into rows")
            self._layout = ParamLayout(self.param_names)
            if self.owner_noise:
                self.owner_labels = owner_labels or [str(i) for i in range(k)]
        except BaseException:
            self.close()   # no actor outlives a model that failed to build
            raise

    # ------------------------------------------------------------ placement --
    def _workers(self) -> dict[str, Any]:
        """Live workers: address -> name."""
        info = self._client.scheduler_info(n_workers=-1)["workers"]
        return {addr: w.get("name", addr) for addr, w in info.items()}

    def _placement(self, workers: Sequence[Any] | None, k: int) -> list[Any]:
        live = self._workers()
        if not live:
            raise ValueError("the cluster has no workers")
        if workers is None:
            names = sorted(live.values(), key=lambda n: (str(type(n)), n))
            chosen = [names[i % len(names)] for i in range(k)]
        else:
            chosen = list(workers)
            if len(chosen) != k:
                raise ValueError("workers must name one worker per shard")
        if self.owner_noise and len(set(map(str, chosen))) != k:
            raise ValueError(f"owners=True places each owner's shard on its own worker: {k} shards "
                             f"need {k} distinct workers (the cluster has {len(live)})")
        return chosen

    def _address_of(self, placement: Any, live: Mapping[str, Any]) -> str | None:
        if placement in live:
            return placement
        for addr, name in live.items():
            if name == placement or str(name) == str(placement):
                return addr
        return None

    # ---------------------------------------------------------------- build --
    def _submit(self, shard: _Shard, address: str) -> None:
        shard.key = f"stan_dp-shard-{shard.index}-{uuid.uuid4().hex[:12]}"
        shard.address = address
        shard.future = self._client.submit(
            ShardActor, str(self.library), None if self.stan_file is None else str(self.stan_file),
            shard.source, self.rows_var, self._options, self.owner_noise,
            actor=True, workers=[address], allow_other_workers=False, pure=False, key=shard.key)

    def _await_actor(self, shard: _Shard, deadline: float | None) -> None:
        """Wait for an actor to be built, watching its worker; raise _Lost or the build error."""
        from distributed import wait

        while True:
            try:
                wait(shard.future, timeout=0.5)
            except TimeoutError:
                if shard.address not in self._workers():
                    raise _Lost(f"worker {shard.address} died while loading the data source") from None
                if deadline is not None and time.monotonic() > deadline:
                    raise _Lost("loading the data source timed out") from None
                continue
            break
        if shard.future.status == "error":
            exc = shard.future.exception()
            if type(exc).__name__ == "KilledWorker":
                raise _Lost(_first_line(exc))
            raise exc
        if shard.future.status != "finished":
            raise _Lost(f"the shard's actor is {shard.future.status}")
        actor = shard.future.result()
        shard.address = getattr(actor, "_address", shard.address)

    def _build(self, indices: Sequence[int]) -> None:
        live = self._workers()
        for i in indices:
            shard = self._shards[i]
            address = self._address_of(shard.placement, live)
            if address is None:
                raise ValueError(f"no live worker named {shard.placement!r} for shard {i}")
            self._submit(shard, address)
        for i in indices:
            shard = self._shards[i]
            try:
                self._await_actor(shard, None)
            except _Lost as exc:
                raise ShardFailure(i, shard.source, str(exc)) from None
            except Exception as exc:  # noqa: BLE001 - the shard's own error, reported with its shard
                raise ShardFailure(i, shard.source,
                                   f"could not load its data source: {_first_line(exc)}") from None

    # ----------------------------------------------------------- recovery --
    def _release_future(self, shard: _Shard) -> None:
        future, shard.future = shard.future, None
        if future is not None:
            try:
                future.release()
            except Exception:  # noqa: BLE001 - a dead actor may already be gone
                pass

    def _choose_worker(self, shard: _Shard, dead: str) -> str:
        deadline = time.monotonic() + self.restart_timeout
        while True:
            live = {a: n for a, n in self._workers().items() if a != dead}
            pinned = self._address_of(shard.placement, live)
            if pinned is not None:
                return pinned
            if live and not self.owner_noise:
                load = {a: 0 for a in live}
                for other in self._shards:
                    if other is not shard and other.address in load:
                        load[other.address] += 1
                return min(sorted(load), key=lambda a: load[a])
            if time.monotonic() > deadline:
                who = f"its owner's worker {shard.placement!r}" if self.owner_noise else "a live worker"
                raise _Lost(f"{who} did not come back within {self.restart_timeout:g} s")
            time.sleep(0.2)

    def _recover(self, index: int) -> None:
        """Recreate a shard's actor on a live worker and restore its state."""
        shard = self._shards[index]
        dead = shard.address
        self._release_future(shard)
        address = self._choose_worker(shard, dead)
        logger.info("shard %d: recreating its actor on %s", index, address)
        self._submit(shard, address)
        deadline = None if self.timeout is None else time.monotonic() + max(self.timeout, 60.0)
        try:
            self._await_actor(shard, deadline)
        except _Lost:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as the cause of the failure
            raise _Lost(f"could not reload its data source: {_first_line(exc)}") from None
        facts = self._one(index, "describe", ())
        known = shard.n_rows >= 0 and self.zero_row_json is not None
        if known and (facts["n_rows"] != shard.n_rows or facts["zero_row_json"] != self.zero_row_json):
            raise _Lost("its data source changed (another size or other shared data)")
        shard.pid = int(facts["pid"])
        if self._groups_key is not None and not self.owner_noise:
            o = self._offsets
            self._one(index, "set_groups", (self._groups_key, self._groups_value[o[index]:o[index + 1]]))
        for key, (fn, args) in list(self._recipes.items()):
            self._one(index, "statistic", (key, fn, args))
        self.recoveries += 1

    def _one(self, index: int, method: str, args: tuple) -> Any:
        """One call on one shard, no retry: _Lost on an infrastructure failure."""
        (_, status, value), = self._client.sync(self._gather, method, {index: args}, self.timeout)
        if status == "ok":
            return value
        if status == "error":
            raise value
        raise _Lost(_first_line(value))

    # ------------------------------------------------------------- fan-out --
    async def _gather(self, method: str, calls: Mapping[int, tuple],
                      timeout: float | None) -> list[tuple[int, str, Any]]:
        """Call ``method`` on the given shards at once (on the client's event loop).

        Straight to each shard's worker (Dask's actor RPC, ``actor_execute``,
        without the scheduler in between), arguments pickled once per shard.
        """
        from distributed.protocol import pickle as dask_pickle

        async def one(index: int, args: tuple) -> tuple[int, str, Any]:
            shard = self._shards[index]
            try:
                if shard.future is None or not shard.address:
                    raise _Lost("the shard has no actor")
                call = self._client.rpc(shard.address).actor_execute(
                    function="call", actor=shard.key, args=[dask_pickle.dumps((method, args))],
                    kwargs={"separate_thread": False} if self.inline and method not in _HEAVY else {})
                response = await (call if timeout is None else asyncio.wait_for(call, timeout))
            except Exception as exc:  # noqa: BLE001 - any failure to get an answer: lost
                return index, "lost", exc
            if response.get("status") == "OK":
                return index, "ok", dask_pickle.loads(response["result"])
            return index, "error", response.get("exception")

        return list(await asyncio.gather(*(one(i, a) for i, a in calls.items())))

    def _call(self, method: str, calls: Mapping[int, tuple]) -> dict[int, Any]:
        """Fan ``method`` out to shards, retrying lost shards on recreated actors.

        A shard's application error (e.g. a bad argument) is raised as is; an
        infrastructure failure is retried up to ``max_attempts`` times per
        shard, then raised as :class:`ShardFailure`.  Results already
        received from the other shards are kept, not asked again (in owners
        mode those are noised releases; asking again would release twice).
        """
        with self._lock:
            results: dict[int, Any] = {}
            attempts = dict.fromkeys(calls, 0)
            pending = dict(calls)
            while pending:
                out = self._client.sync(self._gather, method, pending, self.timeout)
                lost: dict[int, BaseException] = {}
                for index, status, value in out:
                    if status == "ok":
                        results[index] = value
                    elif status == "error":
                        raise value
                    else:
                        lost[index] = value
                for index, exc in lost.items():
                    reason = _first_line(exc)
                    while True:
                        attempts[index] += 1
                        if attempts[index] >= self.max_attempts:
                            shard = self._shards[index]
                            raise ShardFailure(index, shard.source,
                                               f"no answer after {attempts[index]} attempt(s); "
                                               f"last: {reason}")
                        logger.warning("shard %d did not answer (%s); recreating it", index, reason)
                        try:
                            self._recover(index)
                            break
                        except _Lost as err:
                            reason = str(err)
                pending = {index: calls[index] for index in lost}
            return results

    # -------------------------------------------------------- row indices --
    def _split(self, rows: Any, groups: Any) -> dict[int, tuple[Any, Any]]:
        """Per shard: (local rows or None, groups key or None); shards without requested rows left out.

        ``groups`` gives every data row's group (length ``n_rows``, indexed by
        global row, whatever ``rows`` is); each shard keeps its slice, sent once.
        """
        k = len(self._shards)
        o = self._offsets
        key = None
        if groups is not None:
            g = np.asarray(groups)
            if g.shape != (self.n_rows,):
                raise ValueError("groups must give one group index per data row (length n_rows)")
            key = self._register_groups(g)
        if rows is None:
            return {i: (None, key) for i in range(k)}
        idx = np.asarray(rows)
        if idx.ndim != 1:
            raise ValueError("rows must be a one-dimensional array of row indices")
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"row indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_rows):
            raise IndexError("row indices must lie in [0, n_rows)")
        which = np.searchsorted(o, idx, side="right") - 1
        out = {}
        for i in range(k):
            mask = which == i
            if mask.any():
                out[i] = (idx[mask] - o[i], key)
        return out

    def _register_groups(self, groups: np.ndarray) -> str:
        """Send a per-row group index to the shards once; later calls pass its key."""
        if (self._groups_key is not None and self._groups_value is not None
                and np.array_equal(groups, self._groups_value)):
            return self._groups_key
        key = uuid.uuid4().hex
        value = np.array(groups, copy=True)
        o = self._offsets
        self._call("set_groups", {i: (key, value[o[i]:o[i + 1]]) for i in range(len(self._shards))})
        self._groups_key, self._groups_value = key, value
        return key

    def _refuse_if_owners(self, what: str) -> None:
        if self.owner_noise:
            raise OwnerNoiseError(
                f"{what} is refused on a multi-owner ShardedModel (owners=True): it would carry "
                "un-noised sums out of the owners; only release_owner_ratio_sums (each owner adds "
                "its own noise) is allowed, i.e. the penalty sampler")

    # ------------------------------------------------------------ queries --
    def clipped_ratio_sums(self, theta_new: np.ndarray, theta_old: np.ndarray, bound: float, *,
                           pre_scale: float = 1.0, post_scale: float = 1.0,
                           rows: np.ndarray | None = None, groups: np.ndarray | None = None,
                           n_groups: int = 1) -> RatioSums:
        """Clipped log-ratio sums over the shards (:mod:`stan_dp.aggregates`), merged.

        ``rows`` are global row indices; ``groups`` gives every data row's
        group (length ``n_rows``, indexed by global row).
        """
        self._refuse_if_owners("clipped_ratio_sums")
        new, old = self._theta(theta_new), self._theta(theta_old)
        n_groups = int(n_groups)
        parts = self._split(rows, groups)
        if not parts:
            return RatioSums(np.zeros(n_groups), 0, 0.0, 0)
        out = self._call("ratio_sums", {
            i: (new, old, float(bound), float(pre_scale), float(post_scale), r, g, n_groups)
            for i, (r, g) in parts.items()})
        return RatioSums.merge([out[i] for i in sorted(out)])

    def clipped_grad_sum(self, theta: np.ndarray, bound: float, *, rows: np.ndarray | None = None,
                         frame: np.ndarray | None = None) -> GradSum:
        """Sum of per-row gradients (``frameᵀ g_j``) clamped to the l2 ball, over the shards."""
        self._refuse_if_owners("clipped_grad_sum")
        th = self._theta(theta)
        f = None if frame is None else np.asarray(frame, dtype=float)
        parts = self._split(rows, None)
        if not parts:
            return GradSum(np.zeros(self.dim if f is None else f.shape[1]), 0)
        out = self._call("grad_sum", {i: (th, float(bound), r, f) for i, (r, _) in parts.items()})
        return GradSum.merge([out[i] for i in sorted(out)])

    def _drop_dead(self) -> None:
        if self._dead_stats:
            dead, self._dead_stats[:] = list(self._dead_stats), []
            for key in dead:
                self._recipes.pop(key, None)
            self._call("drop", {s.index: (dead,) for s in self._shards})

    def row_statistic(self, fn: Callable[..., np.ndarray], *args: Any) -> RowStatistic:
        """``fn(shard_model, *args)`` per row, computed and kept on the shards; a handle back.

        ``fn`` must be a module-level (picklable) pure function returning one
        row per data row.  The handle holds a key only.
        """
        self._refuse_if_owners("row_statistic")
        with self._lock:
            self._drop_dead()
            key = uuid.uuid4().hex
            self._recipes[key] = (fn, tuple(args))
            try:
                cols = self._call("statistic", {s.index: (key, fn, tuple(args)) for s in self._shards})
            except BaseException:
                self._recipes.pop(key, None)
                raise
        columns = set(cols.values())
        if len(columns) != 1:
            raise ValueError("the statistic has a different number of columns on different shards")
        handle = RowStatistic((self._token, key), columns.pop())
        weakref.finalize(handle, self._dead_stats.append, key)
        return handle

    def reduce(self, stat: RowStatistic, fn: Callable[..., np.ndarray], *args: Any) -> np.ndarray:
        """``Σ over shards of fn(shard's statistic, *args)``; ``fn`` additive over rows."""
        self._refuse_if_owners("reduce")
        key = stat.key
        if not (isinstance(key, tuple) and len(key) == 2 and key[0] == self._token
                and key[1] in self._recipes):
            raise TypeError("this RowStatistic does not belong to this ShardedModel")
        out = self._call("reduce", {s.index: (key[1], fn, tuple(args)) for s in self._shards})
        return np.sum([out[i] for i in sorted(out)], axis=0)

    def release_owner_ratio_sums(self, rng_noise: Any, theta_new: np.ndarray, theta_old: np.ndarray,
                                 bound: float, sd: float, *, temperature: float = 1.0) -> np.ndarray:
        """Each owner's ``T Σ clip(l_j(θ') − l_j(θ), ±bound) + N(0, sd²)``, noised on its worker.

        Parameters
        ----------
        rng_noise : SecureNoise or numpy.random.Generator
            The chain's noise stream.  A :class:`~stan_dp.secure_noise.SecureNoise`
            (publishable run): every owner draws from its own ``SecureNoise()``
            on its worker and the driver sends no randomness.  A numpy
            Generator (seeded run): one seed per owner is drawn from it per
            call, here, and the owner draws from ``default_rng(seed)``.  A
            retried owner (its worker died before answering) uses the same
            seed, or fresh secure noise: its first value was never released.
        theta_new, theta_old : ndarray (dim,)
        bound : float
            Clip bound of each row's log-likelihood ratio.
        sd : float
            Noise sd of each owner's release.
        temperature : float

        Returns
        -------
        ndarray, shape (n_owners,)
            The released values in the order of :attr:`owner_labels`.
        """
        if not self.owner_noise:
            raise ValueError("release_owner_ratio_sums is for owners=True; with a single curator "
                             "the sampler adds the noise to clipped_ratio_sums")
        new, old = self._theta(theta_new), self._theta(theta_old)
        k = len(self._shards)
        if isinstance(rng_noise, SecureNoise):
            seeds: list[int | None] = [None] * k
        elif isinstance(rng_noise, np.random.Generator):
            seeds = [int(s) for s in rng_noise.integers(2**63, size=k)]
        else:
            raise TypeError("rng_noise must be a SecureNoise or a numpy Generator")
        out = self._call("release", {i: (seeds[i], new, old, float(bound), float(sd),
                                         float(temperature)) for i in range(k)})
        return np.array([out[i] for i in range(k)], dtype=float)

    def owner_release_counts(self) -> list[int]:
        """Releases each owner has made so far, as counted by the owner itself (owners mode).

        A recreated owner starts again from 0.
        """
        if not self.owner_noise:
            raise ValueError("owner_release_counts is for owners=True")
        out = self._call("release_count", {s.index: () for s in self._shards})
        return [int(out[i]) for i in range(len(self._shards))]

    # ---------------------------------------------- data-independent parts --
    # log_prior, log_prior_grad, constrain, unconstrain and param_shapes are
    # stan_dp.model.ZeroRowPart's, on the driver's zero-row instance.

    @property
    def name(self) -> str:
        """The Stan model's name."""
        return self.bridge.name()

    # ------------------------------------------------------------ lifecycle --
    @property
    def shard_pids(self) -> list[int]:
        """Process id of the worker holding each shard (as last reported)."""
        facts = self._call("describe", {s.index: () for s in self._shards})
        return [int(facts[i]["pid"]) for i in range(len(self._shards))]

    @property
    def shard_addresses(self) -> list[str]:
        """Address of the worker holding each shard."""
        return [s.address for s in self._shards]

    @property
    def build_seconds(self) -> list[float]:
        """Seconds each shard took to load its data source and build its model (first build)."""
        return [s.build_seconds for s in self._shards]

    def ping(self) -> None:
        """A no-op round trip to every shard (latency measurements)."""
        self._call("ping", {s.index: () for s in self._shards})

    def close(self) -> None:
        """Release the shards' actors (their workers free the rows)."""
        for shard in self._shards:
            self._release_future(shard)

    def __enter__(self) -> "ShardedModel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "owners" if self.owner_noise else "single curator"
        return (f"ShardedModel({self.name!r}, n_rows={self.n_rows}, shards={list(self.shard_sizes)}, "
                f"dim={self.dim}, {mode})")

    def __reduce__(self) -> Any:
        raise TypeError("a ShardedModel holds a client and remote actors; it cannot be pickled")
