r"""Empirical privacy audit: statistically valid lower bounds on the ε of one release.

For each sampler's per-iteration mechanism the audit builds a pair of
worst-case neighbouring data sets ``D``, ``D'`` (under each neighbouring
relation the sampler supports), records many released values through the
package's *own* kernels and mechanism functions, and turns them into a lower
bound on the ε the mechanism can satisfy at the stated δ:

* a threshold test ``S = {x > t}`` (or ``{x < t}``, with either data set
  first) is chosen on a separate *selection* sample;
* on a fresh *evaluation* sample, Clopper–Pearson bounds give
  ``p_D >= p_lo`` and ``p_D' <= p_hi``, each at level ``α / (2 k)`` for ``k``
  tests (Bonferroni), so with probability at least ``1 - α`` all hold;
* any ``(ε, δ)``-DP mechanism has ``p_D <= e^ε p_D' + δ``, hence
  ``ε >= log((p_lo - δ) / p_hi)``; the audit reports the largest of these.

A lower bound above the claimed ε (from :mod:`stan_dp.accounting`) proves,
at confidence ``1 - α``, that the mechanism is *not* as private as claimed:
the audit flags it.  Deliberately broken variants (noise halved, clipping
removed) must be flagged; the real mechanisms must not.  The audit measures
ONE release (one step) of each mechanism, at the per-step ε the accountant
assigns to it; composition is the accountant's business.

Releases are captured by wrapping the mechanism function a sampler module
imported (``gaussian_release``) for the duration of a draw: the wrapper calls
the real function and records what it returns, so the kernel runs unchanged.
Seeded numpy streams make the audit deterministic; the secure (``seed=None``)
path is audited with :class:`~stan_dp.secure_noise.SecureNoise` over a seeded
bit source (the samplers are exact whatever the bits).
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from scipy import stats

from stan_dp.accounting import Budget, Release
from stan_dp.accounting.curve import barker_step_rdp, curve_epsilon
from stan_dp.accounting.gaussian import gaussian_epsilon
from stan_dp.augmentation.noise import Gaussian, Laplace
from stan_dp.samplers import barker as _barker
from stan_dp.samplers import expfamily as _expfamily
from stan_dp.samplers import hmc as _hmc
from stan_dp.samplers import penalty as _penalty
from stan_dp.samplers import subsampled as _subsampled
from stan_dp.samplers.barker_correction import DEFAULT_CORRECTION_VARIANCE
from stan_dp.samplers.proposals import Move, Proposal
from stan_dp.secure_noise import SecureNoise

__all__ = [
    "AuditResult",
    "AuditCase",
    "clopper_pearson",
    "epsilon_lower_bound",
    "audit_cases",
    "run_audit",
    "format_table",
]

DELTA = 1e-5
"""δ at which the Gaussian mechanisms' claims are stated and audited."""
ALPHA = 0.01
"""Overall significance of each lower bound (Bonferroni over its tests)."""
TESTS = 3
"""Thresholds carried from the selection sample to the evaluation sample."""
Z = 1.0
"""Noise multiplier of the audited Gaussian releases (claimed ε 4.38 at δ = 1e-5)."""
STEP = 0.5
"""Length of the fixed, data-independent move ``theta -> theta + STEP``."""
CLIP = 1.0
"""Ratio clip ``L`` (and gradient / statistic bound) of the audited mechanisms."""
FAR = 50.0
"""Value of the differing row: far beyond every clip."""
LEVELS = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.998, 0.999, 0.9995)
"""Tail levels at which candidate thresholds are taken on the selection sample."""


# --------------------------------------------------------------------------- statistics

