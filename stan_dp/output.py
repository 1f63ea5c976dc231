"""Building ArviZ ``InferenceData`` from private runs.

Only released quantities reach this module: draws (post-processing of the
noisy releases), sample statistics the sampler declared releasable, and
privacy facts.  There is no ``observed_data`` group and no un-noised log
density or gradient anywhere.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["constrain_draws", "build_inference_data", "netcdf_safe_attrs", "quantity_attrs", "quantity_seed",
           "with_transformed"]


def _import_arviz():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return az


def constrain_draws(
    constrain: Callable[[np.ndarray], Mapping[str, np.ndarray]], positions: np.ndarray
) -> dict[str, np.ndarray]:
    """Map unconstrained draws to constrained variables.

    Parameters
    ----------
    constrain : callable
        ``theta -> {name: array}`` (the density's ``constrain``).
    positions : ndarray, shape (chains, draws, dim)
        Unconstrained draws.

    Returns
    -------
    dict
        ``name -> array of shape (chains, draws, *var_shape)``.
    """
    chains, draws, _ = positions.shape
    out: dict[str, np.ndarray] = {}
    for c in range(chains):
        for d in range(draws):
            values = constrain(positions[c, d])
            for name, value in values.items():
                v = np.asarray(value, dtype=float)
                if name not in out:
                    out[name] = np.empty((chains, draws) + v.shape)
                out[name][c, d] = v
    return out


def netcdf_safe_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Convert attribute values to types netCDF accepts (bool -> int, None -> "none")."""
    safe: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(value, (bool, np.bool_)):
            safe[key] = int(value)
        elif value is None:
            safe[key] = "none"
        elif isinstance(value, np.generic):
            safe[key] = value.item()
        elif isinstance(value, (list, tuple, np.ndarray)):
            arr = np.asarray(value)
            if arr.dtype.kind in "biuf":
                safe[key] = arr.astype(float if arr.dtype.kind == "f" else int).tolist()
            else:
                safe[key] = [str(v) for v in arr.ravel()]
        else:
            safe[key] = value
    return safe


def with_transformed(draws: dict[str, np.ndarray], model: Any, positions: np.ndarray,
                     seed: int | None = None) -> dict[str, np.ndarray]:
    """``draws`` with the model's transformed parameters and generated quantities that it computes
    from the parameters, shared data and (for the latter) its random number generator alone
    (``model.transformed_values``; :attr:`stan_dp.model.ZeroRowPart.output_transformed`,
    :attr:`~stan_dp.model.ZeroRowPart.output_generated`) at the same unconstrained ``positions``
    (``(chains, draws, dim)``), the generator seeded by ``seed`` (from the OS's entropy where
    None): post-processing of the draws.  ``draws`` itself where the model returns none."""
    if not getattr(model, "output_transformed", ()) and not getattr(model, "output_generated", ()):
        return draws
    rng = model.quantity_rng(seed) if getattr(model, "output_generated", ()) else None
    return {**draws, **constrain_draws(lambda theta: model.transformed_values(theta, rng), positions)}


def quantity_seed(seed: int | np.random.SeedSequence) -> int:
    """A seed for the generated quantities' generator (:func:`with_transformed`) from a sampler's
    user seed, apart from every chain's streams: the seed's sequence under a spawn key of its own
    (:func:`stan_dp.mechanisms.chain_streams` spawns chains at keys 0, 1, ...; this is 2**31)."""
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return int(np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, 2**31)).generate_state(1)[0])


def quantity_attrs(model: Any) -> dict[str, str]:
    """A fit's ``attrs`` on the program's other quantities: ``"not_in_output"``
    (:func:`omitted_note`) and ``"transformed_in_output"``, the transformed parameters and
    generated quantities the draws carry (:func:`with_transformed`), comma-separated
    (``stan_dp.compare`` reads it)."""
    returned = (*getattr(model, "output_transformed", ()), *getattr(model, "output_generated", ()))
    return {"not_in_output": omitted_note(model), "transformed_in_output": ", ".join(returned)}


def omitted_note(model: Any) -> str:
    """``attrs["not_in_output"]``: the program's transformed parameters and generated quantities,
    which the output leaves out, with why and what to do; ``""`` where it declares none (or the
    model does not say: a NumPy density)."""
    omitted = getattr(model, "omitted_quantities", None) or {}
    parts = [f"{block}: {', '.join(names)}" for block, names in omitted.items() if names]
    if not parts:
        return ""
    blocked = ("; the generated quantities block cannot run without the rows (e.g. a mean over "
               "them), so none of its quantities is returned" if getattr(model, "generated_blocked", False)
               else "")
    return ("; ".join(parts) + " (not in the output: they may be computed from the data, which "
            "only a privacy mechanism may touch; compute those that depend on the parameters "
            f"alone from the posterior draws{blocked})")


def build_inference_data(
    draws: Mapping[str, np.ndarray],
    stats: Mapping[str, np.ndarray],
    *,
    warmup: int,
    attrs: Mapping[str, Any],
):
    """Assemble ``InferenceData`` with ``posterior``, ``sample_stats`` and warm-up groups.

    Parameters
    ----------
    draws : mapping
        Constrained variables, ``(chains, warmup + iterations, ...)``.
    stats : mapping
        Released per-iteration statistics, ``(chains, warmup + iterations)``.
    warmup : int
        Number of leading warm-up iterations per chain.
    attrs : mapping
        Privacy facts; stored on the root and on ``posterior`` and ``sample_stats``.

    Returns
    -------
    arviz.InferenceData
    """
    az = _import_arviz()
    safe = netcdf_safe_attrs(attrs)

    def split(d: Mapping[str, np.ndarray]) -> tuple[dict, dict]:
        return ({k: v[:, warmup:] for k, v in d.items()}, {k: v[:, :warmup] for k, v in d.items()})

    post, post_w = split(draws)
    st, st_w = split(stats)
    groups = {
        "posterior": az.dict_to_dataset(post, attrs=safe, library=None),
        "sample_stats": az.dict_to_dataset(st, attrs=safe, library=None),
    }
    if warmup > 0:
        groups["warmup_posterior"] = az.dict_to_dataset(post_w, attrs=safe, library=None)
        groups["warmup_sample_stats"] = az.dict_to_dataset(st_w, attrs=safe, library=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        idata = az.InferenceData(attrs=safe, **groups)
    return idata
