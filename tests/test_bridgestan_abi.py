"""The library's BridgeStan C ABI, exercised through the `bridgestan` package.

Oracles: closed-form densities, central finite differences, and the model's
own constrain/unconstrain round trip.
"""

from __future__ import annotations

import warnings

import bridgestan
import numpy as np
import pytest
from scipy import stats

from conftest import banana_data, bundled, mixed_data, stan_test_model


@pytest.fixture(scope="module")
def banana(compiled):
    data = banana_data(n=15, d=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a version mismatch would warn
        model = bridgestan.StanModel(str(compiled(bundled("banana"))), data=_json(data), warn=False)
    return model, data


@pytest.fixture(scope="module")
def mixed(compiled):
    return bridgestan.StanModel(str(compiled(stan_test_model("rows_mixed"))), data=_json(mixed_data()), warn=False)


def _json(data):
    import json

    return json.dumps({k: np.asarray(v).tolist() for k, v in data.items()})


def test_versions_and_info(banana):
    model, _ = banana
    from bridgestan.__version import __version_info__

    assert model.model_version() == __version_info__
    assert model.name() == "banana_model"
    info = model.model_info()
    assert "BridgeStan version: 2.6.2" in info and "STAN_THREADS=true" in info


def test_names_and_sizes(banana, mixed):
    model, _ = banana
    assert model.param_names() == ["theta.1", "theta.2", "theta.3"]
    assert model.param_names(include_tp=True) == ["theta.1", "theta.2", "theta.3", "z.1", "z.2", "z.3"]
    assert model.param_unc_names() == ["theta.1", "theta.2", "theta.3"]
    assert model.param_num() == 3 and model.param_num(include_tp=True) == 6
    assert model.param_unc_num() == 3
    # simplex[3] (2 free) + s + c[3] + cholesky_factor_corr[2] (1 free) = 7
    assert mixed.param_unc_num() == 7
    assert mixed.param_num() == 3 + 1 + 3 + 4
    assert mixed.param_names(include_tp=True, include_gq=True)[-2:] == ["c_sum", "draw"]
    assert mixed.param_num(include_tp=True, include_gq=True) == 13


def test_log_density_matches_closed_form(banana):
    model, data = banana
    theta = np.array([0.2, -0.4, 1.1])
    a, m, b, s = data["a"], data["m"], data["b"], data["sigma"]
    z = np.array([theta[0], theta[1] + a * (theta[0] - m) ** 2 + b, theta[2]])
    expected = stats.norm.logpdf(z, 0, data["sigma0"]).sum() + stats.norm.logpdf(data["x"], z, s).sum()
    assert model.log_density(theta, propto=False) == pytest.approx(expected, rel=1e-12)
    # propto drops constants only: the difference does not depend on theta.
    other = theta + 0.3
    d1 = model.log_density(theta, propto=False) - model.log_density(theta, propto=True)
    d2 = model.log_density(other, propto=False) - model.log_density(other, propto=True)
    assert d1 == pytest.approx(d2, rel=1e-9)
    assert d1 != 0.0


def test_gradient_hessian_and_hvp_match_finite_differences(mixed):
    rng = np.random.default_rng(3)
    theta = rng.uniform(-1, 1, size=mixed.param_unc_num())
    h = 1e-6
    eye = np.eye(theta.size)
    val, grad = mixed.log_density_gradient(theta, propto=False)
    assert val == pytest.approx(mixed.log_density(theta, propto=False), rel=1e-12)
    fd = np.array([(mixed.log_density(theta + h * e, propto=False) - mixed.log_density(theta - h * e, propto=False)) / (2 * h) for e in eye])
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)
    val_h, grad_h, hess = mixed.log_density_hessian(theta, propto=False)
    np.testing.assert_allclose(grad_h, grad, rtol=1e-12)
    hh = 1e-5
    fd_hess = np.array([
        (mixed.log_density_gradient(theta + hh * e, propto=False)[1]
         - mixed.log_density_gradient(theta - hh * e, propto=False)[1]) / (2 * hh)
        for e in eye
    ])
    np.testing.assert_allclose(hess, fd_hess, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(hess, hess.T, rtol=1e-12)
    v = rng.normal(size=theta.size)
    val_v, hvp = mixed.log_density_hessian_vector_product(theta, v, propto=False)
    np.testing.assert_allclose(hvp, hess @ v, rtol=1e-4, atol=1e-4)


def test_constrain_unconstrain_round_trip(mixed):
    rng = np.random.default_rng(4)
    theta = rng.uniform(-1, 1, size=mixed.param_unc_num())
    constrained = mixed.param_constrain(theta)
    np.testing.assert_allclose(mixed.param_unconstrain(constrained), theta, rtol=1e-9, atol=1e-12)
    # JSON route (transform_inits) agrees.
    names = mixed.param_names()
    p = constrained[:3]
    s = constrained[3]
    c = constrained[4:7]
    L = constrained[7:11].reshape(2, 2, order="F")
    assert names[:3] == ["p.1", "p.2", "p.3"] and names[7:] == ["L.1.1", "L.2.1", "L.1.2", "L.2.2"]
    import json
    init = json.dumps({"p": p.tolist(), "s": float(s), "c": c.tolist(), "L": L.tolist()})
    np.testing.assert_allclose(mixed.param_unconstrain_json(init), theta, rtol=1e-9, atol=1e-12)
    # Transformed parameters come after parameters.
    with_tp = mixed.param_constrain(theta, include_tp=True)
    assert with_tp[-1] == pytest.approx(c.sum())


def test_generated_quantities_need_and_use_an_rng(mixed):
    theta = np.zeros(mixed.param_unc_num())
    with pytest.raises(ValueError, match="rng"):
        mixed.param_constrain(theta, include_gq=True)
    draws_a = [mixed.param_constrain(theta, include_gq=True, rng=mixed.new_rng(7))[-1] for _ in range(2)]
    assert draws_a[0] == draws_a[1]  # same seed, same draw
    rng = mixed.new_rng(8)
    draws = np.array([mixed.param_constrain(theta, include_gq=True, rng=rng)[-1] for _ in range(2000)])
    # draw ~ normal(c[1] = 0, s = exp(0) = 1): mean within 4 standard errors, sd within 10%.
    assert abs(draws.mean()) < 4 / np.sqrt(2000)
    assert draws.std() == pytest.approx(1.0, rel=0.1)


def test_errors_come_back_as_exceptions(mixed, compiled):
    with pytest.raises(RuntimeError, match="variable does not exist"):
        bridgestan.StanModel(str(compiled(stan_test_model("rows_mixed"))), data='{"N": 1}', warn=False)
    with pytest.raises(RuntimeError):
        mixed.param_unconstrain_json('{"p": [0.5, 0.6, 0.7]}')  # incomplete and not a simplex
    with pytest.raises(RuntimeError):
        mixed.log_density(np.full(mixed.param_unc_num(), np.nan))


def test_print_callback_captures_model_prints(compiled, capsys):
    bridgestan.StanModel(str(compiled(stan_test_model("rows_mixed"))), data=_json(mixed_data()), warn=False)
    assert "rows_mixed transformed data" in capsys.readouterr().out
