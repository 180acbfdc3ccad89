"""The skinned hand as a rig: a glove recording's scene and the taxel forces it produces.

The glove's taxels are KinematicTaxel probes whose positions are skinned every frame
(:mod:`difftaxel.skinning`); forces are reported in **taxel axes** (+z the outward normal), as
the tactile data contract streams them: ``F_taxel = R_root_taxel^T F_root``.
:func:`glove_forces` is pure and differentiable in the taxel bind poses, the joint poses and
the sensor parameters. :class:`~difftaxel.skin.SkinnedScene` fits layouts on it;
:mod:`difftaxel.glove` builds the glove's calibration on that.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .. import pose as _pose
from ..geometry import Bodies
from ..sensors import KinematicTaxel, SensorInputs
from ..skinning import LBS, skin_frames

Array = jax.Array

__all__ = ["GloveScene", "glove_forces"]


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
