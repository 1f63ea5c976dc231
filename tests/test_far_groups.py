"""The far phase moves a centred hierarchical group along its own direction (stan_dp.adaptation.far).

``a ~ normal(mu_a, sigma_a)`` with ``y ~ normal(a[g] + ..., sigma)``: each ``a_j`` depends on its
group's rows only, too few for the far phase's vote and curvature scale, so from the default start
(every ``a_j`` and ``mu_a`` at 0) the phase never moved them.  The direction that moves every
``a_j`` and ``mu_a`` together leaves the hierarchical statement unchanged, and every row depends on
it.  Checked here: the program reading that finds such vectors (and only those), the compiled
model's columns, the vote rows along the extra direction and their bound, the ledger (the same
releases, each over ``d + G`` columns), and against an exact Gaussian posterior that the phase
now moves the group where it did not move it at all.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import stan_dp
from stan_dp.adaptation import far, groups, newton
from stan_dp.adaptation.forecast import pld_mean_budget
from stan_dp.adaptation.plan import AdaptationSettings, adaptation_releases
from stan_dp.stan_source import hierarchical_locations
from densities import CentredGroups
from conftest import stan_test_model


PROGRAM = """
data { int N; int J; array[N] int g; vector[N] y; vector[N] x; }
parameters {
  real mu; real<lower=0> tau; real nu;
  vector[J] a; array[J] real c; vector[J] z; vector<lower=0>[J] w; vector[J] e; vector[J] f;
  real<lower=0> s; vector[3] beta;
}
model {
  a ~ normal(mu, tau);
  for (j in 1:J) c[j] ~ student_t(3, nu, tau);
  target += normal_lpdf(z | mu, tau);
  w ~ normal(mu, tau);
  e ~ normal(0, tau);
  f ~ normal(mu + nu, tau);
  beta ~ normal(0, 10);
  s ~ normal(mu, 1);
  y ~ normal(a[g] + c[g] + z[g] + w[g] + e[g] + f[g] + x * beta[1], s);
}
"""


def test_the_program_reading_finds_centred_vectors_with_a_parameter_as_location():
    """Vectorised, element by element in a loop, and as ``target +=``; not a constrained vector
    (``w``), a literal location (``e``, ``beta``), an expression (``f``), or a scalar (``s``)."""
    assert hierarchical_locations(PROGRAM) == {"a": "mu", "c": "nu", "z": "mu"}
    # a location that is itself constrained, or data, is not a group's intercept
    constrained = PROGRAM.replace("real mu;", "real<lower=0> mu;")
    assert hierarchical_locations(constrained) == {"c": "nu"}
    assert hierarchical_locations("parameters { vector[3] a; } model { a ~ normal(0, 1); }") == {}
    assert hierarchical_locations("parameters { real m; vector[3] a; } "
                                  "model { target += normal_lupdf(a | m, 1); }") == {"a": "m"}


def test_a_compiled_models_group_direction_is_its_vector_and_its_location(compiled):
    path = stan_test_model("hierarchical_intercept")
    rng = np.random.default_rng(0)
    data = {"N": 50, "J": 4, "g": rng.integers(1, 5, size=50), "y": rng.normal(size=50)}
    model = stan_dp.RowModel(compiled(path), data)
    assert model.hierarchical_locations == {"a": "mu"}
    names = model.param_names   # mu, tau, a.1 .. a.4, sigma: constrained names line up here
    members = tuple(j for j, n in enumerate(names) if n.startswith("a."))
    assert model.hierarchical_coordinates == ((members, names.index("mu")),)
    cols = groups.group_directions(groups.group_locations(model, model.dim), model.dim)
    expected = [1.0 if (n == "mu" or n.startswith("a.")) else 0.0 for n in names]
    np.testing.assert_array_equal(cols, np.array(expected)[:, None])


def test_a_density_without_groups_or_with_malformed_ones_gets_none():
    class Plain:
        dim = 3

    assert groups.group_locations(Plain(), 3) == []
    assert groups.group_directions([], 3).shape == (3, 0)
    for declared in [((0, 1), 5), ((0,), 2), ((0, 1), 1), ((0, 0), 2)]:
        # out of range, one element, the location among them, a repeated element
        bad = Plain()
        bad.hierarchical_coordinates = (declared,)
        assert groups.group_locations(bad, 3) == [], declared
    good = Plain()
    good.hierarchical_coordinates = (((0, 2), 1),)
    np.testing.assert_array_equal(groups.group_directions(groups.group_locations(good, 3), 3),
                                  [[1.0], [1.0], [1.0]])
    (mask, loc), = groups.group_locations(good, 3)
    assert mask.tolist() == [True, False, True] and loc == 1


def test_vote_rows_along_a_group_are_its_summed_gradient_clipped_at_its_own_median():
    class Rows:
        def row_log_lik_grad(self, theta):
            g = np.array([[0.5, -2.0, 0.0], [np.inf, 1.0, 0.0], [0.2, 0.3, 4.0]])
            return np.zeros(3), g

    u = np.array([[1.0], [1.0], [0.0]])
    bounds = np.array([1.0, 1.0, 1.0, 0.5])
    v = far._vote_rows(Rows(), np.zeros(3), bounds, u)
    np.testing.assert_array_equal(v[:, :3], far._vote_rows(Rows(), np.zeros(3), bounds[:3]))
    np.testing.assert_array_equal(v[:, 3], [-1.0, 1.0, 1.0])   # (0.5 - 2) / 0.5, inf, 0.5 / 0.5
    assert np.all(np.linalg.norm(v, axis=1) <= math.sqrt(4) + 1e-12)
    a = far._abs_gradient_rows(Rows(), np.zeros(3), u)
    np.testing.assert_array_equal(a[:, 3], [1.5, np.inf, 0.5])


def _groups_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """20 groups around 1.5 (sd 0.3), unit noise: from the default start every ``a_j`` and ``mu``
    is about 15 posterior sds below its posterior mean at 1,000 rows."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 20, n)
    a = 1.5 + 0.3 * rng.normal(size=20)
    return a[g] + rng.normal(size=n), g


