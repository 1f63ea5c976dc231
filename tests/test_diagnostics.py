"""MMD and posterior comparison (seed 003, Section 7.1) against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from stan_dp.diagnostics import compare, draws_matrix, median_bandwidth, mmd
from stan_dp.diagnostics import _mmd2_unbiased


def _brute_mmd2(x, y, h):
    k = lambda u, v: np.exp(-np.sum((u - v) ** 2) / (2 * h * h))  # noqa: E731
    m, n = len(x), len(y)
    sxx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    syy = sum(k(y[i], y[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    sxy = sum(k(x[i], y[j]) for i in range(m) for j in range(n)) / (m * n)
    return sxx + syy - 2 * sxy


def test_unbiased_estimate_matches_a_brute_force_double_loop():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(17, 3)), rng.normal(size=(11, 3)) + 0.4
    assert _mmd2_unbiased(x, y, 1.3) == pytest.approx(_brute_mmd2(x, y, 1.3), rel=1e-10)


@pytest.mark.parametrize("shift", [0.0, 0.5, 1.5])
def test_mmd_matches_the_population_value_for_gaussians(shift):
    """N(0, s²I) vs N(Δ, s²I), RBF bandwidth h (fixed, raw space):
    MMD² = 2 c (1 − exp(−|Δ|² / (2(h² + 2s²)))), c = (h² / (h² + 2s²))^{d/2}.

    With m = n = 2000 the estimate's sd is below 0.01 (U-statistic variance
    O(1/m)); tolerance 0.02 on MMD.
    """
    d, s, h = 2, 1.0, 1.5
    rng = np.random.default_rng(1)
    delta = np.full(d, shift / np.sqrt(d))
    x = rng.normal(size=(2000, d)) * s
    y = rng.normal(size=(2000, d)) * s + delta
    c = (h * h / (h * h + 2 * s * s)) ** (d / 2)
    exact = np.sqrt(2 * c * (1 - np.exp(-shift**2 / (2 * (h * h + 2 * s * s)))))
    assert mmd(x, y, bandwidth=h, standardise=False) == pytest.approx(exact, abs=0.02)


def test_same_distribution_is_near_zero_and_a_shift_is_clearly_positive():
    rng = np.random.default_rng(2)
    a = {"mu": rng.normal(size=(2, 1000)), "beta": rng.normal(size=(2, 1000, 3)) * 5}
    b = {"mu": rng.normal(size=(2, 1000)), "beta": rng.normal(size=(2, 1000, 3)) * 5}
    c = {"mu": rng.normal(size=(2, 1000)) + 0.5, "beta": b["beta"]}
    same, shifted = mmd(a, b), mmd(c, b)
    assert same < 0.04          # null: sqrt of an O(1/m) fluctuation, m = 2000
    assert shifted > 3 * same and shifted > 0.08


def test_standardising_removes_units():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(500, 2)), rng.normal(size=(500, 2)) + 0.3
    scale = np.array([1.0, 1000.0])
    assert mmd(x * scale, y * scale) == pytest.approx(mmd(x, y), rel=1e-9)


def test_median_bandwidth_is_the_median_pairwise_distance():
    x = np.array([[0.0], [1.0], [3.0]])
    rng = np.random.default_rng(0)
    h = median_bandwidth(x, x, rng, subsample=200)
    # pooled draws from {0, 1, 3}: distances 0 (same point), 1, 2 or 3; the median of
    # pairwise distances among 400 draws is 1 or 2.
    assert h in (1.0, 2.0)


def test_draws_matrix_names_and_errors():
    post = {"a": np.zeros((2, 5)), "b": np.zeros((2, 5, 2, 3))}
    mat, names = draws_matrix(post)
    assert mat.shape == (10, 7)
    assert names[:3] == ["a", "b[1,1]", "b[1,2]"]   # Stan's 1-based names
    with pytest.raises(ValueError, match="not in the"):
        draws_matrix(post, ["c"])
    with pytest.raises(ValueError, match="do not line up"):
        mmd({"a": np.zeros((1, 5))}, {"a": np.zeros((1, 5, 2))}, var_names=["a"])
    with pytest.raises(ValueError, match="non-finite"):
        mmd(np.full((5, 1), np.nan), np.zeros((5, 1)))


def test_compare_table_on_known_inputs(tmp_path):
    """Private = reference quantiles shifted by 0.5 sd and scaled by 2: the table says so."""
    grid = stats.norm.ppf((np.arange(4000) + 0.5) / 4000)
    ref = {"mu": grid.reshape(2, 2000)}
    priv = {"mu": (2.0 * grid + 0.5).reshape(2, 2000)}
    cmp = compare(priv, ref)
    row = cmp.table.loc["mu"]
    sd = grid.std(ddof=1)
    assert row["std_mean_error"] == pytest.approx(0.5 / sd, rel=1e-9)
    assert row["sd_ratio"] == pytest.approx(2.0, rel=1e-9)
    # reference mass inside the private 90% interval 0.5 ± 2·1.645:
    expected = stats.norm.cdf(0.5 + 2 * 1.6449) - stats.norm.cdf(0.5 - 2 * 1.6449)
    assert row["coverage"] == pytest.approx(expected, abs=1e-3)
    assert cmp.worst_std_mean_error == pytest.approx(0.5 / sd, rel=1e-9)
    assert cmp.mmd > 0.2
    same = compare(ref, ref)
    assert same.table.loc["mu", "coverage"] == pytest.approx(0.9, abs=1e-3)
    assert "MMD" in str(cmp)


def test_compare_skips_variables_the_private_fit_lacks_and_plots(tmp_path):
    rng = np.random.default_rng(4)
    import arviz as az

    ref = az.from_dict(posterior={"mu": rng.normal(size=(2, 300)), "y_rep": rng.normal(size=(2, 300, 4))})
    priv = az.from_dict(posterior={"mu": rng.normal(size=(2, 300))}, attrs={"epsilon": 1.0})
    cmp = compare(priv, ref)
    assert list(cmp.table.index) == ["mu"]
    out = cmp.plot(tmp_path / "cmp.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="missing from the reference: a; only in the reference: b"):
        compare({"a": np.zeros((1, 5))}, {"b": np.zeros((1, 5))})


# ---------------------------------------------------------------- lining samples up
#
# An earlier compare() matched variables by their names as given: a fit 50 sd
# off against a reference with CmdStan's flat names (beta[1], beta[2]) scored
# MMD 0.0000 and "worst 0.044", because only sigma was compared.  The tests
# below are built to fool that code.

import json  # noqa: E402

import pandas as pd  # noqa: E402

from stan_dp.diagnostics import COLUMNS, MAX_PANELS, RHAT_MAX, stan_name  # noqa: E402


class FakeCmdStanMCMC:
    """The parts of cmdstanpy's ``CmdStanMCMC`` that compare() reads, with its semantics.

    As in cmdstanpy 1.3 (``stanfit/mcmc.py``): ``column_names`` are the Stan
    CSV header (sampler columns ending in ``__``, then every component under
    Stan's 1-based name, matrices in column-major order); ``draws()`` is
    ``(draws, chains, columns)``; ``draws_pd()`` prepends ``chain__``,
    ``iter__``, ``draw__`` (1-based) and flattens the chains in chain order;
    ``stan_variables()`` maps each variable to ``(chains * draws, *shape)``
    (a scalar to ``(chains * draws,)``), filled column-major as stanio does.
    """

    SAMPLER_COLUMNS = ("lp__", "accept_stat__", "stepsize__", "treedepth__", "n_leapfrog__",
                       "divergent__", "energy__")

    def __init__(self, posterior: dict):
        self._post = {k: np.asarray(v, dtype=float) for k, v in posterior.items()}
        first = next(iter(self._post.values()))
        self.chains, self.num_draws_sampling = first.shape[:2]
        names, cols = list(self.SAMPLER_COLUMNS), []
        rng = np.random.default_rng(0)
        cols = [rng.normal(size=(self.chains, self.num_draws_sampling)) for _ in self.SAMPLER_COLUMNS]
        for name, arr in self._post.items():
            shape = arr.shape[2:]
            # column-major: the first index varies fastest
            for rev in np.ndindex(*shape[::-1]):
                idx = rev[::-1]
                names.append(name if not shape else f"{name}[{','.join(str(i + 1) for i in idx)}]")
                cols.append(arr[(slice(None), slice(None)) + idx])
        self.column_names = tuple(names)
        self._draws = np.stack(cols, axis=-1).transpose(1, 0, 2)   # (draws, chains, columns)

    def draws(self, *, inc_warmup=False, concat_chains=False):
        if concat_chains:
            return self._draws.transpose(1, 0, 2).reshape(-1, self._draws.shape[2])
        return self._draws

    def draws_pd(self, vars=None, inc_warmup=False):
        n_draws, n_chains, _ = self._draws.shape
        chain = np.repeat(np.arange(1, n_chains + 1), n_draws)
        it = np.tile(np.arange(1, n_draws + 1), n_chains)
        draw = np.arange(1, n_draws * n_chains + 1)
        body = self.draws(concat_chains=True)
        data = np.column_stack([chain, it, draw, body])
        return pd.DataFrame(data, columns=["chain__", "iter__", "draw__", *self.column_names])

    def stan_variables(self):
        return {k: v.reshape(self.chains * self.num_draws_sampling, *v.shape[2:])
                for k, v in self._post.items()}


def _posterior_draws(seed=0, chains=2, draws=400, shift=0.0):
    """Draws of alpha, beta[3] and a 2x2 Sigma whose every entry has its own location."""
    rng = np.random.default_rng(seed)
    return {
        "alpha": rng.normal(size=(chains, draws)) + shift,
        "beta": rng.normal(size=(chains, draws, 3)) * [1.0, 2.0, 3.0] + [10.0, 20.0, 30.0] + shift,
        "Sigma": rng.normal(size=(chains, draws, 2, 2)) + np.array([[1.0, 2.0], [3.0, 4.0]]) * 100,
    }


def _forms(post):
    """Every accepted form of the same draws (chain, draw, *shape)."""
    import arviz as az

    from stan_dp.output import build_inference_data

    chains, draws = post["alpha"].shape
    fake = FakeCmdStanMCMC(post)
    flat2, flat1, dots = {}, {}, {}
    for name, arr in post.items():
        for idx in np.ndindex(*arr.shape[2:]):
            col = arr[(slice(None), slice(None)) + idx]
            flat2[stan_name(name, idx)] = col
            flat1[stan_name(name, idx)] = col.reshape(-1)
            dots[name + "".join(f".{i + 1}" for i in idx)] = col
    with_coords = az.from_dict(posterior=post, coords={"k": ["a", "b", "c"], "r": ["x", "y"],
                                                       "c": ["u", "v"]},
                               dims={"beta": ["k"], "Sigma": ["r", "c"]})
    return {
        "stan_dp fit": build_inference_data(post, {"accept_stat": np.zeros((chains, draws))},
                                            warmup=0, attrs={"epsilon": 1.0}),
        "InferenceData (from_cmdstanpy style)": az.from_dict(posterior=post),
        "InferenceData with named coords": with_coords,
        "xarray Dataset": az.from_dict(posterior=post).posterior,
        "CmdStanMCMC": fake,
        "draws_pd DataFrame": fake.draws_pd(),
        "flat names (chain, draw)": flat2,
        "flat names (draw,)": flat1,
        "flat names beta.1": dots,
        "nested (chain, draw, D)": dict(post),
        "nested (draw, D)": {k: v.reshape(chains * draws, *v.shape[2:]) for k, v in post.items()},
    }


CHAINLESS = {"flat names (draw,)", "nested (draw, D)"}


def _numbers(cmp, keys):
    return {r["name"]: tuple(round(r[k], 9) for k in keys) for r in cmp.rows}


def test_every_form_lines_up_to_the_canonical_table():
    import arviz as az

    priv, ref = _posterior_draws(seed=1, shift=0.3), _posterior_draws(seed=2)
    canonical = compare(az.from_dict(posterior=priv), az.from_dict(posterior=ref))
    names = ["alpha", "beta[1]", "beta[2]", "beta[3]",
             "Sigma[1,1]", "Sigma[1,2]", "Sigma[2,1]", "Sigma[2,2]"]
    # rows follow the private sample's variable order (ArviZ sorts its variables), and
    # within a variable Stan's indices in row-major order
    assert sorted(canonical.names) == sorted(names)
    assert [n for n in canonical.names if n.startswith("Sigma")] == names[4:]
    # each entry has its own location: a transposed Sigma or a shifted beta index would show
    ref_means = {r["name"]: round(r["ref_mean"], -1) for r in canonical.rows}
    assert [ref_means[n] for n in names[1:]] == [10, 20, 30, 100, 200, 300, 400]
    keys = [k for k in COLUMNS if k not in ("rhat", "ess_bulk")]
    want = _numbers(canonical, keys)
    want_mix = _numbers(canonical, ["rhat", "ess_bulk"])
    for label, form in _forms(priv).items():
        got = compare(form, az.from_dict(posterior=ref))
        assert sorted(got.names) == sorted(names), label
        assert _numbers(got, keys) == want, label
        assert got.mmd == pytest.approx(canonical.mmd, abs=1e-12), label
        if label not in CHAINLESS:   # those carry no chains: R-hat is of one chain
            assert _numbers(got, ["rhat", "ess_bulk"]) == want_mix, label
    for label, form in _forms(ref).items():   # the reference in every form too
        got = compare(az.from_dict(posterior=priv), form)
        assert got.names == canonical.names, label
        assert _numbers(got, keys) == want, label
        assert mmd(az.from_dict(posterior=priv), form) == pytest.approx(canonical.mmd, abs=1e-12)


def test_fake_cmdstanmcmc_matches_cmdstanpy_conventions():
    """The fake is only useful if it is faithful: check it against cmdstanpy's own helper."""
    from cmdstanpy.utils import flatten_chains

    post = _posterior_draws(chains=3, draws=5)
    fake = FakeCmdStanMCMC(post)
    assert fake.column_names[7:11] == ("alpha", "beta[1]", "beta[2]", "beta[3]")
    assert fake.column_names[11:] == ("Sigma[1,1]", "Sigma[2,1]", "Sigma[1,2]", "Sigma[2,2]")
    frame = fake.draws_pd()
    np.testing.assert_array_equal(frame.iloc[:, 3:].to_numpy(), flatten_chains(fake.draws()))
    assert frame["chain__"].tolist() == [1] * 5 + [2] * 5 + [3] * 5
    assert fake.stan_variables()["alpha"].shape == (15,)
    np.testing.assert_array_equal(fake.stan_variables()["Sigma"][6], post["Sigma"][1, 1])


def test_a_fit_50_sd_off_against_cmdstan_names_is_caught():
    """The case that scored MMD 0.0000: lined up, it is reported 50 sd off."""
    import arviz as az

    rng = np.random.default_rng(5)
    ref_beta = rng.normal(size=(4000, 2))
    reference = {"beta[1]": ref_beta[:, 0], "beta[2]": ref_beta[:, 1],
                 "sigma": rng.normal(size=4000) * 0.1 + 1}
    private = az.from_dict(posterior={"beta": rng.normal(size=(2, 1000, 2)) + 50.0,
                                      "sigma": rng.normal(size=(2, 1000)) * 0.1 + 1})
    cmp = compare(private, reference)
    assert cmp.names == ["beta[1]", "beta[2]", "sigma"]
    assert cmp.worst_std_mean_error == pytest.approx(50, rel=0.05)
    assert cmp.worst_w1 == pytest.approx(50, rel=0.05)
    assert cmp.mmd > 0.8
    assert mmd(private, reference) > 0.8
    for ref_form in (FakeCmdStanMCMC({"beta": ref_beta.reshape(2, 2000, 2),
                                      "sigma": reference["sigma"].reshape(2, 2000)}),
                     {"beta.1": ref_beta[:, 0], "beta.2": ref_beta[:, 1],
                      "sigma": reference["sigma"]}):
        assert compare(private, ref_form).worst_std_mean_error == pytest.approx(50, rel=0.05)


@pytest.mark.parametrize("reference, fragments", [
    # a different name: both sides named
    ({"b[1]": np.zeros(50), "b[2]": np.ones(50), "sigma": np.ones(50)},
     ["missing from the reference: beta[1], beta[2]", "only in the reference: b[1], b[2]"]),
    # the same variable with another shape
    ({"beta": np.zeros((1, 50, 3)), "sigma": np.ones((1, 50))},
     ["extra in the reference", "beta[3]"]),
    # a variable the reference lacks
    ({"beta": np.zeros((1, 50, 2))}, ["missing from the reference: sigma"]),
])
def test_mismatched_names_are_refused_naming_missing_and_extra(reference, fragments):
    private = {"beta": np.random.default_rng(0).normal(size=(2, 50, 2)),
               "sigma": np.ones((2, 50))}
    for fn in (compare, mmd):
        with pytest.raises(ValueError) as info:
            fn(private, reference)
        for fragment in fragments:
            assert fragment in str(info.value)


def test_zero_based_flat_names_are_refused():
    """beta[0] is not a Stan name: lining it up would shift every component by one."""
    private = {"beta": np.zeros((1, 20, 2))}
    with pytest.raises(ValueError, match="1-based"):
        compare(private, {"beta[0]": np.zeros(20), "beta[1]": np.zeros(20)})


def test_reference_only_variables_are_named_in_the_notes_not_dropped_silently():
    rng = np.random.default_rng(6)
    ref = {"mu": rng.normal(size=(2, 100)), "y_rep": rng.normal(size=(2, 100, 4)),
           "lp__": rng.normal(size=(2, 100))}
    cmp = compare({"mu": rng.normal(size=(2, 100))}, ref)
    assert cmp.names == ["mu"]
    assert any("only in the reference" in n and "y_rep" in n for n in cmp.notes)
    assert "y_rep" in str(cmp)


def test_var_names_take_variables_or_components():
    post = _posterior_draws(seed=3)
    cmp = compare(post, _posterior_draws(seed=4), var_names=["Sigma[2,1]", "beta"])
    assert cmp.names == ["Sigma[2,1]", "beta[1]", "beta[2]", "beta[3]"]   # in the order asked
    with pytest.raises(ValueError, match=r"\['gamma'\] not in the"):
        compare(post, post, var_names=["gamma"])


# ---------------------------------------------------------------- a headline that grows


SHIFTS = [0.1, 1.0, 5.0, 100.0, 1e6]


def test_w1_is_the_shift_and_grows_with_it_while_mmd_saturates():
    """Private = reference + shift * ref_sd: W1 and the standardised error are |shift|."""
    rng = np.random.default_rng(7)
    ref = rng.normal(size=(2, 1000, 2)) * [1.0, 30.0] + [0.0, 5.0]
    sd = ref.reshape(-1, 2).std(0, ddof=1)
    results = [compare({"theta": ref + s * sd}, {"theta": ref}) for s in SHIFTS]
    for s, cmp in zip(SHIFTS, results):
        assert cmp.column("w1") == pytest.approx([s, s], rel=1e-6)
        assert cmp.column("std_mean_error") == pytest.approx([s, s], rel=1e-6)
        assert cmp.worst_w1 == pytest.approx(s, rel=1e-6)
        assert cmp.column("sd_ratio") == pytest.approx([1, 1], rel=1e-6)
    worst = [c.worst_w1 for c in results]
    assert worst == sorted(worst) and len(set(worst)) == len(worst)
    assert [c.worst_std_mean_error for c in results] == sorted(c.worst_std_mean_error for c in results)
    # why the MMD is not the headline: it stops growing (and here even falls) past a few sd
    mmds = [c.mmd for c in results]
    assert max(mmds) < np.sqrt(2) and mmds[3] < mmds[2]


def test_w1_of_two_samples_of_one_distribution_is_small():
    rng = np.random.default_rng(8)
    cmp = compare({"x": rng.normal(size=(2, 2000))}, {"x": rng.normal(size=(2, 2000))})
    assert cmp.worst_w1 < 0.06


# ---------------------------------------------------------------- diagnostics of the private fit


def _stuck_chains(seed=9):
    rng = np.random.default_rng(seed)
    beta = rng.normal(size=(2, 300, 2))
    beta[1] += 4.0   # the second chain sits elsewhere
    return beta


def test_chains_that_did_not_mix_are_called_so_and_not_credible_intervals():
    import arviz as az

    rng = np.random.default_rng(10)
    ref = {"beta": rng.normal(size=(2, 500, 2))}
    bad = compare(az.from_dict(posterior={"beta": _stuck_chains()}), ref)
    assert bad.max_rhat > RHAT_MAX and not bad.mixed
    assert all("not mixed" in r["flags"] for r in bad.rows)
    text = str(bad)
    assert "NOT MIXED" in text and "not credible intervals" in text
    fig = bad.figure()
    assert "NOT MIXED" in fig._suptitle.get_text()
    import matplotlib.pyplot as plt

    plt.close(fig)
    good = compare({"beta": rng.normal(size=(2, 500, 2))}, ref)
    assert good.mixed and good.max_rhat < RHAT_MAX and good.min_ess_bulk > 100
    assert "credible interval" not in str(good) and "NOT MIXED" not in str(good)
    # R-hat and ESS are ArviZ's, from the private draws
    assert good.column("rhat") == pytest.approx(
        az.rhat(az.convert_to_dataset({"b": np.asarray(good.private["beta"])}))["b"].values)


@pytest.mark.parametrize("warnings", [["clip bound hit in 31% of ratios", "step size tiny"],
                                      "clip bound hit in 31% of ratios\nstep size tiny",
                                      json.dumps(["clip bound hit in 31% of ratios",
                                                  "step size tiny"])])
def test_the_fits_warnings_are_shown(warnings):
    import arviz as az

    rng = np.random.default_rng(11)
    private = az.from_dict(posterior={"mu": rng.normal(size=(2, 200))})
    private.posterior.attrs["warnings"] = warnings
    cmp = compare(private, {"mu": rng.normal(size=(2, 200))})
    assert cmp.warnings == ["clip bound hit in 31% of ratios", "step size tiny"]
    assert "sampler warning: step size tiny" in str(cmp)
    fig = cmp.figure()
    assert "2 sampler warning(s)" in fig._suptitle.get_text()
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_warnings_survive_a_netcdf_round_trip(tmp_path):
    import arviz as az

    from stan_dp.output import build_inference_data

    rng = np.random.default_rng(12)
    fit = build_inference_data({"mu": rng.normal(size=(2, 100))}, {"s": np.zeros((2, 100))},
                               warmup=0, attrs={"warnings": ["one", "two"], "epsilon": 2.0})
    fit.to_netcdf(str(tmp_path / "fit.nc"))
    back = az.from_netcdf(str(tmp_path / "fit.nc"))
    cmp = compare(back, {"mu": rng.normal(size=(2, 100))})
    assert cmp.warnings == ["one", "two"] and cmp.privacy["epsilon"] == 2.0


# ---------------------------------------------------------------- labels, plot, table object


def test_labels_are_one_based_in_table_text_and_plot_titles(tmp_path):
    import matplotlib.pyplot as plt

    post = _posterior_draws(seed=13)
    cmp = compare(post, _posterior_draws(seed=14))
    assert list(cmp.table.index) == cmp.names   # the pandas view keeps working
    text = str(cmp)
    assert "beta[1]" in text and "Sigma[2,2]" in text and "beta[0]" not in text
    fig = cmp.figure()
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == cmp.names                 # one panel per component, no empty panels
    assert all(ax.get_xlabel() == "value" for ax in fig.axes)
    assert fig.axes[0].get_ylabel() == "density"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("private" in t for t in legend) and any("non-private" in t for t in legend)
    assert any("dot = mean" in t for t in legend)
    plt.close(fig)
    out = cmp.plot(tmp_path / "cmp.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_caps_the_panels_at_the_worst_components(tmp_path):
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(15)
    ref = rng.normal(size=(2, 300, 40))
    offsets = np.zeros(40)
    offsets[[3, 17, 29]] = [2.0, -3.0, 1.5]
    cmp = compare({"z": ref + offsets + 0.01 * rng.normal(size=ref.shape)}, {"z": ref})
    fig = cmp.figure()
    titles = [ax.get_title() for ax in fig.axes]
    assert len(titles) == MAX_PANELS
    assert titles[:3] == ["z[18]", "z[4]", "z[30]"]
    assert f"showing the {MAX_PANELS} of 40" in fig._suptitle.get_text()
    plt.close(fig)


def test_the_result_is_extensible_and_pandas_free():
    cmp = compare({"mu": np.random.default_rng(16).normal(size=(2, 100))},
                  {"mu": np.random.default_rng(17).normal(size=(2, 100))})
    assert isinstance(cmp.rows, list) and isinstance(cmp.rows[0], dict)
    assert set(COLUMNS) <= set(cmp.rows[0])
    cmp.notes.append("an engineer's note")
    cmp.rows[0]["extra"] = 1.0
    assert "note: an engineer's note" in str(cmp)
    assert set(cmp.headline()) >= {"worst_std_mean_error", "median_std_mean_error", "worst_w1",
                                   "median_w1", "min_sd_ratio", "max_sd_ratio", "mmd"}


# ---------------------------------------------------------------- printed reports


def test_privacy_report_rounds_to_four_significant_digits(capsys):
    from stan_dp.cli import print_privacy_report
    from stan_dp.report import format_value

    print_privacy_report({"epsilon": 4.0, "delta": 1e-5, "epsilon_spent": 3.999999999999999,
                          "noise_multiplier": 76.44968753559586, "chains": 4, "seeded": 1,
                          "sampler": "penalty", "clip": None})
    out = capsys.readouterr().out.splitlines()
    values = {line.split()[0]: line.split()[1] for line in out[1:]}
    assert out[0] == "privacy report"
    assert values == {"sampler": "penalty", "epsilon": "4", "delta": "1e-05",
                      "epsilon_spent": "4", "noise_multiplier": "76.45", "chains": "4",
                      "seeded": "1"}
    assert format_value([0.123456, 2]) == "[0.1235, 2]"
    assert format_value(True) == "True" and format_value(float("nan")) == "nan"


def test_stan_summary_labels_rows_with_stan_names():
    """A helper for the sample/reference printouts: az.summary's rows in Stan's 1-based names."""
    import arviz as az

    from stan_dp.report import stan_summary

    rng = np.random.default_rng(18)
    idata = az.from_dict(posterior={"alpha": rng.normal(size=(2, 50)),
                                    "Sigma": rng.normal(size=(2, 50, 2, 3)) + np.arange(6).reshape(2, 3),
                                    "b": rng.normal(size=(2, 50, 2))},
                         coords={"school": ["x", "y"]}, dims={"b": ["school"]})
    table = stan_summary(idata, kind="stats")
    assert sorted(table.index) == sorted(["alpha", "b[1]", "b[2]"] + [
        f"Sigma[{i},{j}]" for i in (1, 2) for j in (1, 2, 3)])
    assert table.loc["Sigma[2,1]", "mean"] == pytest.approx(3.0, abs=0.5)


def test_chains_that_never_moved_are_not_mixed_even_when_arviz_cannot_say():
    """Four chains stuck at one point (every draw identical: a sampler that never accepted) give
    ArviZ an R-hat of NaN and an ESS of the draw count; the comparison must call them not mixed,
    not "too few draws"."""
    rng = np.random.default_rng(21)
    ref = {"a": rng.normal(size=(4, 400)), "b": rng.normal(2.0, 1.0, size=(4, 400))}
    same = compare({"a": np.zeros((4, 400)), "b": np.full((4, 400), 2.0)}, ref)
    assert not same.mixed and same.max_rhat == np.inf
    assert all(r["flags"][:2] == ["not moving", "not mixed"] for r in same.rows)
    assert np.isnan(same.column("ess_bulk")).all()
    text = str(same)
    assert "NOT MIXED" in text and "4 of 4 private chain(s) never moved along a, b" in text
    assert "not credible intervals" in text and "too few draws" not in text
    # one stuck chain among three that mix: only that chain is counted, the component is not mixed
    moving = rng.normal(size=(4, 400))
    moving[2] = 0.3
    one = compare({"a": moving, "b": rng.normal(2.0, 1.0, size=(4, 400))}, ref)
    assert one.rows[0]["flags"][:2] == ["not moving", "not mixed"]
    assert "not moving" not in one.rows[1]["flags"] and "1 of 4 private chain(s)" in str(one)
    assert "inf" in str(one).splitlines()[1]   # its R-hat column


def test_components_constant_in_both_fits_are_named_not_scored_and_not_plotted():
    """A Cholesky factor's fixed entries (L[1,1] = 1, the upper triangle 0) are constant in the
    private and the reference draws alike: no error, no mixing verdict, no panel; a value fixed
    differently in the two fits is said so."""
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(22)
    ref_free = rng.normal(0.6, 0.01, size=(2, 300))
    ref = {"L": np.stack([np.ones((2, 300)), ref_free, np.zeros((2, 300))], axis=-1)}
    priv = {"L": np.stack([np.ones((2, 300)), ref_free + 0.005 * rng.normal(size=(2, 300)),
                           np.zeros((2, 300))], axis=-1)}
    cmp = compare(priv, ref)
    assert [r["flags"] for r in cmp.rows] == [["constant"], [], ["constant"]]
    assert cmp.mixed and np.isfinite(cmp.max_rhat) and cmp.max_rhat < RHAT_MAX
    free = cmp.rows[1]["std_mean_error"]
    assert cmp.worst_std_mean_error == pytest.approx(abs(free))   # the constants are not scored
    text = str(cmp)
    assert "L[1], L[3] are constant in both fits" in text and "different values" not in text
    assert text.splitlines()[1].split()[5] == "-"   # std_mean_error of L[1]
    fig = cmp.figure()
    assert [ax.get_title() for ax in fig.axes] == ["L[2]"]
    plt.close(fig)
    priv["L"][..., 0] = 1.0 + 1e-15   # the same fixed value to rounding (a netCDF round trip, a transform)
    assert compare(priv, ref).rows[0]["flags"] == ["constant"]
    priv["L"][..., 2] = 0.5
    moved = compare(priv, ref)
    assert moved.rows[2]["flags"] == ["constant, differs"]
    assert "but L[3] are fixed at different values in the two fits" in str(moved)


def test_compare_refuses_a_reference_given_as_the_private_fit():
    """stan-dp compare REF FIT labelled NUTS's draws "private draws" and printed a privacy report
    with no epsilon; a reference passed twice (a self-check) is still compared."""
    from stan_dp.output import build_inference_data

    rng = np.random.default_rng(3)
    private = build_inference_data({"mu": rng.normal(size=(2, 100))}, {}, warmup=0,
                                   attrs={"sampler": "gaussian", "epsilon": 2.0, "delta": 1e-5})
    reference = build_inference_data({"mu": rng.normal(size=(2, 100))}, {}, warmup=0,
                                     attrs={"sampler": "nuts", "private": False})
    with pytest.raises(ValueError, match="swapped"):
        compare(reference, private)
    assert compare(private, reference).rows[0]["name"] == "mu"
    compare(reference, reference)
