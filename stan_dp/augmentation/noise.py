"""Noise mechanisms with known densities, for inference from a released statistic.

A released statistic is ``s_dp = s + noise`` with ``s = Σ_i t(x_i)`` the sum of
a record statistic over the confidential records (Ju, Awan, Gong, Rao 2022,
record-additive mechanisms, Assumption 2).  Data-augmentation MCMC needs the
density ``η(s_dp | s)`` of the noise only through ratios
``η(s_dp | s') / η(s_dp | s)``, and every mechanism here has a separable log
density of one of two forms:

- ``"l1"``: ``log η(s_dp | s) = -Σ_j w_j |s_dp_j - s_j| + const``
  (continuous Laplace; discrete Laplace, i.e. two-sided geometric);
- ``"l2"``: ``log η(s_dp | s) = -Σ_j w_j (s_dp_j - s_j)² + const``
  (continuous Gaussian; discrete Gaussian, Canonne, Kamath, Steinke 2020).

The discrete mechanisms live on the integers: ``s`` and ``s_dp`` must be
integer vectors (counts), and their normalising constants do not depend on
``s``.  Sensitivities are those of ``Σ_i t(x_i)`` when one record is
replaced by another (the neighbouring relation of the seed's S-4 example,
whose Laplace scale is 2K/ε for K one-hot tables).

These classes describe an existing release; they spend no privacy budget.
:meth:`release` draws one (the curator's side): by default from the OS CSPRNG
with exact integer samplers on a fine grid (safe against floating-point
attacks, ``docs/noise.md``), or from a numpy generator for reproducible
simulations.
The samplers' own Gaussian releases are in :mod:`stan_dp.mechanisms`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from stan_dp.secure_noise import SecureNoise

__all__ = ["NoiseMechanism", "Laplace", "Gaussian", "DiscreteLaplace", "DiscreteGaussian"]


def _positive(name: str, value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return x


@dataclass(frozen=True)
class NoiseMechanism:
    """Additive noise with independent components and a separable log density.

    Subclasses fix ``name``, ``kind`` (``"l1"`` or ``"l2"``), ``integer`` and
    the per-component ``scale`` (Laplace scale ``b`` or Gaussian sd ``σ``).
    """

    scale: float
    name: str = field(init=False, default="")
    kind: str = field(init=False, default="")
    integer: bool = field(init=False, default=False)

    @property
    def epsilon(self) -> float | None:
        """Pure ε of the mechanism, or ``None`` when it is not pure ε-DP."""
        return None

    @property
    def weight(self) -> float:
        """``w`` in ``log η = -Σ w |r_j|`` (l1) or ``-Σ w r_j²`` (l2)."""
        return 1.0 / self.scale if self.kind == "l1" else 1.0 / (2.0 * self.scale ** 2)

    def log_density(self, s_dp: Any, s: Any) -> np.ndarray:
        """``log η(s_dp | s)`` up to a constant free of ``s``; sums the last axis."""
        r = np.asarray(s_dp, dtype=float) - np.asarray(s, dtype=float)
        terms = np.abs(r) if self.kind == "l1" else r * r
        return -self.weight * np.sum(terms, axis=-1)

    def release(self, s: Any, rng: np.random.Generator | SecureNoise | None = None) -> np.ndarray:
        """Draw ``s_dp = s + noise`` (the curator's step).

        Parameters
        ----------
        s : array-like
            The confidential statistic.
        rng : numpy.random.Generator, SecureNoise or None
            ``None`` (default) or a :class:`~stan_dp.secure_noise.SecureNoise`:
            a publishable release, with noise from the OS CSPRNG drawn by exact
            integer samplers (see ``docs/noise.md``).  A numpy generator:
            reproducible simulations only (floating-point noise, not safe to
            publish).

        Returns
        -------
        ndarray
            ``s_dp``, the shape of ``s``.
        """
        if rng is None:
            rng = SecureNoise()
        s = np.asarray(s, dtype=float)
        if isinstance(rng, SecureNoise):
            return self._secure_release(s, rng)
        return s + self._noise(s.shape, rng)

    def _noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def _secure_release(self, s: np.ndarray, rng: SecureNoise) -> np.ndarray:
        raise NotImplementedError

    def _integer_statistic(self, s: np.ndarray) -> list[int]:
        if not (np.all(np.isfinite(s)) and np.all(s == np.round(s))):
            raise ValueError(f"{self.name} releases integer statistics; s must be integer-valued")
        return [int(x) for x in s.reshape(-1).tolist()]

    def attrs(self) -> dict[str, Any]:
        """Facts for ``InferenceData.attrs``."""
        out: dict[str, Any] = {"mechanism": self.name, "noise_scale": self.scale}
        eps = self.epsilon
        out["epsilon"] = eps if eps is not None else "none"
        sens = getattr(self, "sensitivity", None)
        if sens is not None:
            out["sensitivity"] = sens
        return out


@dataclass(frozen=True, init=False)
class Laplace(NoiseMechanism):
    """Continuous Laplace noise of scale ``sensitivity / epsilon`` on every component.

    Pure ε-DP when ``sensitivity`` bounds the l1 change of ``Σ t(x_i)`` when one
    record is replaced (e.g. after clamping).

    Parameters
    ----------
    epsilon : float
        Privacy parameter, > 0.
    sensitivity : float
        l1 sensitivity of the summed statistic, > 0.
    """

    sensitivity: float = 1.0

    def __init__(self, epsilon: float, sensitivity: float) -> None:
        eps = _positive("epsilon", epsilon)
        sens = _positive("sensitivity", sensitivity)
        object.__setattr__(self, "sensitivity", sens)
        object.__setattr__(self, "scale", sens / eps)
        object.__setattr__(self, "name", "laplace")
        object.__setattr__(self, "kind", "l1")
        object.__setattr__(self, "integer", False)

    @property
    def epsilon(self) -> float:
        return self.sensitivity / self.scale

    def _noise(self, shape, rng):
        return rng.laplace(0.0, self.scale, size=shape)

    def _secure_release(self, s, rng):
        # round to the grid 2**e <= b 2**-52 and add discrete Laplace noise whose
        # scale covers the rounding exactly: still exactly epsilon-DP
        return rng.laplace_release(s, self.epsilon, self.sensitivity)


@dataclass(frozen=True, init=False)
class DiscreteLaplace(NoiseMechanism):
    """Two-sided geometric noise, ``P(z) ∝ exp(-ε |z| / Δ)`` on the integers.

    Pure ε-DP for integer statistics with l1 sensitivity ``Δ`` (Ghosh,
    Roughgarden, Sundararajan 2012).

    Parameters
    ----------
    epsilon : float
        Privacy parameter, > 0.
    sensitivity : int
        l1 sensitivity of the summed (integer) statistic, a positive integer.
    """

    sensitivity: float = 1.0

    def __init__(self, epsilon: float, sensitivity: int) -> None:
        eps = _positive("epsilon", epsilon)
        sens = _positive("sensitivity", sensitivity)
        if sens != int(sens):
            raise ValueError(f"sensitivity of a discrete mechanism must be an integer, got {sensitivity!r}")
        object.__setattr__(self, "sensitivity", sens)
        object.__setattr__(self, "scale", sens / eps)
        object.__setattr__(self, "name", "discrete_laplace")
        object.__setattr__(self, "kind", "l1")
        object.__setattr__(self, "integer", True)

    @property
    def epsilon(self) -> float:
        return self.sensitivity / self.scale

    def _noise(self, shape, rng):
        # Difference of two geometric counts with success 1 - exp(-1/b) is
        # two-sided geometric with P(z) ∝ exp(-|z| / b).
        p = -math.expm1(-1.0 / self.scale)
        return (rng.geometric(p, size=shape) - rng.geometric(p, size=shape)).astype(float)

    def _secure_release(self, s, rng):
        scale = Fraction(self.sensitivity) / Fraction(self.epsilon)   # exactly Δ/ε, no rounding
        ints = self._integer_statistic(s)
        return np.array([x + rng.discrete_laplace(scale) for x in ints], dtype=float).reshape(s.shape)


@dataclass(frozen=True, init=False)
class Gaussian(NoiseMechanism):
    """Continuous Gaussian noise of sd ``sd`` on every component (not pure ε-DP).

    Parameters
    ----------
    sd : float
        Noise standard deviation, > 0.
    sensitivity : float, optional
        l2 sensitivity, recorded to report ``rho = sensitivity² / (2 sd²)`` (zCDP).
    """

    sensitivity: float | None = None

    def __init__(self, sd: float, sensitivity: float | None = None) -> None:
        object.__setattr__(self, "scale", _positive("sd", sd))
        object.__setattr__(
            self, "sensitivity", None if sensitivity is None else _positive("sensitivity", sensitivity)
        )
        object.__setattr__(self, "name", "gaussian")
        object.__setattr__(self, "kind", "l2")
        object.__setattr__(self, "integer", False)

    @property
    def rho(self) -> float | None:
        """zCDP parameter ``Δ₂² / (2σ²)``, when the sensitivity is known."""
        return None if self.sensitivity is None else self.sensitivity ** 2 / (2 * self.scale ** 2)

    def attrs(self) -> dict[str, Any]:
        out = super().attrs()
        if self.rho is not None:
            out["rho"] = self.rho
        return out

    def _noise(self, shape, rng):
        return rng.normal(0.0, self.scale, size=shape)

    def _secure_release(self, s, rng):
        # discrete Gaussian on the grid 2**e <= sd 2**-52 (accounting: docs/noise.md)
        return np.asarray(rng.gaussian_release(s, self.scale), dtype=float).reshape(s.shape)


@dataclass(frozen=True, init=False)
class DiscreteGaussian(Gaussian):
    """Discrete Gaussian noise, ``P(z) ∝ exp(-z² / (2 sd²))`` on the integers.

    ``rho``-zCDP with ``rho = Δ₂² / (2 sd²)`` for integer statistics (Canonne,
    Kamath, Steinke 2020, Thm 4); releases use their exact sampler (Alg. 3:
    rejection from a discrete Laplace).
    """

    def __init__(self, sd: float, sensitivity: float | None = None) -> None:
        super().__init__(sd, sensitivity)
        object.__setattr__(self, "name", "discrete_gaussian")
        object.__setattr__(self, "integer", True)

    def _secure_release(self, s, rng):
        sigma2 = Fraction(self.scale) ** 2   # exact: the float sd squared as a rational
        ints = self._integer_statistic(s)
        return np.array([x + rng.discrete_gaussian(sigma2) for x in ints], dtype=float).reshape(s.shape)

    def _noise(self, shape, rng):
        sigma2 = self.scale ** 2
        t = math.floor(self.scale) + 1
        p = -math.expm1(-1.0 / t)
        size = int(np.prod(shape)) if shape else 1
        out = np.empty(size)
        filled = 0
        while filled < size:
            m = 2 * (size - filled) + 8
            y = (rng.geometric(p, size=m) - rng.geometric(p, size=m)).astype(float)
            keep = rng.random(m) < np.exp(-((np.abs(y) - sigma2 / t) ** 2) / (2 * sigma2))
            y = y[keep][: size - filled]
            out[filled:filled + y.size] = y
            filled += y.size
        return out.reshape(shape)
