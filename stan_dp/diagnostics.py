"""Distances between posteriors: MMD and a per-parameter comparison table.

Private samplers may converge to a slightly wrong distribution (clipping,
penalty noise, subsampling), so R-hat and ESS cannot tell how good a private
posterior is.  Following Räisä (2021, seed 003, Section 7.1) we measure the
maximum mean discrepancy (MMD; Gretton et al. 2012) between the private draws
and draws of the exact (or a trusted non-private) posterior, with the Gaussian
RBF kernel ``k(x, y) = exp(-||x - y||^2 / (2 s^2))`` (the thesis prints the
exponent without its minus sign) and the bandwidth ``s`` set by the median
heuristic on subsamples of both samples.

Common space
------------
Both samples are flattened to their scalar components (``beta[0]``, ...) in
the **constrained** space in which Stan reports them, then **standardised by
the reference sample's mean and sd per component**.  Standardising makes the
kernel treat every component on the scale of its own posterior spread, so a
parameter measured in large units does not swamp the others, and it uses
only the reference, so the map is the same for every private fit compared
against that reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["draws_matrix", "mmd", "median_bandwidth", "Comparison", "compare"]

MEDIAN_SUBSAMPLE = 50
"""Draws taken (with replacement) from each sample for the median heuristic (seed 003, 7.1)."""

DEFAULT_MAX_DRAWS = 2000
"""Draws used from each sample by :func:`mmd` (evenly thinned); kernel matrices are O(m^2)."""


def _posterior(obj: Any):
    """The posterior dataset of an InferenceData, or ``obj`` itself if it is a Dataset."""
    post = getattr(obj, "posterior", None)
    return post if post is not None else obj


def _component_names(name: str, shape: tuple[int, ...]) -> list[str]:
    if not shape:
        return [name]
    return [f"{name}[{','.join(map(str, idx))}]" for idx in np.ndindex(*shape)]


def draws_matrix(
    sample: Any, var_names: Sequence[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """Flatten posterior draws to a ``(draws, components)`` matrix.

    Parameters
    ----------
    sample : InferenceData, xarray.Dataset, mapping or ndarray
        An ``InferenceData`` (its ``posterior`` group), a dataset or mapping of
        ``name -> array (chain, draw, *shape)``, or a 2-D array
        ``(draws, components)`` used as is.
    var_names : sequence of str, optional
        Variables to use (default: all variables of the posterior).

    Returns
    -------
    matrix : ndarray, shape (chains * draws, components)
    names : list of str
        Component names such as ``"beta[1]"`` (0-based indices).

    Raises
    ------
    ValueError
        For an unknown variable or an empty sample.
    """
    if isinstance(sample, np.ndarray):
        if sample.ndim != 2:
            raise ValueError(f"an array sample must be 2-D (draws, components), got shape {sample.shape}")
        if var_names is not None:
            raise ValueError("var_names cannot be used with a plain array sample")
        return np.asarray(sample, dtype=float), [f"x[{j}]" for j in range(sample.shape[1])]
    post = _posterior(sample)
    available = list(getattr(post, "data_vars", post.keys() if isinstance(post, Mapping) else []))
    names = list(available) if var_names is None else list(var_names)
    missing = [v for v in names if v not in available]
    if missing:
        raise ValueError(f"variables {missing} not in the posterior (it has {available})")
    if not names:
        raise ValueError("no variables to compare")
    cols: list[np.ndarray] = []
    labels: list[str] = []
    for name in names:
        arr = np.asarray(post[name], dtype=float)
        if arr.ndim < 2:
            raise ValueError(f"variable {name!r} must have (chain, draw, ...) dimensions, got shape {arr.shape}")
        flat = arr.reshape(arr.shape[0] * arr.shape[1], -1)
        cols.append(flat)
        labels.extend(_component_names(name, arr.shape[2:]))
    matrix = np.concatenate(cols, axis=1)
    if matrix.shape[0] == 0:
        raise ValueError("the sample has no draws")
    return matrix, labels


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


def _standardise(x: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu = ref.mean(0)
    sd = ref.std(0, ddof=1) if len(ref) > 1 else np.ones(ref.shape[1])
    sd = np.where(sd > 0, sd, 1.0)
    return (x - mu) / sd, (ref - mu) / sd


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
    a, b : InferenceData, dataset, mapping or 2-D array
        The samples (``b`` is the reference used for standardising); see
        :func:`draws_matrix`.  They must have the same components.
    var_names : sequence of str, optional
        Variables to compare (default: all of ``b``'s posterior variables
        present in both).
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
        for two samples of one distribution.
    """
    x, y, _, _ = _paired_matrices(a, b, var_names)
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


