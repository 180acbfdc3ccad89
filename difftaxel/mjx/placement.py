"""Taxels placed on model geoms, and the test models (the pad and ball, the Shadow Hand)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco  # the package's __init__ checked the extra is installed
import numpy as np
from mujoco import mjx as _mjx

from .._validate import check_pose
from ..geometry import Plane
from .scene import _GT, _body_id, _shape_of, scene_from_model

__all__ = [
    "grid_on_geom",
    "pattern_on_geom",
    "layout_on_geom",
    "project_to_surface",
    "mujoco_quat_to_matrix",
    "ShadowHand",
    "shadow_hand_path",
    "load_shadow_hand",
    "FINGERTIPS",
    "PAD_AND_BALL",
    "pad_and_ball",
]


def _geom_index(m, geom) -> int:
    g = (
        geom
        if isinstance(geom, (int, np.integer))
        else mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, str(geom))
    )
    if not 0 <= g < m.ngeom:
        raise ValueError(f"geom: no geom {geom!r} in the model")
    return int(g)


def _face_axes(face):
    if face not in ("+x", "-x", "+y", "-y", "+z", "-z"):
        raise ValueError(f"face: expected one of +x -x +y -y +z -z, got {face!r}")
    a = "xyz".index(face[1])
    u, v = [k for k in range(3) if k != a]
    return a, u, v


def _geom_shape(m, g):
    shape = _shape_of(m, g, 0, "hull", pose=np.array([0.0, 0, 0, 0, 0, 0, 1]))
    if shape is None or isinstance(shape, Plane):
        raise ValueError(f"geom: {g} ({_GT(int(m.geom_type[g])).name}) has no finite surface")
    return shape


def _place(m, g, shape, face, uv):
    """Points ``uv [..., 2]`` (geom frame, on ``face``'s two axes) projected onto the geom's
    surface from outside on ``face``'s side; body-frame positions and normals."""
    a, u, v = _face_axes(face)
    lo, hi = (np.asarray(x, float) for x in shape.aabb_local())
    p = np.zeros(uv.shape[:-1] + (3,))
    p[..., u], p[..., v] = uv[..., 0], uv[..., 1]
    p[..., a] = (hi[a] + 0.01) if face[0] == "+" else (lo[a] - 0.01)
    with jax.ensure_compile_time_eval():
        q, n = project_to_surface(shape, jnp.asarray(p), iterations=4)
    R = mujoco_quat_to_matrix(m.geom_quat[g])
    return _distinct(m, g, np.asarray(q) @ R.T + np.asarray(m.geom_pos[g])), np.asarray(n) @ R.T


#: taxels closer than this (m) after placement are one position
_SAME_POINT = 1e-6


def _distinct(m, g, x: np.ndarray) -> np.ndarray:
    """``x [..., 3]`` if its points are distinct; otherwise an error: several taxels landed on
    one point of the surface (a layout larger than the face, or a corner of a hull)."""
    flat = x.reshape(-1, 3)
    k = len(np.unique(np.round(flat / _SAME_POINT), axis=0))
    if k < len(flat):
        raise ValueError(
            f"geom: {len(flat)} taxels land on only {k} distinct points of geom {g}'s surface "
            f"({_GT(int(m.geom_type[g])).name}; the layout is larger than the face, or the "
            "surface has corners there): scale the layout down or choose another face or geom"
        )
    return x


def grid_on_geom(m, geom, nx: int, ny: int, face: str = "+z", extent: float = 0.7):
    """Taxels on a geom's surface: positions ``[ny, nx, 3]`` and outward normals ``[ny, nx,
    3]`` in the geom's **body** frame (m).

    A regular ``nx x ny`` grid covering ``extent`` of the geom's box across the two axes other
    than ``face``'s, placed outside the geom on the ``face`` side (``"+x"``, ``"-x"``, ``"+y"``,
    ``"-y"``, ``"+z"`` or ``"-z"``, geom frame), is projected onto the surface along the
    shape's normal (:func:`project_to_surface`; meshes through their convex hull). Row-major
    like :func:`~difftaxel.layout.generate_grid_points_on_plane`: ``[j, i]`` is column ``i``
    of row ``j``.
    """
    g = _geom_index(m, geom)
    _, u, v = _face_axes(face)
    for name, k in (("nx", nx), ("ny", ny)):
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {k!r}")
    if not 0 < extent <= 1:
        raise ValueError(f"extent: expected a fraction in (0, 1], got {extent}")
    shape = _geom_shape(m, g)
    lo, hi = (np.asarray(x, float) for x in shape.aabb_local())
    c, h = 0.5 * (lo + hi), 0.5 * (hi - lo) * extent
    su = np.linspace(c[u] - h[u], c[u] + h[u], nx) if nx > 1 else c[u : u + 1]
    sv = np.linspace(c[v] - h[v], c[v] + h[v], ny) if ny > 1 else c[v : v + 1]
    V, U = np.meshgrid(sv, su, indexing="ij")
    return _place(m, g, shape, face, np.stack([U, V], -1))


def pattern_on_geom(m, geom, pattern, face: str = "+z"):
    """A DEX-01 pattern (:class:`~difftaxel.patterns.TaxelPattern`) laid on a geom's face:
    the pattern's x, y positions (sensor plane, m) become the face's two axes (in order
    x, y, z skipping the face's own), centred on the geom's box, and are projected onto the
    surface. Returns body-frame positions and outward normals ``[N, 3]`` in pattern order."""
    g = _geom_index(m, geom)
    _, u, v = _face_axes(face)
    P = np.asarray(pattern.poses, float)
    if P.ndim != 3 or P.shape[1:] != (3, 4):
        raise ValueError(f"pattern: expected poses [N, 3, 4], got {P.shape}")
    shape = _geom_shape(m, g)
    lo, hi = (np.asarray(x, float) for x in shape.aabb_local())
    c = 0.5 * (lo + hi)
    uv = P[:, :2, 3] + np.array([c[u], c[v]])
    return _place(m, g, shape, face, uv)


def layout_on_geom(m, geom, positions, normals, T_geom_layout=None, standoff: float = 0.01):
    """A measured taxel layout (a real fingertip's positions ``[N, 3]`` m and outward
    ``normals [N, 3]``, in its own frame) placed on a geom: each taxel is moved into the geom
    frame by ``T_geom_layout [7]`` (x y z qx qy qz qw; default identity), pushed ``standoff``
    m out along its normal and projected back onto the geom's surface (meshes through their
    convex hull). Returns body-frame positions and the surface's outward normals ``[N, 3]``.

    The layout keeps its arrangement; the surface decides where each taxel lands, so a layout
    designed for another fingertip lands on the nearest point of this one.
    """
    from .. import pose as _pose

    g = _geom_index(m, geom)
    p = np.asarray(positions, float)
    n = np.asarray(normals, float)
    if p.ndim != 2 or p.shape[1] != 3 or n.shape != p.shape:
        raise ValueError(f"positions, normals: expected matching [N, 3], got {p.shape}, {n.shape}")
    nn = np.linalg.norm(n, axis=1, keepdims=True)
    if not np.all(np.isfinite(p)) or not np.all(nn > 1e-12):
        raise ValueError("normals: every row must be a finite non-zero vector")
    T = np.array([0.0, 0, 0, 0, 0, 0, 1]) if T_geom_layout is None else np.asarray(T_geom_layout)
    if T.shape != (7,):
        raise ValueError(f"T_geom_layout: expected a pose [7] (x y z qx qy qz qw), got {T.shape}")
    check_pose(T, "T_geom_layout")
    if not (np.isfinite(standoff) and standoff >= 0):
        raise ValueError(f"standoff: expected a finite distance >= 0 (m), got {standoff}")
    shape = _geom_shape(m, g)
    with jax.ensure_compile_time_eval():
        q = _pose.apply(jnp.asarray(T), jnp.asarray(p))
        d = _pose.rotate(jnp.asarray(T), jnp.asarray(n / nn))
        x, nrm = project_to_surface(shape, q + standoff * d, iterations=4)
    R = mujoco_quat_to_matrix(m.geom_quat[g])
    return _distinct(m, g, np.asarray(x) @ R.T + np.asarray(m.geom_pos[g])), np.asarray(nrm) @ R.T


def mujoco_quat_to_matrix(q_wxyz) -> np.ndarray:
    """Rotation matrix ``[3, 3]`` of a MuJoCo quaternion (w, x, y, z)."""
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(q_wxyz, float))
    return out.reshape(3, 3)


