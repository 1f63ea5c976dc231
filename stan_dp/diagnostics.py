"""Distances between posteriors: MMD and a per-parameter comparison table.

Private samplers may converge to a slightly wrong distribution (clipping,
penalty noise, subsampling), so R-hat and ESS cannot tell how good a private
posterior is.  The yardstick is a trusted non-private posterior of the same
model and data, and the distance to it.

Lining up two samples
---------------------
A user has posterior draws in many forms: a stan_dp fit or
:func:`stan_dp.reference_fit` output (ArviZ ``InferenceData`` with Stan's
names and shapes, ``beta`` of shape ``(chain, draw, D)``), cmdstanpy's
``CmdStanMCMC`` (flat columns ``beta[1]``, ...), ArviZ data converted from
cmdstanpy (``beta`` with a ``beta_dim_0`` dimension), a pandas
``DataFrame`` of flat columns, or a dict with flat Stan names (``beta[1]``,
``beta.1``) or nested arrays (``{"beta": (draws, D)}`` or ``(chain, draw,
D)``).  Every form is turned into one canonical naming: **Stan's flat,
1-based component names** (``beta[1]``, ``Sigma[2,1]``); ArviZ coordinates
are ignored, positions count.  Two samples are compared only when every
compared component is in both; anything else is refused with an error that
names the missing and the extra components (an earlier version silently
compared only the variables whose names happened to match).

Metrics
-------
Per component, with ``m, s`` the reference mean and sd:

* ``std_mean_error = (mean - m) / s``: the error of the mean in posterior sds;
* ``sd_ratio = sd / s``;
* ``w1``: the Wasserstein-1 distance between the two marginals, both
  standardised by ``(m, s)`` -- in reference sds; it equals ``|shift|`` for a
  pure shift and grows without bound with the error;
* ``coverage``: share of the reference draws inside the central interval of
  the private draws.

The headline is the worst and median ``|std_mean_error|`` and ``w1`` and the
range of ``sd_ratio``.  The MMD of Räisä (2021, seed 003, Section 7.1) is
kept (see :func:`mmd`), but it saturates: with an RBF kernel it is bounded
by ``sqrt(2)`` and, with the median-heuristic bandwidth, it is not even
monotone in the error (about 1.09 for a 5 sd shift and 0.90 for 100 sd), so
it cannot rank fits that are far off.

MMD space
---------
Both samples are flattened to their scalar components in the
**constrained** space in which Stan reports them, then **standardised by the
reference sample's mean and sd per component**, with the Gaussian RBF kernel
``k(x, y) = exp(-||x - y||^2 / (2 s^2))`` (the thesis prints the exponent
without its minus sign) and the bandwidth ``s`` set by the median heuristic
on subsamples of both samples.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = [
    "draws_matrix",
    "mmd",
    "median_bandwidth",
    "wasserstein_sd",
    "Comparison",
    "compare",
    "stan_name",
    "RHAT_MAX",
    "ESS_MIN",
    "MAX_PANELS",
]

MEDIAN_SUBSAMPLE = 50
"""Draws taken (with replacement) from each sample for the median heuristic (seed 003, 7.1)."""

DEFAULT_MAX_DRAWS = 2000
"""Draws used from each sample by :func:`mmd` (evenly thinned); kernel matrices are O(m^2)."""

RHAT_MAX = 1.05
"""R-hat above this: the private chains have not mixed (rank-normalised split R-hat)."""

ESS_MIN = 100.0
"""Bulk ESS below this is called tiny: the Monte Carlo error of a mean, about
``1 / sqrt(ESS)`` posterior sds, is then above 0.1 sd -- as large as the
errors the comparison is meant to show."""

MAX_PANELS = 12
"""At most this many panels in :meth:`Comparison.plot` (the worst components first)."""

COLUMNS = ("mean", "ref_mean", "sd", "ref_sd", "std_mean_error", "sd_ratio", "w1",
           "coverage", "rhat", "ess_bulk")
"""Numeric columns of :attr:`Comparison.rows`, in display order."""

_FLAT = re.compile(r"^(?P<base>[^\[\].]+?)(?:\[(?P<br>[^\]]*)\]|(?P<dots>(?:\.\d+)+))$")


# ------------------------------------------------------------------ names


def stan_name(base: str, index: Sequence[int] = ()) -> str:
    """Stan's flat name of one component, 1-based: ``stan_name("beta", (0,)) == "beta[1]"``.

    Parameters
    ----------
    base : str
        Variable name.
    index : sequence of int
        0-based position of the component in the variable's shape (empty for
        a scalar).

    Returns
    -------
    str
    """
    if len(index) == 0:
        return base
    return f"{base}[{','.join(str(int(i) + 1) for i in index)}]"


def _parse_flat(name: str) -> tuple[str, tuple[int, ...]] | None:
    """``"beta[2,1]"`` or ``"beta.2.1"`` -> ``("beta", (2, 1))`` (1-based); None if not indexed."""
    m = _FLAT.match(name.strip())
    if m is None:
        return None
    raw = m.group("br") if m.group("br") is not None else m.group("dots")[1:].replace(".", ",")
    try:
        idx = tuple(int(p) for p in raw.split(","))
    except ValueError:
        return None
    if any(i < 1 for i in idx):
        raise ValueError(f"component {name!r}: Stan names are 1-based (beta[1] is the first "
                         "element); a 0 index means 0-based names, which would be lined up with "
                         "the wrong components")
    return m.group("base").strip(), idx


@dataclass
class _Draws:
    """A sample lined up to canonical names: ``values[chain, draw, k]`` is component ``names[k]``."""

    names: list[str]
    bases: list[str]
    values: np.ndarray
    attrs: dict
    source: str
    skipped: list[str] = field(default_factory=list)

    def shapes(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for n, b in zip(self.names, self.bases):
            out.setdefault(b, []).append(n)
        return {b: tuple(v) for b, v in out.items()}


def _from_nested(arrays: Mapping[str, Any], lead: int, attrs: dict, source: str,
                 sample_dims: Mapping[str, int] | None = None) -> _Draws:
    """Nested arrays ``name -> (chain, draw, *shape)`` (lead 2) or ``(draw, *shape)`` (lead 1)."""
    names: list[str] = []
    bases: list[str] = []
    cols: list[np.ndarray] = []
    skipped: list[str] = []
    lead_shape: tuple[int, ...] | None = None
    for name, value in arrays.items():
        name = str(name)
        if name.endswith("__"):
            continue
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            skipped.append(name)
            continue
        if arr.ndim < lead:
            raise ValueError(f"variable {name!r} has shape {arr.shape}; expected "
                             f"{'(chain, draw, ...)' if lead == 2 else '(draw, ...)'}")
        if lead_shape is None:
            lead_shape = arr.shape[:lead]
        elif arr.shape[:lead] != lead_shape:
            raise ValueError(f"variable {name!r} has {arr.shape[:lead]} draws, others {lead_shape}")
        arr = arr.astype(float)
        if lead == 1:
            arr = arr[None]
        shape = arr.shape[2:]
        parsed = _parse_flat(name) if not shape else None
        if parsed is not None:  # a flat dict: "beta[1]" -> (2-D) draws of one component
            base, idx = parsed
            names.append(stan_name(base, tuple(i - 1 for i in idx)))
            bases.append(base)
            cols.append(arr.reshape(arr.shape[0], arr.shape[1], 1))
            continue
        for idx in np.ndindex(*shape):
            names.append(stan_name(name, idx))
            bases.append(name)
        cols.append(arr.reshape(arr.shape[0], arr.shape[1], -1))
    if not cols:
        raise ValueError(f"the {source} has no numeric posterior variables")
    return _sorted(_Draws(names, bases, np.concatenate(cols, axis=2), attrs, source, skipped))


def _sorted(d: _Draws) -> _Draws:
    """Components in canonical order: variables in first-seen order, indices row-major."""
    if len(set(d.names)) != len(d.names):
        dup = sorted({n for n in d.names if d.names.count(n) > 1})
        raise ValueError(f"the {d.source} has duplicate components: {dup}")
    first = {}
    for b in d.bases:
        first.setdefault(b, len(first))

    def key(k: int) -> tuple:
        parsed = _parse_flat(d.names[k])
        return (first[d.bases[k]], parsed[1] if parsed else ())

    order = sorted(range(len(d.names)), key=key)
    return _Draws([d.names[k] for k in order], [d.bases[k] for k in order],
                  d.values[:, :, order], d.attrs, d.source, d.skipped)


def _from_frame(frame: Any, attrs: dict, source: str) -> _Draws:
    """A DataFrame of flat Stan columns (cmdstanpy's ``draws_pd``), chains from ``chain__``."""
    cols = [str(c) for c in frame.columns]
    keep = [c for c in cols if not c.endswith("__")]
    values = np.asarray(frame[keep].to_numpy(), dtype=float) if keep else np.empty((len(frame), 0))
    if "chain__" in cols:
        chain = np.asarray(frame["chain__"].to_numpy())
        ids = list(dict.fromkeys(chain.tolist()))
        counts = {c: int((chain == c).sum()) for c in ids}
        if len(set(counts.values())) == 1:
            values = np.stack([values[chain == c] for c in ids])
        else:
            values = values[None]
    else:
        values = values[None]
    return _from_nested({c: values[:, :, j] for j, c in enumerate(keep)}, 2, attrs, source)


def _candidates(sample: Any, role: str) -> list[_Draws]:
    """The readings of ``sample`` in canonical names (two for an ambiguous dict of arrays)."""
    if isinstance(sample, _Draws):
        return [sample]
    if isinstance(sample, np.ndarray):
        if sample.ndim not in (2, 3):
            raise ValueError(f"an array sample must be (draws, components) or (chain, draw, "
                             f"components), got shape {sample.shape}")
        arr = sample if sample.ndim == 3 else sample[None]
        return [_Draws([f"x[{j + 1}]" for j in range(arr.shape[2])], ["x"] * arr.shape[2],
                       np.asarray(arr, dtype=float), {}, f"{role} array")]
    if hasattr(sample, "draws_pd") and callable(sample.draws_pd):   # cmdstanpy CmdStanMCMC
        return [_from_frame(sample.draws_pd(), {}, f"{role} (CmdStanMCMC)")]
    if hasattr(sample, "stan_variables") and callable(sample.stan_variables):
        return [_from_nested(sample.stan_variables(), 1, {}, f"{role} (stan_variables)")]
    if hasattr(sample, "columns") and hasattr(sample, "to_numpy"):  # pandas DataFrame
        return [_from_frame(sample, {}, f"{role} (DataFrame)")]
    post = getattr(sample, "posterior", None)
    if post is None and hasattr(sample, "groups") and callable(sample.groups):
        raise ValueError(f"the {role} InferenceData has no posterior group")
    root_attrs = dict(getattr(sample, "attrs", {}) or {}) if post is not None else {}
    post = sample if post is None else post
    if hasattr(post, "data_vars"):   # xarray Dataset (or an ArviZ 1.x DataTree node)
        attrs = {**root_attrs, **dict(getattr(post, "attrs", {}) or {})}
        arrays = {}
        for name in post.data_vars:
            da = post[name]
            dims = list(da.dims)
            if "chain" in dims and "draw" in dims:
                da = da.transpose("chain", "draw", *[d for d in dims if d not in ("chain", "draw")])
            arrays[str(name)] = np.asarray(da.values)
        return [_from_nested(arrays, 2, attrs, f"{role} (InferenceData)")]
    if isinstance(post, Mapping):
        arrays = {str(k): np.asarray(v) for k, v in post.items()}
        arrays = {k: v for k, v in arrays.items() if not k.endswith("__")}
        if not arrays:
            raise ValueError(f"the {role} has no variables")
        flat = [k for k in arrays if _parse_flat(k) is not None]
        ndims = {k: v.ndim for k, v in arrays.items()}
        if flat:   # flat Stan names: every value holds draws of one scalar
            leads = {ndims[k] for k in arrays}
            if leads - {1, 2} or len(leads) != 1:
                raise ValueError(f"a dict with flat Stan names ({flat[0]!r}, ...) needs 1-D (draw) "
                                 f"or 2-D (chain, draw) arrays for every entry, got dims {ndims}")
            return [_from_nested(arrays, leads.pop(), {}, f"{role} (dict of flat names)")]
        out = []
        for lead in (2, 1):
            try:
                out.append(_from_nested(arrays, lead, {}, f"{role} (dict)"))
            except ValueError:
                pass
        if not out:
            raise ValueError(f"the {role} dict's arrays do not share their leading (chain, draw) "
                             f"or (draw) dimensions: shapes { {k: v.shape for k, v in arrays.items()} }")
        return out
    raise TypeError(f"cannot read the {role}: {type(sample).__name__} is not an InferenceData, "
                    "xarray Dataset, CmdStanMCMC, DataFrame, dict or array")


def _prefer(cands: list[_Draws]) -> _Draws:
    """Of two readings of a dict, (chain, draw) unless that means more chains than draws."""
    if len(cands) == 1:
        return cands[0]
    two, one = cands   # _candidates lists the (chain, draw) reading first
    chains, draws = two.values.shape[:2]
    return two if chains <= draws else one


def _read_pair(a: Any, b: Any) -> tuple[_Draws, _Draws]:
    """Read both samples, resolving an ambiguous dict by the reading that lines up with the other."""
    ca, cb = _candidates(a, "private fit"), _candidates(b, "reference")
    if len(ca) == 1 and len(cb) == 1:
        return ca[0], cb[0]
    if len(ca) == 1 or len(cb) == 1:
        fixed, other = (ca, cb) if len(ca) == 1 else (cb, ca)
        names = set(fixed[0].names)
        match = [c for c in other if set(c.names) <= names or names <= set(c.names)]
        chosen = match[0] if len(match) == 1 else _prefer(other)
        return (fixed[0], chosen) if len(ca) == 1 else (chosen, fixed[0])
    return _prefer(ca), _prefer(cb)


def _short(names: Sequence[str], limit: int = 12) -> str:
    names = list(names)
    text = ", ".join(names[:limit])
    return text + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _attr_names(value: Any) -> list[str]:
    """The names in an ``attrs`` entry written as ``"a, b"`` (``attrs["transformed_in_output"]``)."""
    return [v.strip() for v in str(value or "").split(",") if v.strip()]


def _select(p: _Draws, r: _Draws, var_names: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """Components to compare (private order) and notes; refuses samples that do not line up."""
    notes: list[str] = []
    if var_names is None:
        # the transformed parameters the private fit computed without rows
        # (attrs["transformed_in_output"]) are noted, not compared, where the reference lacks them
        # altogether (exact draws of the parameters have none); any other name the reference
        # lacks still refuses below
        ref_bases = set(r.bases)
        computed = set(_attr_names(p.attrs.get("transformed_in_output")))
        skipped = list(dict.fromkeys(b for b in p.bases if b in computed and b not in ref_bases))
        wanted = [n for n, b in zip(p.names, p.bases) if b not in set(skipped)]
        if skipped:
            notes.append("not compared (transformed parameters or generated quantities the reference lacks): "
                         f"{_short(skipped)}")
    else:
        wanted = []
        unknown = []
        for v in var_names:
            parsed = None if v in p.bases else _parse_flat(v)
            if v in p.bases:
                wanted += [n for n, b in zip(p.names, p.bases) if b == v]
            elif parsed is not None and stan_name(parsed[0], [i - 1 for i in parsed[1]]) in p.names:
                wanted.append(stan_name(parsed[0], [i - 1 for i in parsed[1]]))
            else:
                unknown.append(v)
        if unknown:
            raise ValueError(f"variables {unknown} not in the {p.source} (it has "
                             f"{_short(list(dict.fromkeys(p.bases)))})")
        wanted = list(dict.fromkeys(wanted))
    if not wanted:
        raise ValueError("no variables to compare")
    ref_names = set(r.names)
    missing = [n for n in wanted if n not in ref_names]
    wanted_bases = {b for n, b in zip(p.names, p.bases) if n in set(wanted)}
    wanted_set = set(wanted)
    extra = [n for n, b in zip(r.names, r.bases) if b in wanted_bases and n not in wanted_set
             and (var_names is None or b in set(var_names))]
    if missing or extra:
        only_ref = [n for n in r.names if n not in set(p.names)]
        parts = []
        if missing:
            parts.append(f"missing from the reference: {_short(missing)}")
        if extra:
            parts.append(f"extra in the reference (same variable, other components): {_short(extra)}")
        elif only_ref:
            parts.append(f"only in the reference: {_short(only_ref)}")
        raise ValueError("the samples do not line up (names are Stan's, 1-based): "
                         + "; ".join(parts)
                         + ". Pass var_names=[...] to compare a subset, or rename the variables.")
    unused = list(dict.fromkeys(b for b in r.bases if b not in wanted_bases))
    if unused and var_names is None:
        notes.append(f"not compared (only in the reference): {_short(unused)}")
    for d in (p, r):
        if d.skipped:
            notes.append(f"not compared (not real-valued) in the {d.source}: {_short(d.skipped)}")
    return wanted, notes


def _line_up(a: Any, b: Any, var_names: Sequence[str] | None
             ) -> tuple[_Draws, _Draws, list[str], list[str]]:
    """Both samples restricted to the same components in the same order."""
    return _lined_up(*_read_pair(a, b), var_names)


def _lined_up(p: _Draws, r: _Draws, var_names: Sequence[str] | None
              ) -> tuple[_Draws, _Draws, list[str], list[str]]:
    """:func:`_line_up` of two samples already read."""
    names, notes = _select(p, r, var_names)
    ip = {n: k for k, n in enumerate(p.names)}
    ir = {n: k for k, n in enumerate(r.names)}
    kp = [ip[n] for n in names]
    kr = [ir[n] for n in names]
    p2 = _Draws(names, [p.bases[k] for k in kp], p.values[:, :, kp], p.attrs, p.source)
    r2 = _Draws(names, [r.bases[k] for k in kr], r.values[:, :, kr], r.attrs, r.source)
    return p2, r2, names, notes


def draws_matrix(
    sample: Any, var_names: Sequence[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """Flatten posterior draws to a ``(draws, components)`` matrix with Stan's names.

    Parameters
    ----------
    sample : InferenceData, xarray.Dataset, CmdStanMCMC, DataFrame, mapping or ndarray
        Any form :func:`compare` accepts (see the module docstring); a 2-D
        array ``(draws, components)`` is used as is (components ``x[1]``, ...).
    var_names : sequence of str, optional
        Variables (``"beta"``) or components (``"beta[2]"``) to use
        (default: all).

    Returns
    -------
    matrix : ndarray, shape (chains * draws, components)
    names : list of str
        Stan's 1-based component names such as ``"beta[1]"``.

    Raises
    ------
    ValueError
        For an unknown variable or an empty sample.
    """
    if isinstance(sample, np.ndarray) and var_names is not None:
        raise ValueError("var_names cannot be used with a plain array sample")
    d = _prefer(_candidates(sample, "sample"))
    if var_names is not None:
        names, _ = _select(d, d, var_names)
        idx = {n: k for k, n in enumerate(d.names)}
        d = _Draws(names, [d.bases[idx[n]] for n in names], d.values[:, :, [idx[n] for n in names]],
                   d.attrs, d.source)
    matrix = d.values.reshape(-1, d.values.shape[2])
    if matrix.shape[0] == 0:
        raise ValueError("the sample has no draws")
    return matrix, list(d.names)


# ------------------------------------------------------------------ MMD


def _thin(x: np.ndarray, max_draws: int | None) -> np.ndarray:
    if max_draws is None or x.shape[0] <= max_draws:
        return x
    idx = np.linspace(0, x.shape[0] - 1, max_draws).round().astype(int)
    return x[idx]


def _sq_dists(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    d = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2.0 * x @ y.T
    return np.maximum(d, 0.0)


def median_bandwidth(
    x: np.ndarray, y: np.ndarray, rng: np.random.Generator, subsample: int = MEDIAN_SUBSAMPLE
) -> float:
    """Median-heuristic RBF bandwidth (seed 003, Section 7.1).

    Draws ``subsample`` points with replacement from each sample, pools them,
    and returns the median of the pairwise Euclidean distances between
    distinct pooled points.
    """
    pool = np.concatenate([x[rng.integers(0, len(x), subsample)],
                           y[rng.integers(0, len(y), subsample)]])
    d = np.sqrt(_sq_dists(pool, pool))
    upper = d[np.triu_indices(len(pool), k=1)]
    med = float(np.median(upper))
    if not med > 0:
        positive = upper[upper > 0]
        med = float(np.median(positive)) if positive.size else 1.0
    return med


def _mmd2_unbiased(x: np.ndarray, y: np.ndarray, bandwidth: float) -> float:
    g = -0.5 / bandwidth**2
    kxx = np.exp(g * _sq_dists(x, x))
    kyy = np.exp(g * _sq_dists(y, y))
    kxy = np.exp(g * _sq_dists(x, y))
    m, n = len(x), len(y)
    sxx = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    syy = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(sxx + syy - 2.0 * kxy.mean())


def _ref_scale(ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu = ref.mean(0)
    sd = ref.std(0, ddof=1) if len(ref) > 1 else np.ones(ref.shape[1])
    return mu, np.where(sd > 0, sd, 1.0)


def _standardise(x: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu, sd = _ref_scale(ref)
    return (x - mu) / sd, (ref - mu) / sd


def _mmd_matrices(x: np.ndarray, y: np.ndarray, *, bandwidth: float | None,
                  max_draws: int | None, standardise: bool, seed: int) -> float:
    if len(x) < 2 or len(y) < 2:
        raise ValueError("each sample needs at least 2 draws")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("the samples contain non-finite draws")
    x, y = _thin(x, max_draws), _thin(y, max_draws)
    if standardise:
        x, y = _standardise(x, y)
    rng = np.random.default_rng(seed)
    if bandwidth is None:
        bandwidth = median_bandwidth(x, y, rng)
    elif not (np.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be positive and finite, got {bandwidth!r}")
    return float(np.sqrt(max(_mmd2_unbiased(x, y, float(bandwidth)), 0.0)))


def mmd(
    a: Any,
    b: Any,
    *,
    var_names: Sequence[str] | None = None,
    bandwidth: float | None = None,
    max_draws: int | None = DEFAULT_MAX_DRAWS,
    standardise: bool = True,
    seed: int = 0,
) -> float:
    """Maximum mean discrepancy between two posterior samples.

    Parameters
    ----------
    a, b : InferenceData, dataset, CmdStanMCMC, DataFrame, mapping or array
        The samples (``b`` is the reference used for standardising), in any
        form :func:`compare` accepts; they are lined up by Stan's 1-based
        component names.  Two arrays are lined up by position.
    var_names : sequence of str, optional
        Variables or components to compare.  Default: every component of
        ``a``; ``b`` must have them all (variables only ``b`` has are left
        out).
    bandwidth : float, optional
        RBF bandwidth in the standardised space; default: the median
        heuristic on 50 + 50 draws taken with replacement (seed 003, 7.1).
    max_draws : int or None
        Each sample is thinned evenly to at most this many draws.
    standardise : bool
        Standardise every component by the reference's mean and sd
        (default).  With ``False`` the raw constrained values are used.
    seed : int
        Seed of the median-heuristic subsampling (the estimate is then a
        deterministic function of the draws).

    Returns
    -------
    float
        ``sqrt(max(MMD²_u, 0))`` where ``MMD²_u`` is the unbiased estimate of
        Gretton et al. (2012, Lemma 6).  About ``0`` (up to ``O(1/sqrt(m))``)
        for two samples of one distribution; at most ``sqrt(2)``, and it
        saturates for large errors (use :func:`compare`'s ``w1`` to rank
        fits that are far off).

    Raises
    ------
    ValueError
        If the samples do not line up (the message names the missing and
        the extra components), or for non-finite draws.
    """
    p, r, _, _ = _line_up(a, b, var_names)
    x = p.values.reshape(-1, p.values.shape[2])
    y = r.values.reshape(-1, r.values.shape[2])
    return _mmd_matrices(x, y, bandwidth=bandwidth, max_draws=max_draws,
                         standardise=standardise, seed=seed)


def wasserstein_sd(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-component Wasserstein-1 distance in reference sds.

    Parameters
    ----------
    x : ndarray, shape (draws, components)
        Draws to judge.
    y : ndarray, shape (draws, components)
        Reference draws; both samples are standardised by its mean and sd.

    Returns
    -------
    ndarray, shape (components,)
        ``W1((x - m) / s, (y - m) / s)`` per component: ``|shift|`` for a
        pure shift by ``shift`` reference sds, growing without bound with the
        error (NaN where the reference sd is 0).
    """
    from scipy.stats import wasserstein_distance

    mu = y.mean(0)
    sd = y.std(0, ddof=1) if len(y) > 1 else np.zeros(y.shape[1])
    out = np.full(x.shape[1], np.nan)
    for k in range(x.shape[1]):
        if sd[k] > 0:
            out[k] = wasserstein_distance((x[:, k] - mu[k]) / sd[k], (y[:, k] - mu[k]) / sd[k])
    return out


# ------------------------------------------------------------------ diagnostics


def _mixing(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rank-normalised split R-hat and bulk ESS per component of ``(chain, draw, K)`` draws."""
    k = values.shape[2]
    nan = np.full(k, np.nan)
    if values.shape[1] < 4:
        return nan, nan.copy()
    import warnings

    from stan_dp.output import _import_arviz

    az = _import_arviz()
    ds = az.convert_to_dataset({"x": values})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rhat = np.asarray(az.rhat(ds)["x"].values, dtype=float).reshape(k)
        ess = np.asarray(az.ess(ds, method="bulk")["x"].values, dtype=float).reshape(k)
    return rhat, ess


def _still_chains(values: np.ndarray) -> np.ndarray:
    """``(chain, K)``: whether each private chain of ``(chain, draw, K)`` draws never moved along
    each component (every draw the same value).  All False with fewer than 4 draws per chain,
    where R-hat is not judged either (:func:`_mixing`)."""
    if values.shape[1] < 4:
        return np.zeros((values.shape[0], values.shape[2]), dtype=bool)
    return np.ptp(values, axis=1) == 0


def _is_constant(row: Mapping[str, Any]) -> bool:
    """The comparison's row is of a component constant in both fits (flag ``constant...``)."""
    return any(f.startswith("constant") for f in row.get("flags", []))


def _attr_warnings(attrs: Mapping[str, Any]) -> list[str]:
    """``attrs["warnings"]`` as a list of strings (a list, a string, or a JSON list)."""
    raw = attrs.get("warnings")
    if raw is None or (isinstance(raw, str) and raw.strip() in ("", "none", "[]")):
        return []
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            try:
                loaded = json.loads(text)
                if isinstance(loaded, list):
                    return [str(w) for w in loaded if str(w).strip()]
            except ValueError:
                pass
        return [line for line in text.splitlines() if line.strip()]
    return [str(w) for w in np.asarray(raw, dtype=object).ravel() if str(w).strip()]


def _number(v: Any, spec: str) -> str:
    """``v`` formatted by ``spec``; ``-`` where it is missing or NaN (a constant component's error)."""
    return "-" if v is None or np.isnan(v) else format(v, spec)


def _rhat_text(r: float) -> str:
    """R-hat for the table: 3 decimals; 3 significant digits beyond 1,000 (chains stuck apart give
    10^15); ``inf`` for a chain that never moved; ``-`` where it is not computed."""
    if not np.isfinite(r):
        return "inf" if np.isinf(r) else "-"
    return f"{r:.3g}" if r >= 1e3 else f"{r:.3f}"


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, (float, np.floating)):
        if not np.isfinite(v):
            return "-" if np.isnan(v) else str(v)
        return f"{float(v):.{digits}g}"
    return str(v)


# ------------------------------------------------------------------ comparison


@dataclass
class Comparison:
    """A private posterior next to a reference posterior.

    Attributes
    ----------
    rows : list of dict
        One dict per scalar component, pandas-free: ``name`` (Stan's 1-based
        name, ``beta[1]``), ``variable``, the numeric :data:`COLUMNS` --
        ``mean``, ``ref_mean``, ``sd``, ``ref_sd``, ``std_mean_error``
        ((mean - ref_mean) / ref_sd), ``sd_ratio`` (sd / ref_sd), ``w1``
        (Wasserstein-1 distance in reference sds), ``coverage`` (share of
        the reference draws inside the private central ``interval``
        interval), ``rhat`` and ``ess_bulk`` of the private draws -- and
        ``flags`` (a list of words such as ``"not mixed"``).  Code may add
        keys; :meth:`__str__` prints the known ones.
    mmd : float
        :func:`mmd` over the compared components (standardised space).
    interval : float
        Probability of the central interval used for ``coverage``.
    var_names : list of str
        The compared variables.
    privacy : dict
        The private fit's attributes (ε, δ, ε spent, sampler, ...).
    private, reference : object
        The two samples as given.
    notes : list of str
        Plain-language findings printed under the table (mixing problems,
        the sampler's warnings, variables left out).  Append to extend.
    warnings : list of str
        The private fit's own ``attrs["warnings"]``.
    """

    rows: list[dict[str, Any]]
    mmd: float
    interval: float
    var_names: list[str]
    privacy: dict
    private: Any = field(repr=False)
    reference: Any = field(repr=False)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _x: np.ndarray | None = field(default=None, repr=False)
    _y: np.ndarray | None = field(default=None, repr=False)

    # ---- columns and headline

    @property
    def names(self) -> list[str]:
        """Component names (Stan's, 1-based), in table order."""
        return [r["name"] for r in self.rows]

    def column(self, key: str) -> np.ndarray:
        """One numeric column as an array (NaN where a row lacks it)."""
        return np.array([float(r.get(key, np.nan)) for r in self.rows], dtype=float)

    @property
    def table(self):
        """The rows as a pandas DataFrame indexed by component name (needs pandas)."""
        import pandas as pd

        frame = pd.DataFrame([{k: v for k, v in r.items() if k not in ("name", "variable")}
                              for r in self.rows], index=self.names)
        if "flags" in frame:
            frame["flags"] = [", ".join(f) for f in frame["flags"]]
        return frame

    def _stat(self, key: str, fn) -> float:
        col = self.column(key)
        col = col[np.isfinite(col)]
        return float(fn(col)) if col.size else float("nan")

    @property
    def worst_std_mean_error(self) -> float:
        """Largest ``|std_mean_error|`` over the components."""
        return self._stat("std_mean_error", lambda c: np.abs(c).max())

    @property
    def median_std_mean_error(self) -> float:
        """Median ``|std_mean_error|`` over the components."""
        return self._stat("std_mean_error", lambda c: np.median(np.abs(c)))

    @property
    def worst_w1(self) -> float:
        """Largest Wasserstein-1 distance (reference sds) over the components."""
        return self._stat("w1", np.max)

    @property
    def median_w1(self) -> float:
        """Median Wasserstein-1 distance (reference sds) over the components."""
        return self._stat("w1", np.median)

    @property
    def sd_ratio_range(self) -> tuple[float, float]:
        """Smallest and largest ``sd_ratio``."""
        return self._stat("sd_ratio", np.min), self._stat("sd_ratio", np.max)

    @property
    def max_rhat(self) -> float:
        """Largest R-hat of the private draws: ``inf`` where some chain never moved along a
        component the reference varies in, NaN when it cannot be computed."""
        col = self.column("rhat")
        col = col[~np.isnan(col)]
        return float(col.max()) if col.size else float("nan")

    @property
    def min_ess_bulk(self) -> float:
        """Smallest bulk ESS of the private draws (NaN when it cannot be computed)."""
        return self._stat("ess_bulk", np.min)

    @property
    def mixed(self) -> bool:
        """False when some R-hat is above :data:`RHAT_MAX`, ``inf`` included (a chain that never
        moved); unknown R-hat counts as mixed."""
        return not self.max_rhat > RHAT_MAX

    def headline(self) -> dict[str, float]:
        """The summary figures, each growing with the error (and the MMD)."""
        lo, hi = self.sd_ratio_range
        return {
            "worst_std_mean_error": self.worst_std_mean_error,
            "median_std_mean_error": self.median_std_mean_error,
            "worst_w1": self.worst_w1,
            "median_w1": self.median_w1,
            "min_sd_ratio": lo,
            "max_sd_ratio": hi,
            "mmd": self.mmd,
            "max_rhat": self.max_rhat,
            "min_ess_bulk": self.min_ess_bulk,
        }

    def headline_text(self) -> str:
        """The headline in one line."""
        lo, hi = self.sd_ratio_range
        return (f"worst |standardised mean error|: {self.worst_std_mean_error:.3f} "
                f"(median {self.median_std_mean_error:.3f}) sd; "
                f"worst W1: {self.worst_w1:.3f} (median {self.median_w1:.3f}) sd; "
                f"sd ratio {lo:.3f}-{hi:.3f}; "
                f"MMD (standardised, RBF kernel, median bandwidth): {self.mmd:.4f}")

    def mixing_text(self) -> str:
        """R-hat and ESS of the private draws in one line, saying plainly when they did not mix."""
        r, e = self.max_rhat, self.min_ess_bulk
        if np.isinf(r):   # some chain never moved along a component the reference varies in
            return (f"NOT MIXED: private draws: some chain never moved (R-hat inf; > {RHAT_MAX})")
        if not np.isfinite(r):
            why = ("every compared component is constant in both fits"
                   if self.rows and all(_is_constant(row) for row in self.rows) else "too few draws")
            return f"private draws: R-hat and ESS not available ({why})"
        text = f"private draws: max R-hat {_rhat_text(r)}, min bulk ESS {e:.0f}"
        if r > RHAT_MAX:
            text = f"NOT MIXED: {text} (R-hat > {RHAT_MAX})"
        elif e < ESS_MIN:
            text = f"LOW ESS: {text} (< {ESS_MIN:.0f})"
        return text

    # ---- printing

    def __str__(self) -> str:
        head = ["parameter", "mean", "ref_mean", "sd", "ref_sd", "std_mean_error", "sd_ratio",
                "w1", "coverage", "rhat", "ess_bulk", "flags"]
        body = []
        for r in self.rows:
            body.append([
                r["name"],
                _fmt(r.get("mean")), _fmt(r.get("ref_mean")), _fmt(r.get("sd")),
                _fmt(r.get("ref_sd")),
                _number(r.get('std_mean_error'), "+.3f"), _number(r.get('sd_ratio'), ".3f"),
                _number(r.get('w1'), ".3f"), _number(r.get('coverage'), ".3f"),
                _rhat_text(r.get('rhat', np.nan)), _fmt(None if not np.isfinite(r.get("ess_bulk", np.nan))
                                             else float(round(r["ess_bulk"])), 6),
                ", ".join(r.get("flags", [])),
            ])
        widths = [max(len(h), *(len(row[j]) for row in body)) for j, h in enumerate(head)]
        lines = ["  ".join(h.ljust(w) if j in (0, len(head) - 1) else h.rjust(w)
                           for j, (h, w) in enumerate(zip(head, widths))).rstrip()]
        for row in body:
            lines.append("  ".join(c.ljust(w) if j in (0, len(head) - 1) else c.rjust(w)
                                   for j, (c, w) in enumerate(zip(row, widths))).rstrip())
        lines.append(self.headline_text())
        lines.append(self.mixing_text())
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    # ---- plot

    def plot(self, path: str | Path, *, private_label: str | None = None,
             reference_label: str = "non-private reference", max_panels: int = MAX_PANELS,
             dpi: int = 110) -> Path:
        """Overlay the two posteriors' marginal densities, one panel per component, as a PNG.

        Parameters
        ----------
        path : str or Path
            Output file (PNG).
        private_label, reference_label : str
            Legend labels (default for the private fit: its sampler and ε).
        max_panels : int
            At most this many panels: the components with the largest
            ``|std_mean_error|`` (the figure says so when some are left out).
        dpi : int
            Resolution.

        Returns
        -------
        Path
            The written file.
        """
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        fig = self.figure(private_label=private_label, reference_label=reference_label,
                          max_panels=max_panels)
        path = Path(path)
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        return path

    def _private_label(self) -> str:
        p = self.privacy
        parts = [str(p["sampler"])] if p.get("sampler") else []
        for key, sym in (("epsilon", "ε"), ("delta", "δ")):
            if p.get(key) not in (None, ""):
                try:
                    parts.append(f"{sym} = {float(p[key]):.3g}")
                except (TypeError, ValueError):
                    pass
        return "private" + (f" ({', '.join(parts)})" if parts else "")

    def figure(self, *, private_label: str | None = None,
               reference_label: str = "non-private reference", max_panels: int = MAX_PANELS):
        """The overlay figure (a matplotlib ``Figure``; :meth:`plot` saves it).

        One panel per component titled with its Stan name (``beta[1]``);
        each shows the two marginal densities (Gaussian KDE), the means as
        dots and the central ``interval`` ranges of the draws as bars under
        the curves, and the component's errors.  The figure title carries
        the headline and the private draws' mixing diagnostics.
        """
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D

        if self._x is None or self._y is None:
            raise ValueError("this comparison has no draws to plot")
        private_label = private_label or self._private_label()
        # components constant in both fits (flagged "constant") have no densities to compare
        shown = [k for k, row in enumerate(self.rows) if not _is_constant(row)]
        order = shown or list(range(len(self.rows)))
        n = len(order)
        capped = n > max_panels
        if capped:
            err = np.nan_to_num(np.abs(self.column("std_mean_error")), nan=-1.0)
            order = sorted(order, key=lambda k: -err[k])[:max_panels]
        m = len(order)
        ncols = min(4, m)
        nrows = math.ceil(m / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.5 * nrows + 1.4),
                                 squeeze=False, layout="constrained")
        flat = axes.ravel()
        for ax in flat[m:]:
            fig.delaxes(ax)   # no empty panels
        c_priv, c_ref = "tab:orange", "tab:blue"
        lo_q, hi_q = (1 - self.interval) / 2, (1 + self.interval) / 2
        for j, k in enumerate(order):
            ax = flat[j]
            row = self.rows[k]
            x, y = self._x[:, k], self._y[:, k]
            both = np.concatenate([x, y])
            lo, hi = np.quantile(both, [0.002, 0.998])
            pad = 0.05 * (hi - lo) if hi > lo else max(abs(lo), 1.0) * 0.05
            grid = np.linspace(lo - pad, hi + pad, 256)
            peak = 0.0
            for draws, colour, width in ((y, c_ref, 2.4), (x, c_priv, 1.4)):
                dens = _density(draws, grid)
                peak = max(peak, float(np.nanmax(dens)) if dens.size else 0.0)
                ax.plot(grid, dens, color=colour, lw=width)
            peak = peak if peak > 0 else 1.0
            for i, (draws, colour) in enumerate(((y, c_ref), (x, c_priv))):
                level = -0.07 * peak * (i + 1)
                a, b = np.quantile(draws, [lo_q, hi_q])
                ax.plot([a, b], [level, level], color=colour, lw=2.2, solid_capstyle="butt")
                ax.plot([draws.mean()], [level], "o", color=colour, ms=5, mec="black", mew=0.5)
            ax.axhline(0, color="0.6", lw=0.6)
            ax.set_ylim(-0.2 * peak, 1.45 * peak)   # head room for the text
            ax.set_xlim(grid[0], grid[-1])
            ax.set_title(row["name"], fontsize=10)
            ax.set_xlabel("value", fontsize=8)
            if j % ncols == 0:
                ax.set_ylabel("density", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.set_yticks([])
            err = row["std_mean_error"]
            text = (f"mean err {err if abs(err) >= 0.005 else 0.0:+.2f} sd\n"
                    f"W1 {row['w1']:.2f} sd, sd ×{row['sd_ratio']:.2f}")
            bad = np.isfinite(row.get("rhat", np.nan)) and row["rhat"] > RHAT_MAX
            if bad:
                text += f"\nR̂ {row['rhat']:.2f}: not mixed"
            ax.text(0.02, 0.97, text, transform=ax.transAxes, va="top", ha="left", fontsize=6.5,
                    color="firebrick" if bad else "0.15",
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.8})
        lo_r, hi_r = self.sd_ratio_range
        title = (f"{private_label} vs {reference_label}\n"
                 f"worst |mean error| {self.worst_std_mean_error:.2f} sd "
                 f"(median {self.median_std_mean_error:.2f}); worst W1 {self.worst_w1:.2f} sd "
                 f"(median {self.median_w1:.2f}); sd ratio {lo_r:.2f}-{hi_r:.2f}; "
                 f"MMD {self.mmd:.3f}\n{self.mixing_text()}")
        if self.warnings:
            title += f"; {len(self.warnings)} sampler warning(s), see the printed report"
        if capped:
            title += f"\nshowing the {m} of {n} components with the largest |mean error|"
        fig.suptitle(title, fontsize=8.5, color="firebrick" if not self.mixed else "black")
        handles = [
            Line2D([], [], color=c_priv, lw=1.4, label=f"{private_label}: density"),
            Line2D([], [], color=c_ref, lw=2.4, label=f"{reference_label}: density"),
            Line2D([], [], color="0.3", lw=2.2, marker="o", ms=5, mec="black", mew=0.5,
                   label=f"dot = mean, bar = central {self.interval:.0%} of the draws"),
        ]
        fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7.5,
                   frameon=False)
        return fig


def _density(draws: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Gaussian KDE of ``draws`` on ``grid`` (thinned to 2000 draws); a spike if they are constant."""
    draws = _thin(draws[:, None], DEFAULT_MAX_DRAWS)[:, 0]
    if np.ptp(draws) == 0:
        dens = np.zeros_like(grid)
        dens[np.argmin(np.abs(grid - draws[0]))] = 1.0
        return dens
    from scipy.stats import gaussian_kde

    try:
        return gaussian_kde(draws)(grid)
    except Exception:  # noqa: BLE001 - a singular KDE falls back to a histogram
        hist, edges = np.histogram(draws, bins=40, density=True)
        return np.interp(grid, 0.5 * (edges[1:] + edges[:-1]), hist, left=0, right=0)


def compare(
    private: Any,
    reference: Any,
    *,
    var_names: Sequence[str] | None = None,
    interval: float = 0.9,
    max_draws: int | None = DEFAULT_MAX_DRAWS,
    seed: int = 0,
) -> Comparison:
    """Compare a private posterior with a reference posterior, component by component.

    Parameters
    ----------
    private, reference : InferenceData, dataset, CmdStanMCMC, DataFrame, mapping or array
        Posterior samples in any of the forms of the module docstring; both
        are lined up to Stan's flat 1-based names (``beta[1]``).
    var_names : sequence of str, optional
        Variables (``"beta"``) or components (``"beta[2]"``) to compare.
        Default: every component of the private posterior; the reference
        must have each of them (its transformed parameters and generated
        quantities, which private fits do not report, are left out and
        listed in the notes).
    interval : float
        Probability of the private central interval used for ``coverage``.
    max_draws : int or None
        Thinning for the MMD (see :func:`mmd`).
    seed : int
        Seed of the MMD's bandwidth subsampling.

    Returns
    -------
    Comparison

    Raises
    ------
    ValueError
        If the samples do not line up: the message names the components
        missing from the reference and those only the reference has.
    """
    if not (0 < interval < 1):
        raise ValueError(f"interval must be in (0, 1), got {interval!r}")
    p, r = _read_pair(private, reference)
    # a fit reference_fit made says private is false; a private fit carries its epsilon
    if p.attrs.get("private") is not None and not bool(p.attrs["private"]) and "epsilon" in r.attrs:
        raise ValueError("the arguments are swapped: the first is a non-private reference and the "
                         "second a private fit; pass the private fit first (compare(private, "
                         "reference); stan-dp compare FIT REFERENCE)")
    p, r, names, notes = _lined_up(p, r, var_names)
    x = p.values.reshape(-1, p.values.shape[2])
    y = r.values.reshape(-1, r.values.shape[2])
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("the samples contain non-finite draws")
    lo, hi = np.quantile(x, [(1 - interval) / 2, (1 + interval) / 2], axis=0)
    mean, ref_mean = x.mean(0), y.mean(0)
    sd = x.std(0, ddof=1) if len(x) > 1 else np.full(x.shape[1], np.nan)
    ref_sd = y.std(0, ddof=1) if len(y) > 1 else np.full(y.shape[1], np.nan)
    safe = np.where(ref_sd > 0, ref_sd, np.nan)
    w1 = wasserstein_sd(x, y)
    coverage = ((y >= lo) & (y <= hi)).mean(0)
    rhat, ess = _mixing(p.values)
    still = _still_chains(p.values)
    varies = np.ptp(y, axis=0) > 0
    fixed = still.all(axis=0) & ~varies   # constant in both fits: structural (a Cholesky factor's)
    stuck = still.any(axis=0) & varies    # some private chain never moved where the reference does
    # ArviZ's R-hat of a chain that never moved is inf or NaN and its ESS the draw count: neither
    # says what happened.  A component the chains never moved along is infinitely far from mixed
    # (within-chain variance 0); one constant in both fits (a Cholesky factor's fixed entries) has
    # no mixing to judge.
    rhat = np.where(stuck, np.inf, np.where(fixed, np.nan, rhat))
    ess = np.where(stuck | fixed, np.nan, ess)
    same = np.isclose(mean, ref_mean, rtol=1e-9, atol=1e-12)   # a fixed value, to rounding
    rows: list[dict[str, Any]] = []
    for k, name in enumerate(names):
        flags = []
        if fixed[k]:
            flags.append("constant" if same[k] else "constant, differs")
        if stuck[k]:
            flags.append("not moving")
        if (np.isfinite(rhat[k]) or stuck[k]) and rhat[k] > RHAT_MAX:
            flags.append("not mixed")
        if np.isfinite(ess[k]) and ess[k] < ESS_MIN:
            flags.append("low ESS")
        rows.append({
            "name": name, "variable": p.bases[k],
            "mean": float(mean[k]), "ref_mean": float(ref_mean[k]),
            "sd": float(sd[k]), "ref_sd": float(ref_sd[k]),
            "std_mean_error": float((mean[k] - ref_mean[k]) / safe[k]),
            "sd_ratio": float(sd[k] / safe[k]),
            "w1": float(w1[k]), "coverage": float(coverage[k]),
            "rhat": float(rhat[k]), "ess_bulk": float(ess[k]),
            "flags": flags,
        })
    distance = _mmd_matrices(x, y, bandwidth=None, max_draws=max_draws, standardise=True,
                             seed=seed)
    attrs = dict(p.attrs)
    warns = _attr_warnings(attrs)
    result = Comparison(rows=rows, mmd=distance, interval=float(interval),
                        var_names=list(dict.fromkeys(p.bases)), privacy=attrs, private=private,
                        reference=reference, notes=[], warnings=warns, _x=x, _y=y)
    not_mixed = [row["name"] for row in rows if "not mixed" in row["flags"]]
    low_ess = [row["name"] for row in rows if "low ESS" in row["flags"]]
    if stuck.any():
        never = int(still[:, stuck].any(axis=1).sum())
        result.notes.append(
            f"{never} of {p.values.shape[0]} private chain(s) never moved along "
            f"{_short([names[k] for k in np.flatnonzero(stuck)])}: every draw of such a chain is "
            "the same value, while the reference varies there")
    if fixed.any():
        differ = [names[k] for k in np.flatnonzero(fixed & ~same)]
        result.notes.append(
            f"{_short([names[k] for k in np.flatnonzero(fixed)])} are constant in both fits (fixed "
            "by the parametrisation, such as a Cholesky factor's upper triangle): they carry no "
            "error and the plot leaves them out"
            + (f"; but {_short(differ)} are fixed at different values in the two fits" if differ
               else ""))
    if not_mixed:
        result.notes.append(
            f"the private chains have NOT MIXED (R-hat > {RHAT_MAX}) for {_short(not_mixed)}: "
            "the draws are not yet a sample of any posterior; the means and the central "
            "intervals above describe the draws only and are not credible intervals")
    if not not_mixed and not bool(attrs.get("mixed", True)):
        result.notes.append(
            "the private fit flags its own draws as not credible (its sampler's attrs say "
            "mixed = False; see the sampler warnings): the means and the central intervals above "
            "describe the draws only and are not credible intervals")
    if low_ess:
        result.notes.append(
            f"bulk ESS below {ESS_MIN:.0f} for {_short(low_ess)}: the Monte Carlo error of a "
            "mean (about 1/sqrt(ESS) sd) is above 0.1 sd, as large as the errors shown")
    if p.values.shape[0] == 1 and p.values.shape[1] >= 4:
        result.notes.append("the private draws come as one chain: R-hat is split R-hat of that "
                            "chain and cannot see chains stuck in different places")
    result.notes.extend(f"sampler warning: {w}" for w in warns)
    ref_rhat, _ = _mixing(r.values) if r.values.shape[0] > 1 else (np.array([np.nan]), None)
    if np.any(np.isfinite(ref_rhat)) and np.nanmax(ref_rhat) > RHAT_MAX:
        result.notes.append(f"the REFERENCE chains have not mixed (max R-hat "
                            f"{np.nanmax(ref_rhat):.3f}): it is not a trustworthy yardstick")
    result.notes.extend(notes)
    return result
