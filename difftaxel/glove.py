"""A skinned glove as a sensor: taxel readings from joint poses, and bind-pose calibration.

The rig itself (:class:`GloveScene`, :func:`glove_forces`: forces in **taxel axes** from
skinned probes) lives with the other rigs in :mod:`difftaxel.skin.hand` and is re-exported
here; :func:`calibrate_bind_poses` fits the bind poses (and optionally per-taxel gains) to a
recording by gradient descent through it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import pose as _pose
from .sensors import KinematicTaxel
from .skin import LinkLayout, SkinnedScene, calibrate_layout
from .skin.hand import GloveScene, glove_forces
from .skinning import LBS

Array = jax.Array

__all__ = ["GloveScene", "glove_forces", "calibrate_bind_poses", "pose_errors"]


def pose_errors(T_est: Array, T_true: Array):
    """Position error (m) and rotation angle error (deg) per pose ``[N]``."""
    d = np.linalg.norm(np.asarray(T_est)[:, :3] - np.asarray(T_true)[:, :3], axis=-1)
    rel = _pose.quat_mul(
        _pose.quat_conjugate(jnp.asarray(T_true)[:, 3:]), jnp.asarray(T_est)[:, 3:]
    )
    ang = np.degrees(2 * np.arccos(np.clip(np.abs(np.asarray(rel)[:, 3]), 0, 1)))
    return d, ang


def calibrate_bind_poses(
    sensor: KinematicTaxel,
    lbs: LBS,
    scene: GloveScene,
    measured: Array,
    *,
    channels="xyz",
    smoothing_schedule=(5e-4, 1e-4, 0.0),
    steps_per_stage: int = 200,
    learning_rate: float = 5e-3,
    length_scale: float = 0.01,
    fit_gains: bool = False,
    holdout: float = 0.0,
    progress: bool = False,
):
    """Fit each taxel's bind pose (position and orientation) to measured forces.

    The skinned hand is one rig of :func:`difftaxel.skin.calibrate_layout` (a
    :class:`~difftaxel.skin.SkinnedScene`); this returns its poses. Use ``calibrate_layout``
    directly for the per-taxel report (never excited, not identifiable, standard deviations,
    held-out check). ``measured`` is ``[T, N, 3]`` (N, taxel axes) or ``[T, N]`` normal
    readings with ``channels="normal"``; ``channels`` is any mask of
    :func:`~difftaxel.skin.channel_mask`.

    Contact onset: a taxel whose initial guess is out of contact has no gradient with the exact
    model, so the fit runs in stages with decreasing ``sensor.smoothing`` (softplus onset, smooth
    shear gates; ``smoothing_schedule`` in m), then polishes each taxel by Levenberg-Marquardt
    at the exact model. Each stage compiles once.

    Returns ``(taxel_bind_poses [N, 7], gains [N] or None, list of FitResult per stage)``;
    taxels that cannot be identified keep their initial bind poses.
    """
    f = calibrate_layout(
        sensor,
        LinkLayout.from_poses(lbs.taxel_bind_poses),
        SkinnedScene(lbs, scene),
        measured,
        channels=channels,
        fit_gains=fit_gains,
        holdout=holdout,
        smoothing_schedule=smoothing_schedule,
        steps_per_stage=steps_per_stage,
        learning_rate=learning_rate,
        length_scale=length_scale,
        progress=progress,
    )
    dtype = lbs.taxel_bind_poses.dtype
    return jnp.asarray(f.layout.frames(), dtype), f.gains, f.results