def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Exact one-sided Clopper–Pearson bounds, each at level ``alpha``, for ``k`` successes in ``n``.

    Returns
    -------
    lower, upper : float
        ``P(p < lower) <= alpha`` and ``P(p > upper) <= alpha`` under repeated sampling.
    """
    lower = 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    upper = 1.0 if k == n else float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))
    return lower, upper


def _event(x: np.ndarray, t: float, side: str) -> int:
    return int(np.count_nonzero(x > t)) if side == ">" else int(np.count_nonzero(x < t))


def _plug_in(pa: float, pb: float, delta: float, n: int) -> float:
    if pa - delta <= 0:
        return -math.inf
    return math.log((pa - delta) / max(pb, 1.0 / n))


def epsilon_lower_bound(
    select: tuple[np.ndarray, np.ndarray],
    evaluate: tuple[np.ndarray, np.ndarray],
    delta: float,
    *,
    alpha: float = ALPHA,
    tests: int = TESTS,
) -> tuple[float, str]:
    """A lower bound on ε valid with probability ``>= 1 - alpha``.

    Parameters
    ----------
    select : (ndarray, ndarray)
        Released values under ``D`` and ``D'`` used only to choose the tests.
    evaluate : (ndarray, ndarray)
        Fresh released values under ``D`` and ``D'``.
    delta : float
        The claimed δ.
    alpha : float
        Overall significance; each of the ``2 * tests`` Clopper–Pearson
        bounds is taken at ``alpha / (2 * tests)`` (Bonferroni).
    tests : int
        Number of tests carried to the evaluation sample.

    Returns
    -------
    epsilon : float
        ``max(0, max_tests log((p_lo - δ) / p_hi))``.
    test : str
        The test achieving it (``"D > t"`` etc.), for the report.
    """
    sa, sb = (np.asarray(s, dtype=float) for s in select)
    candidates = []
    pooled = np.concatenate([sa, sb])
    for level in LEVELS:
        for t, side in ((float(np.quantile(pooled, level)), ">"), (float(np.quantile(pooled, 1 - level)), "<")):
            for first, second, name in ((sa, sb, "D"), (sb, sa, "D'")):
                pa = _event(first, t, side) / first.size
                pb = _event(second, t, side) / second.size
                candidates.append((_plug_in(pa, pb, delta, second.size), t, side, name))
    candidates.sort(key=lambda c: -c[0])
    chosen = candidates[:tests]
    ea, eb = (np.asarray(e, dtype=float) for e in evaluate)
    level = alpha / (2 * len(chosen))
    best, best_test = 0.0, "none"
    for _, t, side, name in chosen:
        first, second = (ea, eb) if name == "D" else (eb, ea)
        lo, _ = clopper_pearson(_event(first, t, side), first.size, level)
        _, hi = clopper_pearson(_event(second, t, side), second.size, level)
        if lo - delta > 0 and hi > 0:
            eps = math.log((lo - delta) / hi)
            if eps > best:
                other = "D'" if name == "D" else "D"
                best, best_test = eps, f"P_{name}(x {side} {t:.3g}) vs P_{other}"
    return best, best_test


# --------------------------------------------------------------------------- densities

class _NormalRows:
    """``loglik_i = -(y_i - theta)^2 / 2``, ``theta ~ N(0, 10^2)``: the audit's row density."""

    def __init__(self, y: Sequence[float]) -> None:
        self.y = np.asarray(y, dtype=float)
        self.n_rows = int(self.y.size)
        self.dim = 1
        self.param_names = ["theta"]

    def log_prior(self, theta: np.ndarray) -> float:
        return float(-0.5 * (theta[0] / 10.0) ** 2)

    def row_log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        y = self.y if rows is None else self.y[np.asarray(rows)]
        return -0.5 * (y - theta[0]) ** 2

    def row_log_lik_grad(self, theta: np.ndarray, rows: np.ndarray | None = None):
        y = self.y if rows is None else self.y[np.asarray(rows)]
        return self.row_log_lik(theta, rows), (y - theta[0])[:, None]

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        return {"theta": np.asarray(theta[0])}


class _AbsRows(_NormalRows):
    """``loglik_i = c_i |theta|``, ``theta ~ N(0, 1)``.

    From ``theta = 0`` every ratio is ``c_i |theta'|``: with ``|c_i|`` far
    above the clip, each row's clipped ratio is ``sign(c_i) L ||theta' -
    theta||`` whatever the (noisy) trajectory, so ``released / sd`` has a
    known mean under each data set.
    """

    def log_prior(self, theta: np.ndarray) -> float:
        return float(-0.5 * theta[0] ** 2)

    def row_log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        c = self.y if rows is None else self.y[np.asarray(rows)]
        return c * abs(float(theta[0]))

    def row_log_lik_grad(self, theta: np.ndarray, rows: np.ndarray | None = None):
        c = self.y if rows is None else self.y[np.asarray(rows)]
        return self.row_log_lik(theta, rows), (c * np.sign(theta[0]))[:, None]


