"""Taxels inside MuJoCo MJX: scene mapping, taxels on model geoms, differentiable rollouts.

Optional: ``pip install -e ".[mjx]"`` (``mujoco``, ``mujoco-mjx``); the core never imports it.

* :func:`scene_from_model` maps a ``mujoco.MjModel``'s geoms to difftaxel shapes once, on the
  host: sphere, capsule, box, cylinder and plane exactly (MuJoCo sizes are half-extents;
  difftaxel's ``Box.size``, ``Capsule.length`` and ``Cylinder.height`` are full ones), meshes
  as :class:`~difftaxel.geometry.ConvexHull` (the hull MuJoCo collides them with; ``mesh=
  "exact"`` gives a :class:`~difftaxel.geometry.TriangleMesh`). What cannot be mapped
  (ellipsoid, height field, SDF plugins, flex) is returned in ``MjxScene.unmapped``, never
  skipped silently. The sensor link's own geoms are excluded (or kept and masked out:
  ``keep_sensor_body=True``, which gives several links one scene).
* :func:`sensor_inputs` turns an ``mjx.Data`` into :class:`~difftaxel.sensors.SensorInputs`:
  body poses (MuJoCo quaternions are (w, x, y, z); difftaxel's (x, y, z, w)) and twists at the
  body origin. MuJoCo's ``cvel`` is (angular, linear) about the subtree's centre of mass
  ``subtree_com[rootid]``; the origin's velocity is ``v_com + w x (x_body - subtree_com)``
  (checked against ``mj_objectVelocity``, which answers at the centre of mass ``xipos``). An optional contact mask gates the
  bodies touching the sensor in ``d.contact`` (Genesis-style gating).
* :func:`mjcf_tactile` reads MuJoCo's own ``<tactile>`` sensors from the user's model and
  :func:`tactile_step` / :func:`tactile_rollout` fill their ``sensordata`` inside ``mjx.step``
  (MJX leaves them at zero), with the C engine's readings (:mod:`difftaxel.mjx.tactile`);
  :func:`tactile_kinematic` puts difftaxel's force model on the same taxels.
* :func:`grid_on_geom`, :func:`pattern_on_geom` (a DEX-01 pattern), :func:`layout_on_geom`
  (a measured fingertip layout) and :func:`project_to_surface` place taxels on a geom.
* :func:`rollout` scans ``mjx.step`` and a sensor together; ``jax.vmap`` it over environments.
  With ``link_loops=1`` the sensor links alike (:func:`link_groups`: one sensor structure,
  one scene) are stepped in one loop: the program holds one link's sensing however many
  links carry taxels.
  **Gradients** through MJX need ``<option iterations="1"/>``: MJX's solver is a
  ``lax.while_loop`` that reverse mode cannot differentiate otherwise; ``rollout`` refuses a
  model with more iterations when ``differentiable=True`` (the default) with a clear error.
"""

try:
    import mujoco  # noqa: F401
    from mujoco import mjx as _mjx  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "difftaxel.mjx needs the optional MuJoCo extra: pip install -e '.[mjx]' "
        f"(mujoco, mujoco-mjx); {e}"
    ) from None

from .forces import ForceMatch, contact_force_on, fit_taxel_forces, taxel_forces_over, trajectory
from .mujoco_sdf import mujoco_distance
from .placement import (
    FINGERTIPS,
    PAD_AND_BALL,
    ShadowHand,
    grid_on_geom,
    layout_on_geom,
    load_shadow_hand,
    mujoco_quat_to_matrix,
    pad_and_ball,
    pattern_on_geom,
    project_to_surface,
    shadow_hand_path,
    shadow_hand_with_tactile,
)
from .scene import (
    MjxScene,
    body_poses_twists,
    check_differentiable,
    contact_mask,
    link_groups,
    rollout,
    scene_from_model,
    sensor_inputs,
)
from .tactile import (
    MjcfTactile,
    TactileTaxels,
    mjcf_tactile,
    tactile_kinematic,
    tactile_readings,
    tactile_rollout,
    tactile_sensordata,
    tactile_step,
)

__all__ = [
    "MjcfTactile",
    "TactileTaxels",
    "tactile_kinematic",
    "mjcf_tactile",
    "mujoco_distance",
    "tactile_readings",
    "tactile_rollout",
    "tactile_sensordata",
    "tactile_step",
    "MjxScene",
    "scene_from_model",
    "body_poses_twists",
    "sensor_inputs",
    "contact_mask",
    "check_differentiable",
    "rollout",
    "link_groups",
    "grid_on_geom",
    "pattern_on_geom",
    "layout_on_geom",
    "project_to_surface",
    "mujoco_quat_to_matrix",
    "ShadowHand",
    "shadow_hand_path",
    "shadow_hand_with_tactile",
    "load_shadow_hand",
    "FINGERTIPS",
    "PAD_AND_BALL",
    "pad_and_ball",
    "trajectory",
    "contact_force_on",
    "taxel_forces_over",
    "ForceMatch",
    "fit_taxel_forces",
]