def project_to_surface(shape, points, iterations: int = 3):
    """Points ``[..., 3]`` (shape frame, m) moved onto ``shape``'s surface along its SDF
    normal (a few Newton steps ``p - sd n``, ``iterations >= 1``); returns ``(points,
    outward normals)``."""
    if int(iterations) < 1:
        raise ValueError(f"iterations: expected >= 1, got {iterations}")
    p = jnp.asarray(points)
    n = None
    for _ in range(int(iterations)):  # a fixed, tiny number of Newton steps
        sd, n = shape.sdf_local(p)
        p = p - sd[..., None] * n
    # the normal 1 um inside: exactly on the surface a shape's gradient can be ill-defined
    # (a box's outside branch at zero distance)
    return p, shape.sdf_local(p - 1e-6 * n)[1]


# ----------------------------------------------------------------------------- the test model

PAD_AND_BALL = """<mujoco model="difftaxel pad and ball">
  <option timestep="0.002" iterations="1" ls_iterations="4"/>
  <worldbody>
    <body name="pad"><geom name="pad" type="box" size="0.02 0.02 0.005"/></body>
    <body name="ball" pos="0.003 0.002 0.0158">
      <freejoint/><geom name="ball" type="sphere" size="0.01" mass="0.05"/>
    </body>
  </worldbody>
</mujoco>
"""


