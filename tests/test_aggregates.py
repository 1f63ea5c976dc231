"""Aggregate queries (issue 16, item 1): clipped sums computed where the rows live.

Three computations must agree: closed forms on a NumPy density, the per-row
reference (:class:`stan_dp.aggregates.PerRowQueries`, the samplers' former
arithmetic) and the C++ queries of :class:`stan_dp.RowModel`.  The samplers
must draw the same chains through either path.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import bundled, logistic_data, stan_test_model
from densities import NormalMean

import stan_dp
from stan_dp.aggregates import GradSum, PerRowQueries, RatioSums, queries
from stan_dp.mechanisms import clamp_rows_l2


# ------------------------------------------------------------- NumPy side --
def test_ratio_sums_match_the_closed_form_on_normal_rows():
    """l_j(θ) = -(y_j - θ)²/2 (σ = 1): r_j = (θ'-θ)(y_j - (θ+θ')/2), clipped by hand."""
    y = np.linspace(-3.0, 3.0, 61)
    q = PerRowQueries(NormalMean(y))
    a, b = np.array([0.2]), np.array([0.5])
    r = (b[0] - a[0]) * (y - 0.5 * (a[0] + b[0]))
    bound = 0.4
    x = 0.7 * np.clip(2.0 * r, -bound, bound)
    got = q.clipped_ratio_sums(b, a, bound, pre_scale=2.0, post_scale=0.7)
    assert got.count == y.size
    assert got.n_clipped == int(np.sum(np.abs(2.0 * r) > bound))
    np.testing.assert_allclose(got.totals, [x.sum()], rtol=1e-13)
    np.testing.assert_allclose(got.m2, np.sum((x - x.mean()) ** 2), rtol=1e-12)
    groups = (np.arange(y.size) % 3).astype(int)
    by_group = q.clipped_ratio_sums(b, a, bound, pre_scale=2.0, post_scale=0.7, groups=groups, n_groups=3)
    np.testing.assert_allclose(by_group.totals, [x[groups == g].sum() for g in range(3)], rtol=1e-12)
    rows = np.array([0, 5, 5, 60])
    sub = q.clipped_ratio_sums(b, a, bound, pre_scale=2.0, post_scale=0.7, rows=rows,
                               groups=groups, n_groups=3)
    np.testing.assert_allclose(sub.totals, [x[rows][groups[rows] == g].sum() for g in range(3)],
                               rtol=1e-12)


def test_grad_sum_matches_clamping_each_row():
    y = np.linspace(-3.0, 3.0, 61)
    q = PerRowQueries(NormalMean(y))
    theta = np.array([0.5])
    g = (y - 0.5)[:, None]
    expected = clamp_rows_l2(g, 1.0)[0].sum(axis=0)
    got = q.clipped_grad_sum(theta, 1.0)
    np.testing.assert_allclose(got.total, expected, rtol=1e-13)
    assert got.n_clipped == int(np.sum(np.abs(y - 0.5) > 1.0))
    frame = np.array([[3.0]])
    np.testing.assert_allclose(q.clipped_grad_sum(theta, 1.0, frame=frame).total,
                               clamp_rows_l2(3.0 * g, 1.0)[0].sum(axis=0), rtol=1e-13)


def test_merge_equals_the_sums_of_the_whole():
    """RatioSums.merge (parallel variance) and GradSum.merge on a split of the rows."""
    rng = np.random.default_rng(3)
    x = rng.normal(2.0, 3.0, size=1000)
    parts = np.split(x, [10, 11, 500])
    merged = RatioSums.merge([RatioSums(np.array([p.sum()]), p.size, float(np.sum((p - p.mean()) ** 2)), 1)
                              for p in parts])
    assert merged.count == x.size and merged.n_clipped == len(parts)
    np.testing.assert_allclose(merged.totals, [x.sum()], rtol=1e-12)
    np.testing.assert_allclose(merged.m2, np.sum((x - x.mean()) ** 2), rtol=1e-12)
    g = rng.normal(size=(50, 3))
    gm = GradSum.merge([GradSum(g[:20].sum(0), 2), GradSum(g[20:].sum(0), 3)])
    np.testing.assert_allclose(gm.total, g.sum(0), rtol=1e-12)
    assert gm.n_clipped == 5


def test_point_cache_evaluates_each_point_once_in_a_penalty_chain():
    """A penalty step costs one evaluation of the rows (the current point is cached)."""
    calls = []

    class Counting(NormalMean):
        def row_log_lik(self, theta, rows=None):
            calls.append(rows is None)
            return super().row_log_lik(theta, rows)

        def row_log_lik_grad(self, theta, rows=None):
            y = self.y if rows is None else self.y[rows]
            return NormalMean.row_log_lik(self, theta, rows), (y - theta[0])[:, None]

    q = PerRowQueries(Counting(np.linspace(-1, 1, 11)))
    a, b, c = np.array([0.0]), np.array([0.1]), np.array([0.2])
    q.clipped_ratio_sums(b, a, 1.0)            # two evaluations
    q.clipped_ratio_sums(c, b, 1.0)            # accepted b: one more
    q.clipped_ratio_sums(np.array([0.3]), b, 1.0)  # rejected c: one more
    assert len(calls) == 4
    q.clipped_grad_sum(c, 1.0)                 # a gradient's values join the cache ...
    q.clipped_ratio_sums(c, b, 1.0)            # ... and the ratio test reuses them
    assert len(calls) == 4


def test_queries_returns_a_native_density_unwrapped(logistic_model):
    assert queries(logistic_model) is logistic_model
    assert isinstance(queries(NormalMean(np.zeros(3))), PerRowQueries)


# ----------------------------------------------------------- native side --
@pytest.fixture(scope="module")
def logistic_model(compiled):
    """Unstandardised predictors (one in metres, one in thousandths) so clipping is active."""
    data = logistic_data(n=3000, d=3, seed=5)
    data["X"] = data["X"] * np.array([1.0, 250.0, 0.001])
    return stan_dp.RowModel(compiled(bundled("logistic_regression")), data)


@pytest.mark.parametrize("kw", [{}, {"pre_scale": 0.3}, {"post_scale": 0.5}, {"rows": "batch"},
                                {"groups": 3}, {"rows": "batch", "groups": 3}])
@pytest.mark.parametrize("bound", [1e-4, 0.05, np.inf])
def test_native_ratio_sums_equal_the_per_row_reference(logistic_model, kw, bound):
    m = logistic_model
    rng = np.random.default_rng(11)
    kw = dict(kw)
    if kw.get("rows") == "batch":
        kw["rows"] = np.sort(rng.choice(m.n_rows, 257, replace=False))
    if "groups" in kw:
        kw["n_groups"] = kw["groups"]
        kw["groups"] = rng.integers(0, kw["n_groups"], m.n_rows)
    a = rng.normal(size=m.dim) * 0.01
    b = a + rng.normal(size=m.dim) * 0.002
    got = m.clipped_ratio_sums(b, a, bound, **kw)
    ref = PerRowQueries(m).clipped_ratio_sums(b, a, bound, **kw)
    assert (got.count, got.n_clipped) == (ref.count, ref.n_clipped)
    assert 0 < ref.n_clipped < ref.count or bound != 0.05  # clipping active in the middle case
    np.testing.assert_allclose(got.totals, ref.totals, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(got.m2, ref.m2, rtol=1e-10)


@pytest.mark.parametrize("frame", [False, True])
@pytest.mark.parametrize("bound", [0.3, 30.0, np.inf])
@pytest.mark.parametrize("batch", [False, True])
def test_native_grad_sum_equals_the_per_row_reference(logistic_model, frame, bound, batch):
    m = logistic_model
    rng = np.random.default_rng(12)
    a = rng.normal(size=m.dim) * 0.01
    f = rng.normal(size=(m.dim, m.dim - 1)) if frame else None  # k < dim allowed
    rows = np.arange(0, m.n_rows, 7) if batch else None
    got = m.clipped_grad_sum(a, bound, frame=f, rows=rows)
    ref = PerRowQueries(m).clipped_grad_sum(a, bound, frame=f, rows=rows)
    assert got.n_clipped == ref.n_clipped
    np.testing.assert_allclose(got.total, ref.total, rtol=1e-11)


def test_native_queries_do_not_depend_on_threads_or_the_cache(logistic_model):
    """Fixed blocks merged in order: bit-identical for 1 and 2 threads, cached or not."""
    m = logistic_model
    rng = np.random.default_rng(13)
    a = rng.normal(size=m.dim) * 0.01
    b = a + 0.001
    out = []
    for threads in (1, 2):
        m.threads = threads
        fresh = m.clipped_ratio_sums(b + threads * 0.0, a, 0.01)          # evaluates both
        again = m.clipped_ratio_sums(b, a, 0.01)                          # both cached
        g = m.clipped_grad_sum(b, 2.0)
        out.append((fresh, again, g))
        assert fresh.totals.tobytes() == again.totals.tobytes() and fresh.m2 == again.m2
    (f1, _, g1), (f2, _, g2) = out
    assert f1.totals.tobytes() == f2.totals.tobytes() and f1.m2 == f2.m2
    assert g1.total.tobytes() == g2.total.tobytes()


def test_native_failed_rows_count_against_the_move(compiled):
    """Rows that throw are NaN: each contributes -bound, as clip_log_ratios maps NaN."""
    from test_robustness import throwing_data

    model = stan_dp.RowModel(compiled(stan_test_model("row_throws")), throwing_data(), check=False)
    a, b = np.array([0.1]), np.array([0.2])
    got = model.clipped_ratio_sums(b, a, 0.5)
    ref = PerRowQueries(model).clipped_ratio_sums(b, a, 0.5)
    assert got.n_clipped == ref.n_clipped >= 2
    np.testing.assert_allclose(got.totals, ref.totals, rtol=1e-12)
    g = model.clipped_grad_sum(a, 10.0)
    np.testing.assert_allclose(g.total, PerRowQueries(model).clipped_grad_sum(a, 10.0).total, rtol=1e-12)


def test_native_queries_refuse_bad_arguments(logistic_model):
    m = logistic_model
    z = np.zeros(m.dim)
    with pytest.raises(IndexError):
        m.clipped_ratio_sums(z, z, 1.0, rows=[m.n_rows])
    with pytest.raises(ValueError, match="one group index per data row"):
        m.clipped_ratio_sums(z, z, 1.0, groups=[0, 1], n_groups=2)
    with pytest.raises(RuntimeError, match="group index is out of range"):
        m.clipped_ratio_sums(z, z, 1.0, groups=np.full(m.n_rows, 2), n_groups=2)
    with pytest.raises(ValueError, match="bound"):
        m.clipped_grad_sum(z, -1.0)
    with pytest.raises(ValueError, match="frame"):
        m.clipped_grad_sum(z, 1.0, frame=np.eye(m.dim + 1))


@pytest.mark.parametrize("sampler", ["penalty", "hmc", "subsampled_penalty", "barker"])
def test_samplers_draw_the_same_chain_through_native_and_per_row_queries(logistic_model, sampler):
    """Same seed, same chain: only the rounding of the sums differs between the two paths."""
    m = logistic_model
    common = dict(epsilon=2.0, delta=1e-5, chains=1, seed=7, progress=False,
                  init=np.zeros(m.dim), iterations=60)
    knobs = {
        "penalty": dict(clip=5.0, step_size=0.003),
        "hmc": dict(step_size=0.002, n_leapfrog=3, grad_clip=3.0, clip=5.0),
        "subsampled_penalty": dict(batch_size=500, clip=5.0, step_size=0.003),
        "barker": dict(batch_size=2000, step_size=0.002),
    }[sampler]
    if sampler == "barker":
        common = {**common, "epsilon": 8.0, "iterations": 40}
    fn = getattr(stan_dp, sampler)
    with np.errstate(all="ignore"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            native = fn(m, **common, **knobs)
            per_row = fn(PerRowQueries(m), **common, **knobs)
    for name in native.posterior.data_vars:
        np.testing.assert_allclose(native.posterior[name].values, per_row.posterior[name].values,
                                   rtol=1e-9, atol=1e-12)
    acc = native.sample_stats["is_accepted"].values
    assert 0 < acc.sum() < acc.size  # both decisions happened, and agreed
    np.testing.assert_array_equal(acc, per_row.sample_stats["is_accepted"].values)


# ------------------------------------------- rows held elsewhere (protocol) --
class RowsElsewhere:
    """A density whose rows can be reached only through the aggregate queries.

    It has no ``row_log_lik``: every sampler and the private adaptation must
    work through ``clipped_ratio_sums`` / ``clipped_grad_sum`` /
    ``row_statistic`` / ``reduce``, as on a sharded model.
    """

    def __init__(self, inner) -> None:
        self._q = PerRowQueries(inner)
        self._inner = inner
        self.n_rows, self.dim, self.param_names = inner.n_rows, inner.dim, inner.param_names
        self.calls = 0

    def log_prior(self, theta):
        return self._inner.log_prior(theta)

    def log_prior_grad(self, theta):
        return self._inner.log_prior_grad(theta)

    def constrain(self, theta):
        return self._inner.constrain(theta)

    def clipped_ratio_sums(self, *args, **kwargs):
        self.calls += 1
        return self._q.clipped_ratio_sums(*args, **kwargs)

    def clipped_grad_sum(self, *args, **kwargs):
        self.calls += 1
        return self._q.clipped_grad_sum(*args, **kwargs)

    def row_statistic(self, fn, *args):
        self.calls += 1
        return self._q.row_statistic(fn, *args)

    def reduce(self, stat, fn, *args):
        return self._q.reduce(stat, fn, *args)


@pytest.mark.parametrize("method", ["gaussian", "penalty", "hmc", "subsampled_penalty", "barker"])
def test_the_automatic_path_runs_on_rows_held_elsewhere(method):
    """Adaptation and chain through the queries only: the same draws as in process."""
    from test_auto import logistic

    import warnings
    model = logistic(2000, 1, True)
    kw = dict(epsilon=3.0, delta=1e-5, method=method, seed=5, chains=2, progress=False,
              **({} if method in ("barker", "gaussian") else {"iterations": 40, "warmup": 10}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        here = stan_dp.sample(model, **kw)
        away_model = RowsElsewhere(model)
        away = stan_dp.sample(away_model, **kw)
    assert away_model.calls > 0
    for name in here.posterior.data_vars:
        np.testing.assert_array_equal(here.posterior[name].values, away.posterior[name].values)
    assert here.attrs["epsilon_spent"] == away.attrs["epsilon_spent"]


class _OwnersStandIn:
    """A model whose owners add their own noise (the interface of ShardedModel(owners=True))."""

    owner_noise = True
    owner_labels = ["a", "b"]
    relations = ("replace_one",)

    def __init__(self, inner) -> None:
        self._inner = inner
        self.n_rows, self.dim, self.param_names = inner.n_rows, inner.dim, inner.param_names

    def log_prior(self, theta):
        return self._inner.log_prior(theta)

    def constrain(self, theta):
        return self._inner.constrain(theta)

    def release_owner_ratio_sums(self, rng_noise, theta_new, theta_old, bound, sd, *, temperature=1.0):
        raise AssertionError("refused runs must not reach the owners")


@pytest.mark.parametrize("call", [
    lambda m: stan_dp.subsampled_penalty(m, epsilon=1.0, delta=1e-5, batch_size=10, clip=1.0,
                                         step_size=0.1, iterations=5),
    lambda m: stan_dp.barker(m, epsilon=8.0, delta=1e-5, batch_size=10, step_size=0.1, iterations=5),
    lambda m: stan_dp.hmc(m, epsilon=1.0, delta=1e-5),
    lambda m: stan_dp.sample(m, epsilon=1.0, delta=1e-5),
    lambda m: stan_dp.penalty(m, epsilon=1.0, delta=1e-5),   # no knobs: the adaptation
], ids=["subsampled", "barker", "hmc", "sample", "penalty-auto"])
def test_owners_models_are_refused_by_every_sampler_but_the_penalty(call):
    """Only the penalty's release can be noised by each owner; the rest is refused up front."""
    model = _OwnersStandIn(NormalMean(np.zeros(20)))
    with pytest.raises(TypeError, match="only the penalty sampler runs on it"):
        call(model)


def test_a_relation_the_model_does_not_support_is_refused_before_any_release():
    model = _OwnersStandIn(NormalMean(np.zeros(20)))
    with pytest.raises(ValueError, match="supports relation='replace_one' only"):
        stan_dp.penalty(model, epsilon=1.0, delta=1e-5, clip=1.0, step_size=0.1, iterations=5,
                        relation="add_remove", public_owners=None)