def test_the_exact_posterior_of_the_test_density_is_where_its_gradient_vanishes():
    y, g = _groups_data(1000)
    model = CentredGroups(y, g)
    mean, cov = model.exact()
    grad = model.log_prior_grad(mean)[1] + model.row_log_lik_grad(mean)[1].sum(axis=0)
    np.testing.assert_allclose(grad, 0.0, atol=1e-9)
    h = 1e-2   # the log density is quadratic: central differences are exact up to rounding
    e = np.eye(model.dim)[3]
    second = (model.log_prior(mean + h * e) + model.row_log_lik(mean + h * e).sum()
              - 2 * (model.log_prior(mean) + model.row_log_lik(mean).sum())
              + model.log_prior(mean - h * e) + model.row_log_lik(mean - h * e).sum()) / h**2
    assert second == pytest.approx(-np.linalg.inv(cov)[3, 3], rel=1e-6)


def _far_run(model, pld: float, seed: int):
    trace: list[dict] = []
    with np.errstate(all="ignore"):
        result = newton.private_mode(model, n_public=model.n_rows, pld_mean=pld, relation="replace_one",
                                     rng_noise=np.random.default_rng(seed), init=np.zeros(model.dim),
                                     settings=AdaptationSettings(adaptive_clip=False), trace=trace)
    return np.array([t["theta"] for t in trace if t.get("far")]), result


def test_the_group_moves_where_its_coordinates_could_not():
    """1,000 rows, epsilon = 16, 20 groups of about 50 rows: a group's vote (at most 50) is within
    the count noise (sd about 50) and under the gate (0.35 n), so without the group's direction the
    far phase leaves every ``a_j`` and ``mu`` exactly where they started, 14.8 posterior sds off.
    Along it (measured, seeds 1-3) the phase ends 5.2-7.6 sds off (what is left is mostly the
    groups' differences, which one common move cannot make), and the whole search, with the
    grouped frame after it, 2.1-3.1 sds off where it was 7.9-11.3 (seeds 1-8: 1.2-4.0 against
    4.4-14.6; the far phase's move alone, 1.0-6.2)."""
    y, g = _groups_data(1000)
    pld = pld_mean_budget(16.0, 1e-5)
    mean, cov = CentredGroups(y, g).exact()
    sd = np.sqrt(np.diag(cov))
    start_off = np.max(np.abs(mean) / sd)
    assert start_off > 14.0
    for seed in (1, 2, 3):
        without, res0 = _far_run(CentredGroups(y, g, groups=False), pld, seed)
        assert np.all(without[-1] == 0.0), seed     # nothing moved
        along, res1 = _far_run(CentredGroups(y, g), pld, seed)
        moved = along[-1]
        assert np.max(np.abs(moved - mean) / sd) < 9.0, (seed, (moved - mean) / sd)
        # a common move: every a_j and mu by the same amount
        np.testing.assert_allclose(moved, moved[0], rtol=0, atol=1e-12)
        assert (np.max(np.abs(res1.mode - mean) / sd) < 0.75 * np.max(np.abs(res0.mode - mean) / sd)), seed


