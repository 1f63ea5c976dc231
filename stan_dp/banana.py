"""The banana model of Räisä (2021, seed 003, Section 2.3): data and exact posterior.

The bundled ``stan_models/banana.stan`` is the model of Theorem 5:

* prior ``θ ~ Ban(0, σ0² I, a, b, m)``, i.e. ``z = g⁻¹(θ) ~ N(0, σ0² I)`` with
  ``g⁻¹(θ) = (θ1, θ2 + a (θ1 − m)² + b, θ3, …, θd)`` (Jacobian 1);
* every row ``x_j ~ N(z, diag(σ1², …, σd²))``.

In terms of ``z`` the model is conjugate normal, so the posterior tempered by
``T`` (likelihood raised to ``T``) has independent components

    z_k | x ~ N( T n τ_k x̄_k / (T n τ_k + τ0),  1 / (T n τ_k + τ0) ),   τ = 1/σ²,

and ``θ = g(z) = (z1, z2 − a (z1 − m)² − b, z3, …)``: Theorem 5's
``Ban(μ, Σ, a, b, m)``.  (The thesis states ``x̄_i`` for ``i ∈ {1, 2}`` only;
the derivation holds for every component.)  :func:`banana_posterior` draws
from it exactly, giving experiments a ground truth.

This module only computes from data the user passes in; it is a
*non-private* oracle for experiments, not a private mechanism.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import numpy as np

__all__ = [
    "BananaPosterior",
    "banana_data",
    "banana_posterior_params",
    "banana_posterior",
    "banana_log_density",
]


def banana_data(
    n: int, d: int = 2, *, a: float = 20.0, b: float = 0.0, m: float = 0.0,
    sigma0: float = float(np.sqrt(1000.0)), sigma: np.ndarray | None = None,
    theta: np.ndarray | None = None, seed: int | None = None,
) -> dict[str, Any]:
    """Simulate data for ``stan_models/banana.stan`` with the thesis's settings.

    Parameters
    ----------
    n, d : int
        Rows and dimension (``d >= 2``).
    a, b, m, sigma0 : float
        Banana curvature, shift, centre and prior sd (Section 7.2: a = 20,
        b = m = 0, σ0² = 1000).
    sigma : array of shape (d,), optional
        Observation sds; default ``(√20, √2.5, 1, …, 1)`` (Section 7.2).
    theta : array of shape (d,), optional
        True parameter; default ``(0, 0, …)`` mapped through the model, i.e.
        rows are drawn around ``z = g⁻¹(theta)``.
    seed : int, optional
        Seed of the simulation.

    Returns
    -------
    dict
        Stan data (``N, d, x, a, b, m, sigma0, sigma``).
    """
    if int(d) < 2:
        raise ValueError(f"d must be at least 2, got {d!r}")
    if int(n) < 0:
        raise ValueError(f"n must be non-negative, got {n!r}")
    d = int(d)
    if sigma is None:
        sigma = np.ones(d)
        sigma[0], sigma[1] = np.sqrt(20.0), np.sqrt(2.5)
    sigma = np.asarray(sigma, dtype=float)
    if sigma.shape != (d,) or np.any(sigma <= 0):
        raise ValueError(f"sigma must be {d} positive sds")
    th = np.zeros(d) if theta is None else np.asarray(theta, dtype=float)
    z = _g_inverse(th[None, :], a, b, m)[0]
    rng = np.random.default_rng(seed)
    x = z + rng.normal(size=(int(n), d)) * sigma
    return {"N": int(n), "d": d, "x": x, "a": float(a), "b": float(b), "m": float(m),
            "sigma0": float(sigma0), "sigma": sigma}


def _g_inverse(theta: np.ndarray, a: float, b: float, m: float) -> np.ndarray:
    z = np.array(theta, dtype=float, copy=True)
    z[:, 1] = theta[:, 1] + a * (theta[:, 0] - m) ** 2 + b
    return z


def _g(z: np.ndarray, a: float, b: float, m: float) -> np.ndarray:
    theta = np.array(z, dtype=float, copy=True)
    theta[:, 1] = z[:, 1] - a * (z[:, 0] - m) ** 2 - b
    return theta


class BananaPosterior(NamedTuple):
    """``Ban(mu, diag(var), a, b, m)``: Theorem 5's tempered posterior."""

    mu: np.ndarray
    var: np.ndarray
    a: float
    b: float
    m: float


def _field(data: Mapping[str, Any], name: str) -> Any:
    if name not in data:
        raise ValueError(f"banana data lack {name!r}")
    return data[name]


def banana_posterior_params(data: Mapping[str, Any], temperature: float = 1.0) -> BananaPosterior:
    """Parameters of the tempered banana posterior (seed 003, Theorem 5).

    Parameters
    ----------
    data : mapping
        Stan data of ``stan_models/banana.stan``.
    temperature : float
        ``T`` in ``p(x | θ)^T p(θ)``, ``0 < T``.

    Returns
    -------
    BananaPosterior
    """
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be positive and finite, got {temperature!r}")
    x = np.asarray(_field(data, "x"), dtype=float)
    n = int(_field(data, "N"))
    d = int(_field(data, "d"))
    x = x.reshape(n, d)
    tau = 1.0 / np.asarray(_field(data, "sigma"), dtype=float) ** 2
    tau0 = 1.0 / float(_field(data, "sigma0")) ** 2
    xbar = x.mean(0) if n > 0 else np.zeros(d)
    prec = temperature * n * tau + tau0
    mu = temperature * n * tau * xbar / prec
    return BananaPosterior(mu, 1.0 / prec, float(data["a"]), float(data["b"]), float(data["m"]))


def banana_log_density(theta: np.ndarray, post: BananaPosterior) -> np.ndarray:
    """Log density of ``Ban(mu, diag(var), a, b, m)`` at ``theta`` (rows), normalised."""
    th = np.atleast_2d(np.asarray(theta, dtype=float))
    z = _g_inverse(th, post.a, post.b, post.m)
    return -0.5 * (((z - post.mu) ** 2 / post.var).sum(1) + np.log(2 * np.pi * post.var).sum())


def banana_posterior(
    data: Mapping[str, Any], *, draws: int = 2000, chains: int = 1, temperature: float = 1.0,
    seed: int | None = None,
):
    """Exact independent draws of the (tempered) banana posterior as ``InferenceData``.

    Parameters
    ----------
    data : mapping
        Stan data of ``stan_models/banana.stan``.
    draws, chains : int
        Shape of the sample (``posterior.theta`` has shape ``(chains, draws, d)``,
        like a fit of the Stan model).
    temperature : float
        Tempering ``T`` (the private samplers' ``temperature``).
    seed : int, optional
        Seed.

    Returns
    -------
    arviz.InferenceData
        ``posterior.theta`` with ``attrs["sampler"] = "exact-banana"``.
    """
    from stan_dp.output import build_inference_data

    for name, value in (("draws", draws), ("chains", chains)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    post = banana_posterior_params(data, temperature)
    rng = np.random.default_rng(seed)
    d = post.mu.size
    z = post.mu + np.sqrt(post.var) * rng.normal(size=(chains * draws, d))
    theta = _g(z, post.a, post.b, post.m).reshape(chains, draws, d)
    attrs = {"sampler": "exact-banana", "temperature": float(temperature), "n_rows": int(data["N"])}
    return build_inference_data({"theta": theta}, {}, warmup=0, attrs=attrs)
