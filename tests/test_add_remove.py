"""Under ``relation="add_remove"`` the row count n is private (issue 14, item 2).

DESIGN.md, "Privacy invariants": under add/remove nothing derived from n is
published or used as a default unless the user declares a public value.  For
every sampler these tests run neighbouring data sets of 200 and 201 rows with
the same seed and compare everything but the draws (and what is computed
from the draws); a run that would need an n-dependent default without
``public_n=`` (DP HMC), or the owner labels present in the rows without
``public_owners=`` (multi-owner penalty), is refused before any data is
touched; the samplers proven for replace-one only refuse add/remove before
any data is touched; replace-one runs are unchanged (n is public there:
``n_rows`` stays).
"""

from __future__ import annotations

import types
import warnings
from typing import Any, Callable

import densities
import numpy as np
import pytest

from stan_dp.honesty import UtilityWarning
from stan_dp.model import RowModel
from stan_dp.samplers.barker import barker
from stan_dp.samplers.expfamily import penalty_expfamily
from stan_dp.samplers.hmc import default_grad_clip, hmc
from stan_dp.samplers.penalty import penalty
from stan_dp.samplers.subsampled import subsampled_penalty

N = 200
"""Rows of the smaller neighbour; the larger one has one row more."""

FROM_DRAWS = {"max_rhat", "min_ess_bulk", "acceptance_per_chain", "mixed", "warnings"}
"""``attrs`` computed from the released draws (post-processing; they may differ)."""
NOT_FROM_THE_RUN = {"created_at", "arviz_version"}
"""``attrs`` ArviZ adds (a timestamp)."""

BUDGET = dict(epsilon=2.0, delta=1e-5, chains=1, seed=11, progress=False)


def _neighbours() -> tuple[np.ndarray, np.ndarray]:
    """Data sets of ``N`` and ``N + 1`` rows: the second is the first plus one row."""
    y = np.random.default_rng(5).normal(1.0, 1.0, size=N + 1)
    return y[:N], y


def _quiet(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a sampler with every warning an error except the mixing verdict (post-processing)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=UtilityWarning)
        return fn(*args, **kwargs)


def _published(fit: Any) -> dict[str, Any]:
    """``posterior.attrs`` without what is computed from the draws."""
    attrs = dict(fit.posterior.attrs)
    return {k: v for k, v in attrs.items() if k not in FROM_DRAWS | NOT_FROM_THE_RUN}


def _same(a: Any, b: Any) -> bool:
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def _assert_nothing_from_n(fits: list[Any], fixed_stats: tuple[str, ...]) -> None:
    """The two neighbours' outputs agree on everything not drawn from the data."""
    small, large = (_published(f) for f in fits)
    assert "n_rows" not in small and "n_rows" not in large
    assert small.keys() == large.keys()
    differ = sorted(k for k in small if not _same(small[k], large[k]))
    assert differ == [], f"attrs that follow n: {differ}"
    for group in ("sample_stats", "warmup_sample_stats"):
        if group not in fits[0].groups():
            continue
        for name in fixed_stats:
            a, b = (np.asarray(getattr(f, group)[name]) for f in fits)
            assert _same(a, b), f"{group}.{name} follows n"


# --------------------------------------------------------------------- HMC --
def test_hmc_with_public_n_publishes_nothing_derived_from_n() -> None:
    fits = [_quiet(hmc, densities.NormalMean(y), iterations=20, warmup=10, relation="add_remove",
                   public_n=500, **BUDGET) for y in _neighbours()]
    _assert_nothing_from_n(fits, ("grad_noise_sd",))
    attrs = fits[0].posterior.attrs
    assert attrs["public_n"] == 500
    # the defaults follow the declared count, not the private one
    assert attrs["grad_clip"] == pytest.approx(default_grad_clip(500, 1))
    assert attrs["step_size_initial"] == pytest.approx(500 ** -0.5)


def test_hmc_with_every_setting_given_needs_no_public_n() -> None:
    fits = [_quiet(hmc, densities.NormalMean(y), iterations=20, warmup=10, clip=2.0, grad_clip=2.0,
                   step_size=0.05, relation="add_remove", **BUDGET) for y in _neighbours()]
    _assert_nothing_from_n(fits, ("grad_noise_sd", "step_size"))


@pytest.mark.parametrize("given", [
    {},
    {"clip": 2.0, "grad_clip": 2.0},  # step size 1/sqrt(n) and the search step 1/(n T)
    {"clip": 2.0, "step_size": 0.05},  # grad_clip sqrt(dim + ln n - 5)
    {"grad_clip": 2.0, "step_size": 0.05},  # clip defaults to the same bound
])
def test_hmc_refuses_an_n_dependent_default_without_public_n(given: dict) -> None:
    model = densities.Untouchable(densities.NormalMean(_neighbours()[0]))
    with pytest.raises(ValueError, match=r"(?s)row count n is private.*public_n="):
        hmc(model, iterations=20, warmup=10, relation="add_remove", **given, **BUDGET)


def test_hmc_replace_one_is_unchanged() -> None:
    fit = _quiet(hmc, densities.NormalMean(_neighbours()[0]), iterations=20, warmup=10, **BUDGET)
    attrs = fit.posterior.attrs
    assert attrs["n_rows"] == N
    assert attrs["grad_clip"] == pytest.approx(default_grad_clip(N, 1))
    assert attrs["step_size_initial"] == pytest.approx(N ** -0.5)
    assert attrs["public_n"] == ""


