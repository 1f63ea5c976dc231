"""Privacy mechanisms shared by the samplers: clipping, clamping, Gaussian noise, streams.

Everything that turns raw-data quantities into something that may leave a
sampler goes through a function here.  The functions are pure (randomness is
passed in explicitly) so they are easy to test.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from stan_dp.secure_noise import SecureNoise

__all__ = [
    "ChainStreams",
    "clip_log_ratios",
    "clamp_rows_l2",
    "gaussian_release",
    "chain_streams",
    "SecureNoise",
]


def clip_log_ratios(ratios: np.ndarray, bound: float) -> tuple[np.ndarray, int]:
    """Clip per-row log-likelihood ratios to ``[-bound, bound]``.

    Non-finite values are mapped into the interval too, so that the sum of the
    result always has sensitivity ``bound`` per row: ``+inf -> bound``,
    ``-inf -> -bound`` and ``NaN -> -bound`` (a failed evaluation counts
    against the move).  A row that fails to evaluate must not be able to veto
    a move on its own: that would be a data-dependent decision made outside
    the mechanism.

    Parameters
    ----------
    ratios : ndarray
        Per-row log-likelihood ratios ``r_j``.
    bound : float
        Non-negative clip bound (``L * ||theta' - theta||``); may be ``inf``
        (no clipping, non-private use only).

    Returns
    -------
    clipped : ndarray
        The clipped ratios.
    n_clipped : int
        How many rows were changed by clipping (including non-finite ones).
        This count is derived from raw data and is *not* privatised.
    """
    r = np.asarray(ratios, dtype=float)
    nan = np.isnan(r)
    out = np.clip(np.where(nan, -bound, r), -bound, bound)
    n_clipped = int(np.count_nonzero(nan | (np.abs(r) > bound)))
    return out, n_clipped


def clamp_rows_l2(rows: np.ndarray, bound: float) -> tuple[np.ndarray, int]:
    """Project each row vector onto the l2 ball of radius ``bound``.

    The norm is computed without overflow or underflow: each row is first
    divided by its largest absolute entry, so that a row of norm 1e200 (whose
    sum of squares overflows) is clipped to norm ``bound`` in its own
    direction, and a row of norm 1e-300 is left as it is.  No floating-point
    warning is emitted for any input (zero rows included): a warning that
    appears for some rows only would reveal them.

    Parameters
    ----------
    rows : ndarray, shape (n, k)
        Per-row statistics.  Non-finite entries are set to zero first.
    bound : float
        Radius, ``>= 0`` (``inf`` leaves every finite row as it is).

    Returns
    -------
    clamped : ndarray, shape (n, k)
        Rows with norm at most ``bound`` (up to a few units in the last
        place).  A row within the ball is returned unchanged, bit for bit; a
        row outside it is ``bound`` times its unit vector.
    n_clamped : int
        Number of rows changed: clipped or with non-finite entries (not
        privatised).

    Raises
    ------
    ValueError
        If ``rows`` is not two-dimensional or ``bound`` is negative or NaN.
    """
    x = np.asarray(rows, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"row statistics must be a 2-D array (n, stat_dim), got shape {x.shape}")
    bound = float(bound)
    if not bound >= 0.0:
        raise ValueError(f"the clamping bound must be >= 0, got {bound!r}")
    bad = ~np.isfinite(x)
    x = np.where(bad, 0.0, x)
    # Scale-free norm: ||x|| = big * ||x / big|| with big = max |x_j|, where
    # every entry of x / big lies in [-1, 1] and ||x / big|| in [1, sqrt(k)].
    big = np.max(np.abs(x), axis=1, initial=0.0)
    nonzero = big > 0.0
    unit_scale = np.where(nonzero, big, 1.0)  # a zero row stays zero, no 0/0
    with np.errstate(over="ignore", under="ignore"):
        # Entries far below their row's largest may underflow to 0 here and
        # their squares below: harmless, they cannot change the norm.
        u = x / unit_scale[:, None]
        u_norm = np.sqrt(np.einsum("ij,ij->i", u, u))
        # ||x|| > bound  <=>  ||u|| > bound / big; the quotient may overflow
        # to inf (a tiny row: never clipped) or underflow to 0 (a huge row:
        # always clipped), both of which decide correctly.
        clip = nonzero & (u_norm > bound / unit_scale)
        # A clipped row is bound * u / ||u||: u and bound / ||u|| (||u|| >= 1,
        # bound finite since the row is clipped) are finite, so is their
        # product, and it has the row's direction.
        factor = np.where(clip, bound / np.where(clip, u_norm, 1.0), 1.0)
        out = np.where(clip[:, None], u * factor[:, None], x)
    n_clamped = int(np.count_nonzero(clip | bad.any(axis=1)))
    return out, n_clamped


def gaussian_release(
    rng: np.random.Generator | SecureNoise,
    value: np.ndarray | float,
    sd: float,
    *,
    grid_exponent: int | None = None,
) -> np.ndarray | float:
    """Release ``value + N(0, sd^2)`` (elementwise), the Gaussian mechanism.

    With a :class:`~stan_dp.secure_noise.SecureNoise` stream (``seed=None``
    runs) the release is ``γ (round(value/γ) + N_Z(0, (sd/γ)^2))``: exact
    discrete Gaussian noise from OS entropy on the grid ``γ = 2**e <= sd
    2**-52`` (see ``docs/noise.md`` for why and for its accounting).  With a
    numpy ``Generator`` (seeded runs) it is ``value + sd * standard_normal()``,
    bit-for-bit as before.

    Parameters
    ----------
    rng : numpy.random.Generator or SecureNoise
        The *noise* stream (never the proposal stream).
    value : float or ndarray
        Quantity with bounded sensitivity.
    sd : float
        Noise standard deviation (noise multiplier times sensitivity).
    grid_exponent : int, optional
        Secure path only: a *data-independent* grid ``2**grid_exponent`` for a
        release whose ``sd`` depends on the data (DP Barker); by default the
        grid follows ``sd``, which must then be data-independent.

    Returns
    -------
    float or ndarray
        A float for a scalar ``value``, else an array of its shape.
    """
    if isinstance(rng, SecureNoise):
        return rng.gaussian_release(value, sd, grid_exponent)
    if np.ndim(value) == 0:
        return float(value) + sd * float(rng.standard_normal())
    v = np.asarray(value, dtype=float)
    return v + sd * rng.standard_normal(v.shape)


class ChainStreams(NamedTuple):
    """Independent random streams of one chain."""

    proposal: np.random.Generator
    """Proposals, initial points, accept/reject uniforms (no privacy role)."""
    noise: np.random.Generator | SecureNoise
    """Privacy noise only (including minibatch indices): a numpy ``Generator``
    in seeded runs, a :class:`~stan_dp.secure_noise.SecureNoise` when ``seed=None``."""


def chain_streams(seed: int | np.random.SeedSequence | None, chains: int) -> list[ChainStreams]:
    """Spawn separate proposal and noise streams for each chain.

    ``seed=None`` (a publishable run): the proposal streams are seeded from
    fresh OS entropy, and every noise stream is a
    :class:`~stan_dp.secure_noise.SecureNoise` (OS CSPRNG, exact discrete
    samplers); nothing about it can be reproduced or written out.

    A user seed (int or SeedSequence): the root sequence is spawned into one
    child per chain, each child into (proposal, noise), both numpy PCG64
    generators — reproducible bit for bit, and labelled ``attrs["seeded"]``
    by the driver because such a run is not safe to publish.

    Parameters
    ----------
    seed : int, SeedSequence or None
        User seed.
    chains : int
        Number of chains.
    """
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    out = []
    for child in root.spawn(chains):
        prop, noise = child.spawn(2)
        noise_stream: np.random.Generator | SecureNoise = (
            SecureNoise() if seed is None else np.random.Generator(np.random.PCG64(noise)))
        out.append(ChainStreams(np.random.Generator(np.random.PCG64(prop)), noise_stream))
    return out