class _MeanStats:
    """Exponential family ``loglik = theta S - n theta^2 / 2`` with ``s(y) = y``."""

    def __init__(self, y: Sequence[float]) -> None:
        self.y = np.asarray(y, dtype=float)
        self.n_rows = int(self.y.size)
        self.dim = 1
        self.stat_dim = 1
        self.param_names = ["theta"]

    def log_prior(self, theta: np.ndarray) -> float:
        return float(-0.5 * (theta[0] / 10.0) ** 2)

    def log_lik_stats(self, theta: np.ndarray, stats_: np.ndarray) -> float:
        return float(theta[0] * stats_[0] - 0.5 * self.n_rows * theta[0] ** 2)

    def row_stats(self) -> np.ndarray:
        return self.y[:, None]

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        return {"theta": np.asarray(theta[0])}


def _fixed_proposal(step: float = STEP) -> Proposal:
    """The data-independent move ``theta -> theta + step`` (every release has the same sensitivity)."""
    def propose(rng: Any, theta: np.ndarray, aux: np.ndarray) -> Move:
        return Move(theta + step, abs(step), 0.0, -1, abs(step))

    return Proposal("fixed", lambda rng: np.empty(0), propose, lambda aux, move, accepted: aux)


def _worst_rows(relation: str, n_other: int, far: float = FAR, other: float = 0.0) -> tuple[list, list]:
    """Neighbours differing in one row: ``+far`` vs ``-far`` (replace-one) or ``+far`` vs absent."""
    base = [other] * n_other
    if relation == "replace_one":
        return base + [far], base + [-far]
    return base + [far], base


@contextlib.contextmanager
def _recording(module: Any, name: str = "gaussian_release") -> Iterator[list]:
    """Record what ``module.<name>`` returns (and its ``sd``) while the block runs."""
    real = getattr(module, name)
    records: list = []

    def wrapper(rng, value, sd, *args, **kwargs):
        out = real(rng, value, sd, *args, **kwargs)
        records.append((out, float(sd)))
        return out

    setattr(module, name, wrapper)
    try:
        yield records
    finally:
        setattr(module, name, real)


def _factor(relation: str) -> float:
    return 2.0 if relation == "replace_one" else 1.0


# --------------------------------------------------------------------------- mechanisms

Draw = Callable[[int, int, Any], np.ndarray]
"""``draw(which, count, noise_stream) -> released values`` with ``which`` 0 for ``D``, 1 for ``D'``."""


@dataclass(frozen=True)
class AuditCase:
    """One mechanism under one relation, real or deliberately broken."""

    mechanism: str
    relation: str
    variant: str
    """``"real"``, ``"noise halved"`` or ``"clipping removed"``."""
    claimed_epsilon: float
    delta: float
    draw: Draw
    quick: int = 3000
    """Evaluation releases per data set in the quick (CI) audit; 0: full audit only."""
    full: int = 100_000
    """Evaluation releases per data set in the full audit."""


def _penalty_draw(relation: str, *, z: float = Z, clip_removed: bool = False) -> Draw:
    pair = _worst_rows(relation, 4)
    prop = _fixed_proposal()
    factor = _factor(relation)

    def draw(which: int, count: int, noise: Any) -> np.ndarray:
        density = _NormalRows(pair[which])
        if clip_removed:
            kernel = _penalty.build_kernel(density, prop, clip=np.inf, noise_multiplier=z, relation=relation,
                                           noise_sd=z * factor * CLIP * STEP)
        else:
            kernel = _penalty.build_kernel(density, prop, clip=CLIP, noise_multiplier=z, relation=relation)
        state = _penalty.init(density, np.zeros(1))
        rp = np.random.default_rng(0)
        with _recording(_penalty) as rec:
            for _ in range(count):
                kernel(rp, noise, state)
        return np.array([float(np.sum(out)) for out, _ in rec])

    return draw