def pad_and_ball(nx: int = 4, ny: int = 4, extent: float = 0.6, **sensor_options):
    """The small built-in model for fast tests: a fixed 4 x 4 cm pad and a free 1 cm ball
    resting 0.8 mm into it (``iterations="1"``: differentiable). Returns ``(m, sensor,
    scene)``: a KinematicTaxel grid on the pad's top face (default probe radius 0.5 mm)."""
    from ..sensors import KinematicTaxel

    m = mujoco.MjModel.from_xml_string(PAD_AND_BALL)
    pos, _ = grid_on_geom(m, "pad", nx, ny, extent=extent)
    sensor = KinematicTaxel(probe_local_pos=pos, **{"probe_radius": 5e-4, **sensor_options})
    return m, sensor, scene_from_model(m, "pad")


def _colliders(m, body) -> list:
    """The geoms of ``body`` that collide with something."""
    return [
        g
        for g in range(m.ngeom)
        if m.geom_bodyid[g] == body and (m.geom_contype[g] or m.geom_conaffinity[g])
    ]


def _collider_facing(m, d, body, target):
    """``(geom, axis, side)``: ``body``'s first collision geom, and the axis (0: x, 1: y) and
    side (+1 or -1) of that geom's frame facing ``target``'s origin in ``d`` (an MjData)."""
    g = _colliders(m, body)[0]
    R = np.asarray(d.geom_xmat[g]).reshape(3, 3)
    to = R.T @ (d.xpos[target] - d.geom_xpos[g])
    k = int(np.argmax(np.abs(to[:2])))
    return g, k, 1.0 if to[k] > 0 else -1.0


FINGERTIPS = ("rh_ffdistal", "rh_mfdistal", "rh_rfdistal", "rh_lfdistal", "rh_thdistal")


class ShadowHand(NamedTuple):
    """The Shadow Hand shipped in the ``mujoco-mjx`` wheel with taxels on its fingertips.

    Attributes:
      m: the host model (``scene_right.xml``: the right hand and a 3 cm ball).
      fingertips: the names of the sensor links (the five fingertips by default).
      sensors: one :class:`~difftaxel.sensors.KinematicTaxel` per sensor link (a grid on the
        link's collision geom, on the side facing the ball at the initial pose).
      scenes: one :class:`MjxScene` per sensor link.
    """

    m: object
    fingertips: tuple
    sensors: tuple
    scenes: tuple


def shadow_hand_path() -> str:
    """Path of ``scene_right.xml`` in the installed ``mujoco-mjx`` package (Apache-2.0)."""
    import os

    p = os.path.join(os.path.dirname(_mjx.__file__), "test_data", "shadow_hand", "scene_right.xml")
    if not os.path.exists(p):
        raise FileNotFoundError(f"{p}: the installed mujoco-mjx has no Shadow Hand test model")
    return p