# ----------------------------------------------------------------- penalty --
PENALTY = dict(iterations=40, clip=2.0, step_size=0.1, **BUDGET)


def test_penalty_publishes_nothing_derived_from_n() -> None:
    fits = [_quiet(penalty, densities.NormalMean(y), relation="add_remove", **PENALTY)
            for y in _neighbours()]
    _assert_nothing_from_n(fits, ("noise_sd", "step_size"))


def _owners(n: int) -> np.ndarray:
    """Owners "a" and "b" share the first N rows; the extra row is owner "c"'s only row."""
    labels = np.where(np.arange(n) % 2 == 0, "a", "b")
    labels[N:] = "c"
    return labels


def test_multi_owner_penalty_with_public_owners_publishes_nothing_derived_from_the_rows() -> None:
    # Without a declared owner list, the owners present in the rows set the number of
    # noise terms: removing "c"'s only row changed noise_sd and attrs["owners"].
    fits = [_quiet(penalty, densities.NormalMean(y), relation="add_remove", owners=_owners(y.size),
                   public_owners=["a", "b", "c"], **PENALTY) for y in _neighbours()]
    _assert_nothing_from_n(fits, ("noise_sd", "step_size"))
    assert list(fits[0].posterior.attrs["owners"]) == ["a", "b", "c"]


def test_multi_owner_penalty_refuses_owners_without_public_owners_under_add_remove() -> None:
    model = densities.Untouchable(densities.NormalMean(_neighbours()[0]))
    with pytest.raises(ValueError, match=r"(?s)owners present in the rows are private.*public_owners="):
        penalty(model, relation="add_remove", owners=_owners(N), **PENALTY)


def test_public_owners_must_cover_every_row_and_the_message_names_no_label() -> None:
    model = densities.Untouchable(densities.NormalMean(_neighbours()[0]))
    labels = _owners(N)
    labels[7] = "secret_clinic"
    with pytest.raises(ValueError, match="not in public_owners") as excinfo:
        penalty(model, relation="add_remove", owners=labels, public_owners=["a", "b"], **PENALTY)
    assert "secret_clinic" not in str(excinfo.value) and "7" not in str(excinfo.value)


def test_penalty_replace_one_is_unchanged() -> None:
    y = _neighbours()[0]
    fit = _quiet(penalty, densities.NormalMean(y), owners=_owners(N), **PENALTY)
    attrs = fit.posterior.attrs
    assert attrs["n_rows"] == N
    assert list(attrs["owners"]) == ["a", "b"]


# ------------------------------------------- replace-one-only samplers --
@pytest.mark.parametrize("sampler, extra", [
    (subsampled_penalty, dict(batch_size=20, clip=2.0)),
    (barker, dict(batch_size=50)),
])
def test_replace_one_only_samplers_refuse_add_remove_before_touching_data(sampler, extra) -> None:
    # The batch fraction b/n, the tempering n0/n, Barker's clip sqrt(b)/n and the
    # accounting all use n; the theorems are proven for replace-one neighbours.
    model = densities.Untouchable(densities.NormalMean(_neighbours()[0]))
    with pytest.raises(ValueError, match=r"(?s)relation='replace_one' only.*private under add/remove"):
        sampler(model, relation="add_remove", step_size=0.1, iterations=20, **extra, **BUDGET)


def test_penalty_expfamily_refuses_add_remove_before_touching_data() -> None:
    model = densities.Untouchable(densities.NormalMeanExpFamily(_neighbours()[0]))
    with pytest.raises(ValueError, match="add_remove"):
        penalty_expfamily(model, relation="add_remove", clip=3.0, step_size=0.1, iterations=20,
                          **BUDGET)


@pytest.mark.parametrize("sampler, extra", [
    (subsampled_penalty, dict(batch_size=20, clip=2.0, n0=50.0)),
    (barker, dict(batch_size=N, n0=50.0, epsilon=10.0)),  # Barker: few steps fit at n = 200
])
def test_replace_one_only_samplers_still_run_and_report_n(sampler, extra) -> None:
    fit = _quiet(sampler, densities.NormalMean(_neighbours()[0]), relation="replace_one",
                 step_size=0.1, iterations=10, **{**BUDGET, **extra})
    attrs = fit.posterior.attrs
    assert attrs["n_rows"] == N
    assert attrs["temperature"] == pytest.approx(50.0 / N)


# --------------------------------------------------------- messages, CLI --
def test_row_index_error_does_not_quote_the_row_count() -> None:
    # The row count is private under add/remove; an index error must not carry it.
    fake = types.SimpleNamespace(n_rows=200)
    with pytest.raises(IndexError) as excinfo:
        RowModel._rows(fake, [0, 200])
    message = str(excinfo.value)
    assert "200" not in message
    assert message == "row indices must lie in [0, n_rows)"


def test_cli_privacy_report_shows_the_declared_public_n(capsys) -> None:
    from stan_dp.cli import print_privacy_report

    print_privacy_report({"sampler": "hmc", "relation": "add_remove", "public_n": 500})
    out = capsys.readouterr().out
    assert "public_n" in out and "500" in out and "n_rows" not in out