def _minibatch_draw(module: Any, n: int, build: Any) -> Draw:
    """Releases of one minibatch kernel (``build(density, proposal)``) on worst-case neighbours."""
    pair = _worst_rows("replace_one", n - 1)
    prop = _fixed_proposal()

    def draw(which: int, count: int, noise: Any) -> np.ndarray:
        density = _NormalRows(pair[which])
        kernel = build(density, prop)
        state = module.mb.init(density, np.zeros(1))
        rp = np.random.default_rng(0)
        with _recording(module) as rec:
            for _ in range(count):
                kernel(rp, noise, state)
        return np.array([float(out) for out, _ in rec])

    return draw


def _subsampled_draw(n: int, b: int, *, z: float = Z) -> Draw:
    return _minibatch_draw(_subsampled, n, lambda density, prop: _subsampled.build_kernel(
        density, prop, batch_size=b, clip=CLIP, noise_multiplier=z))


def _barker_draw(n: int, b: int) -> Draw:
    return _minibatch_draw(_barker, n, lambda density, prop: _barker.build_kernel(
        density, prop, batch_size=b))


def _hmc_gradient_draw(relation: str, *, z: float = Z, clip_removed: bool = False) -> Draw:
    pair = _worst_rows(relation, 4)
    sd = z * _factor(relation) * CLIP

    def draw(which: int, count: int, noise: Any) -> np.ndarray:
        density = _NormalRows(pair[which])
        release = _hmc.make_noisy_gradient(density, grad_clip=np.inf if clip_removed else CLIP,
                                           grad_noise_sd=sd)
        theta = np.zeros(1)
        return np.array([float(release(noise, theta).grad[0]) for _ in range(count)])

    return draw


def _hmc_ratio_draw(relation: str, *, z: float = Z) -> Draw:
    # rows c = +-1e3: D has one more +1e3 than D' (replace-one: one +1e3 replaced by -1e3)
    big = 1e3
    pair = ([big, -big, big], [big, -big, -big]) if relation == "replace_one" else ([big, -big, big], [big, -big])

    def draw(which: int, count: int, noise: Any) -> np.ndarray:
        density = _AbsRows(pair[which])
        kernel = _hmc.build_kernel(density, clip=CLIP, grad_clip=CLIP, noise_multiplier=z,
                                   grad_noise_multiplier=z, n_leapfrog=1, relation=relation, jitter=0.0)
        rp = np.random.default_rng(0)
        out = []
        with _recording(_hmc) as rec:
            for _ in range(count):
                rec.clear()
                kernel(rp, noise, _hmc.init(np.zeros(1), step_size=0.3))
                ratio = [(v, sd) for v, sd in rec if np.ndim(v) == 0]
                if ratio and ratio[-1][1] > 0:
                    out.append(float(ratio[-1][0]) / ratio[-1][1])  # released / its (public) sd
        return np.array(out)

    return draw


def _expfamily_draw(*, z: float = Z, clip_removed: bool = False) -> Draw:
    pair = _worst_rows("replace_one", 4)
    prop = _fixed_proposal()

    def draw(which: int, count: int, noise: Any) -> np.ndarray:
        model = _MeanStats(pair[which])
        stat_sum = (model.row_stats().sum(axis=0) if clip_removed
                    else _expfamily.clamped_stat_sum(model, CLIP))
        kernel = _expfamily.build_kernel(model, prop, stat_sum=stat_sum, stat_sd=z * 2.0 * CLIP)
        state = _expfamily.init(model, np.zeros(1))
        rp = np.random.default_rng(0)
        with _recording(_expfamily) as rec:
            for _ in range(count):
                kernel(rp, noise, state)
        return np.array([float(np.asarray(out)[0]) for out, _ in rec])

    return draw


def _augmentation_draw(mechanism: Any, sensitivity: float) -> Draw:
    def draw(which: int, count: int, noise: Any) -> np.ndarray:
        s = np.full((count, 1), 0.0 if which == 0 else sensitivity)
        if isinstance(noise, SecureNoise):  # one release at a time: the statistic is 1-dimensional
            return np.array([float(mechanism.release(row, noise)[0]) for row in s])
        return mechanism.release(s, noise)[:, 0]

    return draw


