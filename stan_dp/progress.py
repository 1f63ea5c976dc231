"""A progress bar that can never crash a run.

A thin wrapper around ``tqdm`` used by every sampler and by the reference
fit.  Any failure of the display (``tqdm`` missing, a closed terminal, a
notebook widget that cannot be drawn) switches the bar off; the run goes on.
"""

from __future__ import annotations

__all__ = ["Progress"]


class Progress:
    """A tqdm bar that can never crash a run.

    Parameters
    ----------
    total : int
        Number of steps of the whole run.
    enabled : bool
        ``False`` gives a bar that does nothing.
    desc : str
        Label shown before the bar.
    """

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self._bar = None
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, leave=False)
        except Exception:  # noqa: BLE001 - progress display must never fail a run
            self._bar = None

    def update(self, n: int = 1) -> None:
        """Advance the bar by ``n`` steps (a no-op once the display failed)."""
        if self._bar is None:
            return
        try:
            self._bar.update(n)
        except Exception:  # noqa: BLE001
            self._bar = None

    def close(self) -> None:
        """Close the bar; safe to call more than once."""
        if self._bar is None:
            return
        try:
            self._bar.close()
        except Exception:  # noqa: BLE001
            pass
        self._bar = None
