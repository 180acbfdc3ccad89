"""A skinned glove as a sensor: taxel readings from joint poses, and bind-pose calibration.

The glove's taxels are KinematicTaxel probes whose positions are skinned every frame
(:mod:`difftaxel.skinning`); forces are reported in **taxel axes** (+z the outward normal), as
the tactile data contract streams them: ``F_taxel = R_root_taxel^T F_root``.

:func:`glove_forces` is pure and differentiable in the taxel bind poses, the joint poses and
the sensor parameters; :func:`calibrate_bind_poses` fits the bind poses (and optionally per-taxel
gains) to a recording by gradient descent through it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import pose as _pose
from .geometry import Bodies
from .sensors import KinematicTaxel, SensorInputs
from .skinning import LBS, skin_frames

Array = jax.Array

__all__ = ["GloveScene", "glove_forces", "calibrate_bind_poses", "pose_errors"]


class GloveScene(NamedTuple):
    """What a glove recording holds besides the taxel readings (T frames, one environment).

    Attributes:
      T_world_root: ``[T, 7]`` wrist root pose in the world.
      T_root_joints: ``[T, J, 7]`` joint poses in the wrist root frame (segment order).
      bodies: :class:`~difftaxel.geometry.Bodies` whose ``poses`` / ``twists`` have a leading
        ``[T]`` axis (objects touched).
      dt: frame period (s).
    """

    T_world_root: Array
    T_root_joints: Array
    bodies: Bodies
    dt: float


def glove_forces(
    sensor: KinematicTaxel,
    lbs: LBS,
    scene: GloveScene,
    taxel_bind_poses: Array | None = None,
    gains: Array | None = None,
) -> Array:
    """Ground-truth taxel forces ``[T, N, 3]`` (N, taxel axes) over a recording.

    ``sensor`` supplies the force model (its ``probe_local_pos`` is replaced by the skinned
    positions each frame; use ``smoothing > 0`` to get gradients before contact). ``gains``
    ``[N]`` scale the penetration (probe gain) if given.
    """

    def frame(T_wr, T_rj, poses, twists):
        fr = skin_frames(lbs, T_rj, taxel_bind_poses)
        s = sensor.replace(probe_local_pos=fr[:, :3])
        inp = SensorInputs(
            T_world_link=T_wr,
            twist_link=jnp.zeros(6, T_wr.dtype),
            bodies=scene.bodies.with_state(poses, twists),
            body_mask=jnp.ones(poses.shape[0], bool),
            dt=jnp.asarray(scene.dt, T_wr.dtype),
        )
        if gains is None:
            F = s.forces(s.init_state(), inp)[1].force
        else:
            st = s.init_state()
            F = s.forces(st.replace(probe_gain=gains), inp)[0].force
        return _pose.quat_rotate(_pose.quat_conjugate(fr[:, 3:]), F)

    return jax.vmap(frame)(
        scene.T_world_root, scene.T_root_joints, scene.bodies.poses, scene.bodies.twists
    )


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
    from .skin import LinkLayout, SkinnedScene, calibrate_layout

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
