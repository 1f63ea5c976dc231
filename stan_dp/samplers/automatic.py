"""The seeds' samplers with their hand-set knobs left out: through :func:`stan_dp.sample`.

``stan_dp.penalty(model, epsilon=..., delta=...)`` (and the subsampled
penalty and DP Barker likewise) without ``clip``/``step_size``/``batch_size``
runs the private adaptation of :func:`stan_dp.sample` first and the seed's
sampler on the adapted density; with all of them given, the seed's algorithm
runs exactly as written.
"""

from __future__ import annotations

from typing import Any

__all__ = ["automatic"]


def _is_default(value: Any, default: Any) -> bool:
    if value is default:
        return True
    if isinstance(value, (bool, int, float, str)) and isinstance(default, (bool, int, float, str)):
        return value == default
    return False


def automatic(method: str, model: Any, *, epsilon: float, delta: float, iterations: int | None,
               chains: int, warmup: int, init: Any, seed: Any, relation: str, progress: bool,
               given: dict, knobs: tuple[str, ...], free: dict) -> Any:
    """Run ``method`` through :func:`stan_dp.sample`'s adaptation when its knobs are left out.

    The seed's algorithm runs exactly as written when every knob in ``knobs``
    is given; when none is, the private adaptation of :func:`stan_dp.sample`
    (half the budget) chooses them in posterior units.  Options that only make
    sense with hand-set knobs (``free``: name -> default) must keep their
    defaults then.
    """
    missing = [k for k in knobs if given.get(k) is None]
    if len(missing) != len(knobs):
        raise ValueError(f"give all of {', '.join(knobs)} (the seed's algorithm as written) or none "
                         f"(stan_dp.sample's private adaptation chooses them); missing: "
                         f"{', '.join(missing)}")
    changed = [k for k, default in free.items() if not _is_default(given.get(k), default)]
    if changed:
        raise ValueError(f"{', '.join(changed)} need(s) hand-set {', '.join(knobs)}; without them "
                         "the automatic path chooses the run")
    from stan_dp.auto import sample

    options: dict[str, Any] = {}
    if iterations is not None:
        options["iterations"] = iterations
    if warmup:
        options["warmup"] = warmup
    return sample(model, epsilon=epsilon, delta=delta, method=method, chains=chains, seed=seed,
                  relation=relation, init=init, progress=progress, **options)