def audit_cases() -> list[AuditCase]:
    """Every audited (mechanism, relation, variant) with its claimed per-release ε.

    Sample sizes: the kernels cost 0.1-0.8 ms a release, so the quick audit
    takes a few thousand per data set (enough to flag clipping removed, whose
    releases are far apart); halving the noise at one step needs 20 000 -
    40 000 releases per data set to be detected at ε = 4.38 (computed with the
    Clopper-Pearson bounds used here), so the quick audit halves the noise of
    the vectorised mechanisms and the full audit also of the penalty kernel.
    """
    gauss = gaussian_epsilon(Z, 1, DELTA)  # one Gaussian release at multiplier Z
    n_sub, b_sub = 10, 5
    sub_claim = Budget(1.0, DELTA).epsilon_spent([Release(Z, batch_size=b_sub, n=n_sub)], 1)
    n_bk, b_bk = 20, 20  # b = n: no subsampling hides the differing row
    barker_claim = curve_epsilon(barker_step_rdp(b_bk, n_bk, DEFAULT_CORRECTION_VARIANCE), 1, DELTA)
    eps_lap = 1.0
    vec = dict(quick=200_000, full=2_000_000)
    slow = dict(quick=2000, full=30_000)
    cases = []
    for rel in ("replace_one", "add_remove"):
        cases.append(AuditCase("penalty: clipped ratio sum", rel, "real", gauss, DELTA, _penalty_draw(rel)))
    cases.append(AuditCase("subsampled penalty (b=5, n=10)", "replace_one", "real", sub_claim, DELTA,
                           _subsampled_draw(n_sub, b_sub)))
    cases.append(AuditCase("DP Barker test (b=n=20, C=1.6)", "replace_one", "real", barker_claim, DELTA,
                           _barker_draw(n_bk, b_bk), **slow))
    for rel in ("replace_one", "add_remove"):
        cases.append(AuditCase("DP HMC gradient", rel, "real", gauss, DELTA, _hmc_gradient_draw(rel)))
        cases.append(AuditCase("DP HMC ratio", rel, "real", gauss, DELTA, _hmc_ratio_draw(rel), **slow))
    cases.append(AuditCase("exp-family statistic", "replace_one", "real", gauss, DELTA, _expfamily_draw()))
    cases.append(AuditCase("augmentation Laplace", "replace_one", "real", eps_lap, 0.0,
                           _augmentation_draw(Laplace(eps_lap, 1.0), 1.0), **vec))
    cases.append(AuditCase("augmentation Gaussian", "replace_one", "real", gauss, DELTA,
                           _augmentation_draw(Gaussian(Z * 1.0, 1.0), 1.0), **vec))
    # deliberately broken variants: the claims stay those of the real mechanism
    cases.append(AuditCase("penalty: clipped ratio sum", "replace_one", "clipping removed", gauss, DELTA,
                           _penalty_draw("replace_one", clip_removed=True), quick=3000, full=10_000))
    cases.append(AuditCase("DP HMC gradient", "add_remove", "clipping removed", gauss, DELTA,
                           _hmc_gradient_draw("add_remove", clip_removed=True), quick=3000, full=10_000))
    cases.append(AuditCase("exp-family statistic", "replace_one", "clipping removed", gauss, DELTA,
                           _expfamily_draw(clip_removed=True), quick=3000, full=10_000))
    cases.append(AuditCase("augmentation Laplace", "replace_one", "noise halved", eps_lap, 0.0,
                           _augmentation_draw(Laplace(2 * eps_lap, 1.0), 1.0), **vec))
    cases.append(AuditCase("augmentation Gaussian", "replace_one", "noise halved", gauss, DELTA,
                           _augmentation_draw(Gaussian(Z / 2, 1.0), 1.0), **vec))
    cases.append(AuditCase("penalty: clipped ratio sum", "replace_one", "noise halved", gauss, DELTA,
                           _penalty_draw("replace_one", z=Z / 2), quick=0, full=100_000))
    return cases


