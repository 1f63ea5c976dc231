"""Release plans and the privacy budget shared by all samplers.

A sampler describes what it releases per iteration as a list of
:class:`Release` lines (and, separately, what it releases once per chain), and
asks a :class:`Budget` how many iterations fit, how much noise a requested
number of iterations needs, or how much privacy a finished run spent.

Accounting method
-----------------
* Only plain Gaussian releases: exact privacy-loss-distribution accounting
  (:mod:`stan_dp.accounting.gaussian`), accountant name ``"gaussian-pld-exact"``.
* Any subsampled line (in the plan or among the one-off releases): everything
  is composed in Rényi DP with the WBK amplification for the subsampled lines
  (:mod:`stan_dp.accounting.rdp`), name ``"rdp-sampled-without-replacement"``.
  RDP is an upper bound for the plain lines too, so a mixed plan is never
  under-counted.

Identical lines are grouped and composed once with their total count, so the
cost does not grow with the number of iterations.

Every decision (:meth:`Budget.max_iterations`, :meth:`Budget.calibrate`,
:meth:`Budget.fits`) is made by the very computation :meth:`Budget.check`
performs on the run it describes, so a result of one can never be refused by
the other because of rounding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from . import gaussian, rdp
from .errors import PrivacyBudgetError
from .subsampled import check_batch
from .validation import (
    check_int,
    check_real,
    check_relation,
    largest_fitting,
    smallest_fitting_scale,
    validate_privacy_params,
)

__all__ = ["Release", "Budget", "ACCOUNTANT_PLD", "ACCOUNTANT_RDP"]

#: Accountant name for plans of plain Gaussian releases (exact).
ACCOUNTANT_PLD = "gaussian-pld-exact"
#: Accountant name for plans with at least one subsampled release.
ACCOUNTANT_RDP = "rdp-sampled-without-replacement"


@dataclass(frozen=True)
class Release:
    """One line of a release plan.

    Parameters
    ----------
    noise_multiplier : float
        ``z = noise sd / sensitivity`` (> 0, finite), where the sensitivity is
        the L2 sensitivity of the released quantity under the budget's
        neighbouring relation (see :func:`~stan_dp.accounting.sensitivity_factor`).
    count : int
        Number of such releases per iteration (or per chain, for one-off
        releases); >= 0.  A vector-valued release with one noise draw per
        coordinate and an L2 sensitivity counts once.
    batch_size, n : int or None
        If given (both or neither), each release is computed on a fresh batch
        of ``batch_size`` rows drawn without replacement from ``n`` rows
        (replace-one neighbours only).

    Raises
    ------
    ValueError
        On invalid values; the message names the field.
    """

    noise_multiplier: float
    count: int = 1
    batch_size: int | None = None
    n: int | None = None

    def __post_init__(self) -> None:
        z = check_real(self.noise_multiplier, "noise_multiplier", positive=True)
        c = check_int(self.count, "count")
        object.__setattr__(self, "noise_multiplier", z)
        object.__setattr__(self, "count", c)
        if (self.batch_size is None) != (self.n is None):
            raise ValueError("batch_size and n must be given together (or neither)")
        if self.batch_size is not None:
            b = check_int(self.batch_size, "batch_size", minimum=1)
            n = check_int(self.n, "n", minimum=1)
            if b > n:
                raise ValueError(f"batch_size must be <= n, got batch_size={b}, n={n}")
            object.__setattr__(self, "batch_size", b)
            object.__setattr__(self, "n", n)

    @property
    def subsampled(self) -> bool:
        """Whether the release is computed on a subsampled batch."""
        return self.batch_size is not None

    def scaled(self, factor: float) -> Release:
        """The same release with the noise multiplier multiplied by ``factor``."""
        return Release(self.noise_multiplier * factor, self.count, self.batch_size, self.n)


def _as_plan(plan: Release | Iterable[Release], name: str) -> list[Release]:
    if isinstance(plan, Release):
        return [plan]
    if isinstance(plan, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of Release, got {plan!r}")
    try:
        items = list(plan)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of Release, got {plan!r}") from None
    for item in items:
        if not isinstance(item, Release):
            raise ValueError(f"{name} must contain only Release objects, got {item!r}")
    return items


def _group(lines: Iterable[tuple[Release, int]]) -> list[rdp.RdpLine]:
    """Group identical releases; each input is (release, multiplicity)."""
    totals: dict[tuple[float, int | None, int | None], int] = {}
    for rel, mult in lines:
        total = rel.count * mult
        if total:
            key = (rel.noise_multiplier, rel.batch_size, rel.n)
            totals[key] = totals.get(key, 0) + total
    return [rdp.RdpLine(z, c, b, n) for (z, b, n), c in totals.items()]


def _mu(lines: Iterable[rdp.RdpLine], scale: float = 1.0) -> float:
    return math.fsum(ln.count / (2.0 * (ln.z * scale) ** 2) for ln in lines)


@dataclass(frozen=True)
class Budget:
    """An ``(epsilon, delta)`` budget under a neighbouring relation.

    Parameters
    ----------
    epsilon : float
        Total epsilon (> 0) for the whole run: all chains, warm-up, tuning.
    delta : float
        Total delta in (0, 1).
    relation : str
        ``"replace_one"`` (default) or ``"add_remove"``.  It does not change the
        accounting of plain Gaussian releases (multipliers are already relative
        to the relation's sensitivity) but subsampled releases require
        ``"replace_one"``.
    preceding : sequence of Release
        Releases already made on the same data before this run (each counted
        once, not per chain), e.g. the private adaptation of
        :func:`stan_dp.sample`.  Every method composes them with the run, so
        a run's iterations or noise are what is left of the budget after them.

    Examples
    --------
    >>> b = Budget(1.0, 1e-5)
    >>> b.max_iterations([Release(30.0)])
    64
    """

    epsilon: float
    delta: float
    relation: str = "replace_one"
    preceding: tuple[Release, ...] = ()

    def __post_init__(self) -> None:
        eps, dlt = validate_privacy_params(self.epsilon, self.delta)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", dlt)
        object.__setattr__(self, "relation", check_relation(self.relation))
        pre = tuple(_as_plan(self.preceding, "preceding"))
        for rel in pre:
            if rel.subsampled:
                check_batch(rel.batch_size, rel.n, self.relation)
        object.__setattr__(self, "preceding", pre)

    # ------------------------------------------------------------------ helpers
    def _prepare(
        self, plan: Any, once: Any, chains: Any
    ) -> tuple[list[Release], list[Release], int]:
        p = _as_plan(plan, "plan")
        o = _as_plan(once, "once")
        c = check_int(chains, "chains", minimum=1)
        for rel in p + o:
            if rel.subsampled:
                check_batch(rel.batch_size, rel.n, self.relation)
        return p, o, c

    def _method(self, p: Sequence[Release], o: Sequence[Release]) -> str:
        if any(r.subsampled and r.count for r in list(p) + list(o) + list(self.preceding)):
            return ACCOUNTANT_RDP
        return ACCOUNTANT_PLD

    def _spent(self, lines: list[rdp.RdpLine], method: str) -> float:
        if method == ACCOUNTANT_PLD:
            return gaussian._epsilon_for_mu(_mu(lines), self.delta)
        return rdp.epsilon(lines, self.delta)

    def _spent_run(self, p: Sequence[Release], o: Sequence[Release], c: int, it: int) -> float:
        """The single code path for the epsilon of ``c * (it * p + o)``.

        :meth:`epsilon_spent`, :meth:`check`, :meth:`fits`,
        :meth:`max_iterations` and :meth:`calibrate` all decide through it, so
        a value they accept is exactly a value ``check`` accepts.
        """
        lines = _group([(r, it * c) for r in p] + [(r, c) for r in o]
                       + [(r, 1) for r in self.preceding])
        return self._spent(lines, self._method(p, o))

    # ------------------------------------------------------------------ public
    def accountant(self, plan: Release | Sequence[Release], once: Sequence[Release] = ()) -> str:
        """Short name of the accounting method used for ``plan`` (and ``once``).

        Returns
        -------
        str
            ``"gaussian-pld-exact"`` or ``"rdp-sampled-without-replacement"``.
        """
        p, o, _ = self._prepare(plan, once, 1)
        return self._method(p, o)

    def epsilon_spent(
        self,
        plan: Release | Sequence[Release],
        iterations: int,
        chains: int = 1,
        once: Sequence[Release] = (),
    ) -> float:
        """Epsilon (at this budget's delta) of ``chains * (iterations * plan + once)``.

        Parameters
        ----------
        plan : sequence of Release
            Releases per iteration.
        iterations : int
            Iterations per chain that actually ran (>= 0), warm-up included.
        chains : int
            Number of chains (>= 1); every chain uses the same data.
        once : sequence of Release
            Releases made once per chain.

        Returns
        -------
        float
            Epsilon spent; may exceed the budget's epsilon (nothing is raised).
        """
        p, o, c = self._prepare(plan, once, chains)
        it = check_int(iterations, "iterations")
        return self._spent_run(p, o, c, it)

    def fits(
        self,
        plan: Release | Sequence[Release],
        iterations: int,
        chains: int = 1,
        once: Sequence[Release] = (),
    ) -> bool:
        """Whether ``chains * (iterations * plan + once)`` fits the budget."""
        return self.epsilon_spent(plan, iterations, chains, once) <= self.epsilon

    def check(
        self,
        plan: Release | Sequence[Release],
        iterations: int,
        chains: int = 1,
        once: Sequence[Release] = (),
    ) -> float:
        """Refuse a run that does not fit; return the epsilon it will spend.

        Raises
        ------
        PrivacyBudgetError
            If ``chains * (iterations * plan + once)`` exceeds the budget.
        """
        spent = self.epsilon_spent(plan, iterations, chains, once)
        if spent > self.epsilon:
            raise PrivacyBudgetError(
                f"{chains} chain(s) x {iterations} iteration(s) of this release plan "
                f"need epsilon={spent:.6g} at delta={self.delta:g}, more than the "
                f"budget epsilon={self.epsilon:g}; use fewer iterations or chains, "
                "more noise, or a larger budget"
            )
        return spent

    def max_iterations(
        self,
        plan: Release | Sequence[Release],
        chains: int = 1,
        once: Sequence[Release] = (),
    ) -> int:
        """Largest number of iterations per chain that fits the budget.

        Parameters
        ----------
        plan : sequence of Release
            Releases made in every iteration.
        chains : int
            Number of chains (>= 1).
        once : sequence of Release
            Releases made once per chain (e.g. DP HMC's initial gradient).

        Returns
        -------
        int
            The largest ``k`` such that ``chains * (k * plan + once)`` fits.

        Raises
        ------
        PrivacyBudgetError
            If not even one iteration fits.
        ValueError
            If the plan releases nothing (iterations would be unlimited).
        """
        p, o, c = self._prepare(plan, once, chains)
        unit = _group([(r, c) for r in p])
        fixed = _group([(r, c) for r in o] + [(r, 1) for r in self.preceding])
        if not unit:
            raise ValueError("plan releases nothing; iterations are not limited by privacy")
        method = self._method(p, o)

        def fits(k: int) -> bool:
            # exactly what epsilon_spent / check compute for k iterations
            return self._spent_run(p, o, c, k) <= self.epsilon

        if method == ACCOUNTANT_PLD:
            mu_u, mu_f = _mu(unit), _mu(fixed)
            mu_star = gaussian._max_mu(self.epsilon, self.delta)
            guess = (mu_star - mu_f) / mu_u
            k0 = int(min(max(guess, 0.0), 2.0**62)) if math.isfinite(guess) else 2**62
            k = largest_fitting(fits, k0)
        else:
            k = rdp.max_multiplier(unit, fixed, self.epsilon, self.delta, fits=fits)
        if k < 1:
            need = self._spent_run(p, o, c, 1)
            raise PrivacyBudgetError(
                f"not even one iteration fits: {c} chain(s) x 1 iteration of this "
                f"release plan need epsilon={need:.6g} at delta={self.delta:g}, more "
                f"than the budget epsilon={self.epsilon:g}; add noise or raise the budget"
            )
        return k

    def calibrate(
        self,
        plan: Release | Sequence[Release],
        iterations: int,
        chains: int = 1,
        once: Sequence[Release] = (),
    ) -> float:
        """Noise scale that makes ``iterations`` iterations fit exactly.

        Parameters
        ----------
        plan : sequence of Release
            Releases per iteration, with their *relative* noise multipliers.
        iterations : int
            Requested iterations per chain (>= 1).
        chains : int
            Number of chains (>= 1).
        once : sequence of Release
            Releases made once per chain.

        Returns
        -------
        float
            The smallest ``s`` such that multiplying every noise multiplier in
            ``plan`` and ``once`` by ``s`` makes the run fit (exact for plain
            Gaussian plans up to rounding, which is always upward; relative
            precision 1e-6 for subsampled plans).  For ``plan=[Release(1.0)]``
            this is the needed noise multiplier itself.
        """
        p, o, c = self._prepare(plan, once, chains)
        it = check_int(iterations, "iterations", minimum=1)
        lines = _group([(r, it * c) for r in p] + [(r, c) for r in o])
        if not lines:
            raise ValueError("plan releases nothing; there is no noise to calibrate")
        def fits(s: float) -> bool:
            # exactly what check() computes for the scaled run
            sp = [r.scaled(s) for r in p]
            so = [r.scaled(s) for r in o]
            return self._spent_run(sp, so, c, it) <= self.epsilon

        if self._method(p, o) == ACCOUNTANT_PLD:
            room = gaussian._max_mu(self.epsilon, self.delta) - _mu(_group([(r, 1) for r in self.preceding]))
            if not room > 0:
                raise PrivacyBudgetError(
                    "the releases already made (preceding) use the whole budget; nothing is left "
                    "to calibrate")
            s0 = math.sqrt(_mu(lines) / room)
        else:
            s0 = rdp.calibrate_scale(lines, self.epsilon, self.delta)
        return smallest_fitting_scale(fits, s0)

    def as_dict(self) -> dict[str, Any]:
        """Plain-data description for output ``attrs``."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "neighbouring_relation": self.relation,
        }