def test_the_ledger_with_a_group_direction_makes_the_planned_releases_over_d_plus_g_columns():
    """The plan is the same with or without groups (the same releases and multipliers: the budget
    does not change); each far release is over ``d + G`` columns, so a count vector's sensitivity is
    ``sqrt(d + G)`` and the vote's ``2 sqrt(d + G)`` (replace-one: a row's vote has norm at most
    ``sqrt(d + G)``)."""
    y, g = _groups_data(1000)
    model = CentredGroups(y, g)
    pld = pld_mean_budget(16.0, 1e-5)
    _, result = _far_run(model, pld, 1)
    plan = adaptation_releases(pld, AdaptationSettings(adaptive_clip=False), model.n_rows, model.dim)
    made = sorted(round(e.noise_multiplier, 9) for e in result.ledger.entries)
    assert made == sorted(round(r.noise_multiplier, 9) for r in plan for _ in range(r.count))
    _, plain = _far_run(CentredGroups(y, g, groups=False), pld, 1)
    assert sorted(e.noise_multiplier for e in plain.ledger.entries) == \
        sorted(e.noise_multiplier for e in result.ledger.entries)
    k = model.dim + 1
    far_entries = [e for e in result.ledger.entries if e.what.startswith("far")]
    assert far_entries
    for e in far_entries:
        expected = 2.0 * math.sqrt(k) if e.what.startswith("far vote sum") else math.sqrt(k)
        assert math.isclose(e.sensitivity, expected), e
    # the Newton rounds' initial scale is over the d + G directions too (the grouped frame's scale)
    scale = [e for e in result.ledger.entries if e.what.startswith("scale count")]
    assert scale and all(math.isclose(e.sensitivity, math.sqrt(k)) for e in scale)


def test_the_grouped_frame_puts_the_groups_direction_in_its_locations_column_only_where_it_helps():
    """``grouped_frame``: column ``l`` (the location's) becomes ``u s_u`` where the group's scale was
    found, some element's was not, and the location's column is still its own axis; the frame is
    otherwise unchanged, it stays invertible (``u`` holds the location's axis), and the replaced
    column is flagged (the orientation may turn it)."""
    d = 5
    frame = np.diag([0.1, 0.2, 0.3, 2.0, 0.5])
    declared = [(np.array([True, True, True, False, False]), 3)]   # elements 0-2, location 3
    at_floor = np.array([False, True, False, True, False])
    none = np.zeros(d, dtype=bool)
    out, grouped = groups.grouped_frame(frame, declared, np.array([0.05]), np.array([False]), at_floor)
    expected = frame.copy()
    expected[:, 3] = [0.05, 0.05, 0.05, 0.05, 0.0]
    np.testing.assert_array_equal(out, expected)
    assert grouped.tolist() == [False, False, False, True, False]
    assert abs(np.linalg.det(out)) > 0
    np.testing.assert_array_equal(frame, np.diag([0.1, 0.2, 0.3, 2.0, 0.5]))   # not mutated
    cases = [
        # every element scaled on its own
        (frame, np.array([False]), np.array([False, False, False, True, False])),
        # the group's own scale not found
        (frame, np.array([True]), at_floor),
    ]
    turned = frame.copy()
    turned[4, 3] = 0.7   # the location's column is not its own axis
    cases.append((turned, np.array([False]), at_floor))
    for start, group_floor, floor in cases:
        kept, grouped = groups.grouped_frame(start, declared, np.array([0.05]), group_floor, floor)
        np.testing.assert_array_equal(kept, start)
        np.testing.assert_array_equal(grouped, none)
    kept, grouped = groups.grouped_frame(frame, [], np.zeros(0), np.zeros(0, bool), at_floor)
    np.testing.assert_array_equal(kept, frame)
    np.testing.assert_array_equal(grouped, none)