def load_shadow_hand(
    nx: int = 4,
    ny: int = 4,
    include_hand: bool = False,
    links: str = "fingertips",
    **sensor_options,
):
    """The Shadow Hand test model with an ``nx x ny`` taxel grid on each chosen link.

    Args:
      nx, ny: taxels per row and column of each grid (on the face of the link's first
        collision geom that faces the ball at the initial pose).
      include_hand: taxels also sense every other hand link (default: the ball and the floor).
      links: ``"fingertips"`` (five) or ``"all"`` (every hand link with a collision geom: 21,
        palm and phalanges included).
      sensor_options: go to each ``KinematicTaxel`` (default probe radius 0.5 mm).
    """
    from ..sensors import KinematicTaxel

    if links not in ("fingertips", "all"):
        raise ValueError(f"links: expected 'fingertips' or 'all', got {links!r}")
    m = mujoco.MjModel.from_xml_path(shadow_hand_path())
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    obj = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "object")
    hand = [b for b in range(1, m.nbody) if b != obj]
    if links == "fingertips":
        chosen = [_body_id(m, n) for n in FINGERTIPS]
    else:
        chosen = [b for b in hand if _colliders(m, b)]
    opts = {"probe_radius": 5e-4, **sensor_options}
    sensors, scenes = [], []
    for b in chosen:  # a few links, host-side
        g, k, sign = _collider_facing(m, d, b, obj)
        face = ("+" if sign > 0 else "-") + "xy"[k]
        pos, _ = grid_on_geom(m, g, nx, ny, face=face)
        sensors.append(KinematicTaxel(probe_local_pos=pos, **opts))
        excl = () if include_hand else [x for x in hand if x != b]
        # sensing the hand, every link keeps its own geoms (masked out): one scene for all,
        # so a rollout steps the links in one loop
        scenes.append(scene_from_model(m, b, exclude_bodies=excl, keep_sensor_body=include_hand))
    names = tuple(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b) for b in chosen)
    return ShadowHand(m, names, tuple(sensors), tuple(scenes))


def shadow_hand_with_tactile(resolution: int = 7, links: str = "fingertips", thickness=1e-4):
    """The Shadow Hand test model with MuJoCo ``<tactile>`` sensors, built as an MJCF user
    would write them (``mujoco.MjSpec``): on each chosen link a ``resolution x resolution``
    builtin ``plate`` mesh, a non-colliding mesh geom on the face of the link's collision geom
    that faces the ball at the initial pose, and ``<tactile geom mesh>`` on it.

    Args:
      resolution: taxels per side of each plate.
      links: ``"fingertips"`` (five) or ``"all"`` (every hand link with a collision geom).
      thickness: the plate's scale along its normal (m).

    Returns the compiled ``mujoco.MjModel``; its sensors are named ``tactile_<body>``.
    """
    if links not in ("fingertips", "all"):
        raise ValueError(f"links: expected 'fingertips' or 'all', got {links!r}")
    if not (isinstance(resolution, (int, np.integer)) and resolution >= 2):
        raise ValueError(f"resolution: expected an int >= 2, got {resolution!r}")
    m = mujoco.MjModel.from_xml_path(shadow_hand_path())
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    obj = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "object")
    if links == "fingertips":
        bodies = [_body_id(m, n) for n in FINGERTIPS]
    else:
        bodies = [b for b in range(1, m.nbody) if b != obj and _colliders(m, b)]
    spec = mujoco.MjSpec.from_file(shadow_hand_path())
    for b in bodies:  # host-side, once
        g, k, sign = _collider_facing(m, d, b, obj)
        c, h = np.asarray(m.geom_aabb[g, :3]), np.asarray(m.geom_aabb[g, 3:])
        u, v = [a for a in range(3) if a != k]
        name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b)
        mesh = spec.add_mesh(name=f"tactile_{name}")
        mesh.make_plate([int(resolution), int(resolution)])
        mesh.scale = [0.9 * h[u], 0.9 * h[v], thickness]
        # the plate's own axes (x, y, normal z) onto the geom's (u, v, +-k)
        F = np.zeros((3, 3))
        F[:, 0], F[:, 1] = np.eye(3)[u], np.eye(3)[v]
        F[:, 2] = sign * np.eye(3)[k]
        if np.linalg.det(F) < 0:
            F[:, 0] = -F[:, 0]
        q_face = np.zeros(4)
        mujoco.mju_mat2Quat(q_face, F.reshape(-1))
        q = np.zeros(4)
        mujoco.mju_mulQuat(q, np.asarray(m.geom_quat[g], float), q_face)
        offset = c + sign * (h[k] + thickness) * np.eye(3)[k]
        Rg = mujoco_quat_to_matrix(m.geom_quat[g])
        pos = np.asarray(m.geom_pos[g], float) + Rg @ offset
        skin = spec.body(name).add_geom()
        skin.name = f"tactile_{name}"
        skin.type = mujoco.mjtGeom.mjGEOM_MESH
        skin.meshname = mesh.name
        skin.pos, skin.quat = pos, q
        skin.contype = skin.conaffinity = 0
        skin.mass = 0.0
        skin.group = 4
        s = spec.add_sensor()
        s.name = f"tactile_{name}"
        s.type = mujoco.mjtSensor.mjSENS_TACTILE
        s.objtype, s.objname = mujoco.mjtObj.mjOBJ_MESH, mesh.name
        s.reftype, s.refname = mujoco.mjtObj.mjOBJ_GEOM, skin.name
    return spec.compile()
