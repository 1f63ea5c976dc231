"""Inference from privatised statistics by data augmentation (Ju, Awan, Gong, Rao 2022).

- :mod:`~stan_dp.augmentation.noise`: mechanisms with known densities;
- :mod:`~stan_dp.augmentation.clamp`: clamping as part of a mechanism;
- :mod:`~stan_dp.augmentation.privacy`: :func:`new_privacy`, the record-additive release;
- :mod:`~stan_dp.augmentation.records`: :class:`StanRecordModel`, the model side;
- :func:`stan_dp.samplers.augmentation.augmented_sample`: the sampler.
"""

from stan_dp.augmentation.clamp import Clamp
from stan_dp.augmentation.noise import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace, NoiseMechanism
from stan_dp.augmentation.privacy import RecordPrivacy, new_privacy
from stan_dp.augmentation.records import StanRecordModel

__all__ = [
    "Clamp",
    "NoiseMechanism",
    "Laplace",
    "Gaussian",
    "DiscreteLaplace",
    "DiscreteGaussian",
    "RecordPrivacy",
    "new_privacy",
    "StanRecordModel",
]
