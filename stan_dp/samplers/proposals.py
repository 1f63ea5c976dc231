"""Data-independent proposals for Metropolis-type samplers.

Three kinds (Räisä, Section 3.1; Yıldırım & Ermis 2019):

``"gaussian"``
    Random walk ``theta' = theta + step * N(0, I)`` (``step`` scalar or per coordinate).
``"component"``
    One coordinate ``k`` chosen uniformly at random moves:
    ``theta'_k = theta_k + step_k * N(0, 1)``.  ``||theta' - theta|| = |dtheta_k|``,
    which keeps the clipping bound and hence the noise small.
``"guided"``
    Guided random walk (Gustafson 1998 style lifting).  The state is extended
    with a direction ``d in {-1, +1}^dim``.  A coordinate ``k`` is chosen
    uniformly at random and moved *in its current direction*:
    ``theta'_k = theta_k + d_k * step_k * |N(0, 1)|``.  After an accept ``d_k``
    is kept, after a reject it is flipped.

Correctness of the guided walk: for fixed ``k`` and step length ``e`` the map
``(theta, d) -> (theta + d_k e e_k, flip_k(d))`` is an involution; a
Metropolis(-penalty) accept/reject of that involution is reversible with
respect to ``pi(theta) x Uniform(d)`` because the penalty acceptance function
satisfies ``a(l) = e^l a(-l)`` for a noise variance symmetric in
``(theta, theta')``.  Composing it with the deterministic flip ``d_k -> -d_k``
(which preserves ``Uniform(d)``) gives exactly "keep on accept, flip on
reject".  The composition is not reversible, but it leaves ``pi x Uniform``
invariant, so the ``theta``-marginal is the target.  The log proposal ratio is
0 for all three kinds.

A proposal never sees the data.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

__all__ = ["PROPOSALS", "Move", "Proposal", "make_proposal", "validate_step_size"]

PROPOSALS = ("gaussian", "component", "guided")


class Move(NamedTuple):
    """A proposed move."""

    position: np.ndarray
    """Proposed unconstrained point."""
    norm: float
    """``||theta' - theta||_2`` (data-independent)."""
    log_q_ratio: float
    """``log q(theta | theta') - log q(theta' | theta)``."""
    coordinate: int
    """Moved coordinate, or -1 if all move."""
    step: float
    """Nominal step size used for this move."""


class Proposal(NamedTuple):
    """A proposal: its auxiliary state, how to propose, how to update after the decision."""

    name: str
    init_aux: Callable[[np.random.Generator], np.ndarray]
    propose: Callable[[np.random.Generator, np.ndarray, np.ndarray], Move]
    update_aux: Callable[[np.ndarray, Move, bool], np.ndarray]


def validate_step_size(step_size: float | np.ndarray, dim: int) -> np.ndarray:
    """Return the step size as a positive finite vector of length ``dim``.

    Raises
    ------
    ValueError
        If the size is wrong or any entry is not positive and finite.
    """
    s = np.asarray(step_size, dtype=float)
    if s.ndim == 0:
        s = np.full(dim, float(s))
    if s.shape != (dim,):
        raise ValueError(f"step_size must be a scalar or have length dim={dim}, got shape {s.shape}")
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"step_size must be positive and finite, got {step_size!r}")
    return s


def _no_aux(rng: np.random.Generator) -> np.ndarray:
    return np.empty(0)


def _keep_aux(aux: np.ndarray, move: Move, accepted: bool) -> np.ndarray:
    return aux


def make_proposal(kind: str, step_size: float | np.ndarray, dim: int) -> Proposal:
    """Build a proposal of the given kind.

    Parameters
    ----------
    kind : {"gaussian", "component", "guided"}
        Proposal kind.
    step_size : float or array of shape (dim,)
        Scale(s) of the moves in unconstrained space.
    dim : int
        Dimension.

    Raises
    ------
    ValueError
        For an unknown kind or an invalid step size.
    """
    if kind not in PROPOSALS:
        raise ValueError(f"unknown proposal {kind!r}; choose one of {', '.join(PROPOSALS)}")
    steps = validate_step_size(step_size, dim)
    scalar_step = float(steps[0]) if np.all(steps == steps[0]) else float(np.sqrt(np.mean(steps**2)))

    if kind == "gaussian":
        def propose(rng: np.random.Generator, theta: np.ndarray, aux: np.ndarray) -> Move:
            delta = steps * rng.standard_normal(dim)
            return Move(theta + delta, float(np.linalg.norm(delta)), 0.0, -1, scalar_step)

        return Proposal(kind, _no_aux, propose, _keep_aux)

    if kind == "component":
        def propose(rng: np.random.Generator, theta: np.ndarray, aux: np.ndarray) -> Move:
            k = int(rng.integers(dim))
            step = steps[k] * float(rng.standard_normal())
            new = theta.copy()
            new[k] += step
            return Move(new, abs(step), 0.0, k, float(steps[k]))

        return Proposal(kind, _no_aux, propose, _keep_aux)

    def init_dirs(rng: np.random.Generator) -> np.ndarray:
        return rng.choice(np.array([-1.0, 1.0]), size=dim)

    def propose(rng: np.random.Generator, theta: np.ndarray, aux: np.ndarray) -> Move:
        k = int(rng.integers(dim))
        length = steps[k] * abs(float(rng.standard_normal()))
        new = theta.copy()
        new[k] += aux[k] * length
        return Move(new, length, 0.0, k, float(steps[k]))

    def update(aux: np.ndarray, move: Move, accepted: bool) -> np.ndarray:
        if accepted:
            return aux
        flipped = aux.copy()
        flipped[move.coordinate] = -flipped[move.coordinate]
        return flipped

    return Proposal(kind, init_dirs, propose, update)