def secure_cases() -> list[AuditCase]:
    """The secure (``seed=None``) noise path of two mechanisms, real and broken."""
    gauss = gaussian_epsilon(Z, 1, DELTA)
    return [
        AuditCase("penalty [secure noise]", "replace_one", "real", gauss, DELTA,
                  _penalty_draw("replace_one"), quick=2000, full=60_000),
        AuditCase("penalty [secure noise]", "replace_one", "noise halved", gauss, DELTA,
                  _penalty_draw("replace_one", z=Z / 2), quick=0, full=60_000),
        AuditCase("augmentation Laplace [secure noise]", "replace_one", "real", 1.0, 0.0,
                  _augmentation_draw(Laplace(1.0, 1.0), 1.0), quick=2000, full=60_000),
        AuditCase("augmentation Laplace [secure noise]", "replace_one", "noise halved", 1.0, 0.0,
                  _augmentation_draw(Laplace(2.0, 1.0), 1.0), quick=0, full=60_000),
    ]


# --------------------------------------------------------------------------- driver

@dataclass(frozen=True)
class AuditResult:
    """The outcome for one :class:`AuditCase`."""

    mechanism: str
    relation: str
    variant: str
    claimed_epsilon: float
    delta: float
    epsilon_lower: float
    test: str
    samples: int
    """Evaluation releases per data set."""
    seconds: float

    @property
    def flagged(self) -> bool:
        """The lower bound exceeds the claim: the mechanism is not as private as claimed."""
        return self.epsilon_lower > self.claimed_epsilon


def _stream(secure: bool, seed: int) -> Any:
    if secure:
        return SecureNoise(random.Random(seed))
    return np.random.default_rng(seed)


def run_case(case: AuditCase, samples: int, seed: int, *, secure: bool = False) -> AuditResult:
    """Audit one case with ``samples`` evaluation releases (and half as many for selection) per data set."""
    start = time.perf_counter()
    n_sel = max(1000, samples // 2)  # selection sample, never reused for the bound
    sel = (case.draw(0, n_sel, _stream(secure, seed)), case.draw(1, n_sel, _stream(secure, seed + 1)))
    ev = (case.draw(0, samples, _stream(secure, seed + 2)), case.draw(1, samples, _stream(secure, seed + 3)))
    eps, test = epsilon_lower_bound(sel, ev, case.delta)
    return AuditResult(case.mechanism, case.relation, case.variant, case.claimed_epsilon, case.delta,
                       eps, test, int(min(ev[0].size, ev[1].size)), time.perf_counter() - start)


def run_audit(*, quick: bool = False, seed: int = 20260101, secure: bool | None = None,
              progress: Callable[[AuditResult], None] | None = None) -> list[AuditResult]:
    """Run every case; ``quick`` uses fewer releases (enough to flag every broken variant).

    Parameters
    ----------
    quick : bool
        CI size (well under a minute) instead of the full audit.
    seed : int
        Base seed (each case gets its own streams).
    secure : bool, optional
        Also audit the secure-noise path (default: only in the full audit).
    progress : callable, optional
        Called with each result as it is produced.
    """
    cases = [(c, False) for c in audit_cases()]
    if secure if secure is not None else not quick:
        cases += [(c, True) for c in secure_cases()]
    out = []
    for i, (case, sec) in enumerate(cases):
        samples = case.quick if quick else case.full
        if samples <= 0:
            continue
        result = run_case(case, samples, seed + 10 * i, secure=sec)
        out.append(result)
        if progress is not None:
            progress(result)
    return out


def format_row(r: AuditResult) -> str:
    """One line of the table."""
    status = ("flagged" if r.flagged else "NOT flagged") if r.variant != "real" else (
        "FLAGGED" if r.flagged else "ok")
    label = r.mechanism if r.variant == "real" else f"broken ({r.variant}) {r.mechanism}"
    return (f"{label:<58} {r.relation:<11} {r.claimed_epsilon:>8.3f} {r.delta:>7.0e} "
            f"{r.epsilon_lower:>8.3f} {r.samples:>8d}  {status}")


def format_table(results: Sequence[AuditResult]) -> str:
    """The audit table: claimed per-release ε next to the empirical lower bound."""
    head = (f"{'mechanism':<58} {'relation':<11} {'claim ε':>8} {'δ':>7} {'ε lower':>8} {'samples':>8}  status")
    return "\n".join([head, "-" * len(head)] + [format_row(r) for r in results])
