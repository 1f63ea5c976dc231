"""Exceptions raised by :mod:`stan_dp.accounting`."""

from __future__ import annotations

__all__ = ["PrivacyBudgetError"]


class PrivacyBudgetError(ValueError):
    """A requested run does not fit the privacy budget.

    Raised by :class:`~stan_dp.accounting.Budget` *before* any data is touched,
    e.g. when not even one iteration of a release plan fits ``(epsilon, delta)``.
    It is a :class:`ValueError`, so callers that validate arguments generically
    catch it too.
    """