@dataclass
class Comparison:
    """A private posterior next to a reference posterior.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per scalar component: ``mean``, ``ref_mean``, ``sd``,
        ``ref_sd``, ``std_mean_error`` ((mean - ref_mean) / ref_sd),
        ``sd_ratio`` (sd / ref_sd) and ``coverage`` (share of the reference
        draws inside the private central ``interval`` interval; equals
        ``interval`` when the two agree).
    mmd : float
        :func:`mmd` over the compared variables (standardised space).
    interval : float
        Probability of the central interval used for ``coverage``.
    var_names : list of str
        The compared variables.
    privacy : dict
        The private fit's attributes (ε, δ, ε spent, sampler, ...).
    private, reference : object
        The two samples, kept for :meth:`plot`.
    """

    table: Any
    mmd: float
    interval: float
    var_names: list[str]
    privacy: dict
    private: Any
    reference: Any

    @property
    def worst_std_mean_error(self) -> float:
        """Largest ``|std_mean_error|`` over the components."""
        return float(np.abs(self.table["std_mean_error"]).max())

    def __str__(self) -> str:
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_columns", 20):
            body = self.table.to_string(float_format=lambda v: f"{v:.3f}")
        return (f"{body}\nMMD (standardised, RBF kernel, median bandwidth): {self.mmd:.4f}; "
                f"worst |standardised mean error|: {self.worst_std_mean_error:.3f}")

    def plot(self, path: str | Path, *, private_label: str = "private",
             reference_label: str = "reference") -> Path:
        """Overlay the two posteriors' marginal densities (ArviZ) and save a PNG.

        Parameters
        ----------
        path : str or Path
            Output file (PNG).
        private_label, reference_label : str
            Legend labels.

        Returns
        -------
        Path
            The written file.
        """
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        from stan_dp.output import _import_arviz

        az = _import_arviz()
        path = Path(path)
        axes = az.plot_density(
            [_posterior(self.private), _posterior(self.reference)],
            var_names=self.var_names,
            data_labels=[private_label, reference_label],
            shade=0.1,
            hdi_prob=0.99,
        )
        fig = np.asarray(axes).ravel()[0].figure
        fig.suptitle(f"{private_label} vs {reference_label}: MMD {self.mmd:.3f}", fontsize=10)
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        return path


def _shared_var_names(private: Any, reference: Any) -> list[str]:
    post_p, post_r = _posterior(private), _posterior(reference)
    names_r = list(getattr(post_r, "data_vars", None) or post_r.keys())
    names_p = set(getattr(post_p, "data_vars", None) or post_p.keys())
    return [v for v in names_r if v in names_p
            and tuple(np.shape(post_r[v])[2:]) == tuple(np.shape(post_p[v])[2:])]


def _paired_matrices(
    a: Any, b: Any, var_names: Sequence[str] | None
) -> tuple[np.ndarray, np.ndarray, list[str], list[str] | None]:
    """Draw matrices of two samples over the same components (default: shared variables)."""
    if var_names is None and not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray):
        var_names = _shared_var_names(a, b)
        if not var_names:
            raise ValueError("the two samples share no posterior variables of equal shape")
    x, labels = draws_matrix(a, var_names)
    y, labels_b = draws_matrix(b, var_names)
    if labels != labels_b:
        raise ValueError(f"the samples have different components: {labels} vs {labels_b}")
    return x, y, labels, None if var_names is None else list(var_names)


def compare(
    private: Any,
    reference: Any,
    *,
    var_names: Sequence[str] | None = None,
    interval: float = 0.9,
    max_draws: int | None = DEFAULT_MAX_DRAWS,
    seed: int = 0,
) -> Comparison:
    """Compare a private posterior with a reference posterior, variable by variable.

    Parameters
    ----------
    private, reference : InferenceData, dataset or mapping
        Posterior samples with variables of shape ``(chain, draw, ...)``.
    var_names : sequence of str, optional
        Variables to compare.  Default: every variable of the private
        posterior that the reference also has with the same shape (so a
        reference's transformed parameters and generated quantities, which
        private fits do not report, are skipped).
    interval : float
        Probability of the private central interval used for ``coverage``.
    max_draws : int or None
        Thinning for the MMD (see :func:`mmd`).
    seed : int
        Seed of the MMD's bandwidth subsampling.

    Returns
    -------
    Comparison
    """
    import pandas as pd

    if not (0 < interval < 1):
        raise ValueError(f"interval must be in (0, 1), got {interval!r}")
    x, y, labels, names = _paired_matrices(private, reference, var_names)
    lo, hi = np.quantile(x, [(1 - interval) / 2, (1 + interval) / 2], axis=0)
    ref_sd = y.std(0, ddof=1)
    table = pd.DataFrame(
        {
            "mean": x.mean(0),
            "ref_mean": y.mean(0),
            "sd": x.std(0, ddof=1),
            "ref_sd": ref_sd,
            "std_mean_error": (x.mean(0) - y.mean(0)) / np.where(ref_sd > 0, ref_sd, np.nan),
            "sd_ratio": x.std(0, ddof=1) / np.where(ref_sd > 0, ref_sd, np.nan),
            "coverage": ((y >= lo) & (y <= hi)).mean(0),
        },
        index=labels,
    )
    distance = mmd(x, y, max_draws=max_draws, seed=seed)
    attrs = dict(getattr(_posterior(private), "attrs", {}) or {})
    return Comparison(table=table, mmd=distance, interval=float(interval), var_names=names,
                      privacy=attrs, private=private, reference=reference)
