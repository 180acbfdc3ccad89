"""Taxels inside MuJoCo MJX: scene mapping, taxels on model geoms, differentiable rollouts.

Optional: ``pip install -e ".[mjx]"`` (``mujoco``, ``mujoco-mjx``); the core never imports it.

* :func:`scene_from_model` maps a ``mujoco.MjModel``'s geoms to difftaxel shapes once, on the
  host: sphere, capsule, box, cylinder and plane exactly (MuJoCo sizes are half-extents;
  difftaxel's ``Box.size``, ``Capsule.length`` and ``Cylinder.height`` are full ones), meshes
  as :class:`~difftaxel.geometry.ConvexHull` (the hull MuJoCo collides them with; ``mesh=
  "exact"`` gives a :class:`~difftaxel.geometry.TriangleMesh`). What cannot be mapped
  (ellipsoid, height field, SDF plugins, flex) is returned in ``MjxScene.unmapped``, never
  skipped silently. The sensor link's own geoms are excluded.
* :func:`sensor_inputs` turns an ``mjx.Data`` into :class:`~difftaxel.sensors.SensorInputs`:
  body poses (MuJoCo quaternions are (w, x, y, z); difftaxel's (x, y, z, w)) and twists at the
  body origin. MuJoCo's ``cvel`` is (angular, linear) about the subtree's centre of mass
  ``subtree_com[rootid]``; the origin's velocity is ``v_com + w x (x_body - subtree_com)``
  (checked against ``mj_objectVelocity``, which answers at the centre of mass ``xipos``). An optional contact mask gates the
  bodies touching the sensor in ``d.contact`` (Genesis-style gating).
* :func:`grid_on_geom`, :func:`pattern_on_geom` (a DEX-01 pattern), :func:`layout_on_geom`
  (a measured fingertip layout) and :func:`project_to_surface` place taxels on a geom.
* :func:`rollout` scans ``mjx.step`` and a sensor together; ``jax.vmap`` it over environments.
  **Gradients** through MJX need ``<option iterations="1"/>``: MJX's solver is a
  ``lax.while_loop`` that reverse mode cannot differentiate otherwise; ``rollout`` refuses a
  model with more iterations when ``differentiable=True`` (the default) with a clear error.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

try:
    import mujoco
    from mujoco import mjx as _mjx
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "difftaxel.mjx needs the optional MuJoCo extra: pip install -e '.[mjx]' "
        f"(mujoco, mujoco-mjx); {e}"
    ) from None

from .geometry import Bodies, Box, Capsule, ConvexHull, Cylinder, Plane, Sphere, TriangleMesh
from .sensors import SensorInputs

Array = jax.Array

__all__ = [
    "MjxScene",
    "scene_from_model",
    "body_poses_twists",
    "sensor_inputs",
    "contact_mask",
    "grid_on_geom",
    "pattern_on_geom",
    "layout_on_geom",
    "project_to_surface",
    "mujoco_quat_to_matrix",
    "check_differentiable",
    "rollout",
]

_GT = mujoco.mjtGeom


def _xyzw(q_wxyz):
    q = np.asarray(q_wxyz, float)
    return np.concatenate([q[..., 1:], q[..., :1]], -1)


def _name(m, obj, i):
    n = mujoco.mj_id2name(m, obj, i)
    return n if n else f"#{i}"


def _body_id(m, body) -> int:
    if isinstance(body, (int, np.integer)):
        if not 0 <= int(body) < m.nbody:
            raise ValueError(f"sensor_body: expected a body id in [0, {m.nbody}), got {body}")
        return int(body)
    i = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, str(body))
    if i < 0:
        raise ValueError(f"sensor_body: no body named {body!r} in the model")
    return i


class MjxScene(NamedTuple):
    """The static map from a MuJoCo model to difftaxel bodies (host data, built once).

    Attributes:
      bodies: :class:`~difftaxel.geometry.Bodies` template: one difftaxel body per mapped
        MuJoCo body, shapes posed on it by their geom pose (poses filled per step).
      body_ids: ``[B]`` int, the MuJoCo body of each difftaxel body.
      geom_ids: ``[S]`` int, the MuJoCo geom of each shape.
      sensor_body: the MuJoCo body carrying the taxels (its geoms are excluded).
      sensor_geoms: ``[G]`` int, the sensor body's geoms (for the contact mask).
      unmapped: ``[(geom name, type name), ...]`` geoms that could not be mapped.
    """

    bodies: Bodies
    body_ids: np.ndarray
    geom_ids: np.ndarray
    sensor_body: int
    sensor_geoms: np.ndarray
    unmapped: list


def _mesh_vertices(m, geom):
    mid = int(m.geom_dataid[geom])
    a, n = int(m.mesh_vertadr[mid]), int(m.mesh_vertnum[mid])
    return np.asarray(m.mesh_vert[a : a + n], float), mid


def _mesh_faces(m, mid):
    a, n = int(m.mesh_faceadr[mid]), int(m.mesh_facenum[mid])
    return np.asarray(m.mesh_face[a : a + n], np.int64)


def _shape_of(m, g, body, mesh="hull", pose=None):
    """The difftaxel shape of geom ``g`` on difftaxel body ``body`` (None: not mappable)."""
    t = int(m.geom_type[g])
    size = np.asarray(m.geom_size[g], float)
    if pose is None:
        pose = np.concatenate([m.geom_pos[g], _xyzw(m.geom_quat[g])])
    kw = dict(T_body_shape=pose, body=body)
    if t == _GT.mjGEOM_SPHERE:
        return Sphere(radius=size[0], **kw)
    if t == _GT.mjGEOM_CAPSULE:
        return Capsule(radius=size[0], length=2 * size[1], **kw)
    if t == _GT.mjGEOM_BOX:
        return Box(size=2 * size, **kw)
    if t == _GT.mjGEOM_CYLINDER:
        return Cylinder(radius=size[0], height=2 * size[1], **kw)
    if t == _GT.mjGEOM_PLANE:
        return Plane(normal=(0.0, 0.0, 1.0), **kw)
    if t == _GT.mjGEOM_MESH:
        v, mid = _mesh_vertices(m, g)
        if mesh == "hull":
            return ConvexHull.from_points(v, **kw)
        # MuJoCo's meshes need not be watertight: the winding sign is then approximate
        return TriangleMesh.from_arrays(v, _mesh_faces(m, mid), require_watertight=False, **kw)
    return None


def scene_from_model(
    m,
    sensor_body,
    *,
    exclude_bodies=(),
    mesh: str = "hull",
    include_world: bool = True,
    collision_only: bool = True,
) -> MjxScene:
    """Map the geoms of ``m`` (``mujoco.MjModel``) to difftaxel shapes.

    Args:
      m: the host model (``mujoco.MjModel``).
      sensor_body: name or id of the body carrying the taxels; its geoms are excluded.
      exclude_bodies: names or ids of other bodies to leave out.
      mesh: ``"hull"`` (a :class:`ConvexHull` of each mesh's vertices, as MuJoCo collides) or
        ``"exact"`` (a :class:`TriangleMesh`, much slower).
      include_world: map the world body's geoms (floors, fixed planes).
      collision_only: skip geoms that collide with nothing (``contype == conaffinity == 0``:
        visual meshes).

    Returns an :class:`MjxScene`; geoms of other types are listed in ``unmapped``.
    """
    if not isinstance(m, mujoco.MjModel):
        raise TypeError(f"m: expected a mujoco.MjModel (host model), got {type(m).__name__}")
    if mesh not in ("hull", "exact"):
        raise ValueError(f"mesh: expected 'hull' or 'exact', got {mesh!r}")
    sb = _body_id(m, sensor_body)
    excluded = {sb} | {_body_id(m, b) for b in exclude_bodies}
    if not include_world:
        excluded.add(0)
    body_index: dict[int, int] = {}
    shapes, geom_ids, unmapped = [], [], []
    for g in range(m.ngeom):  # host-side, once per model
        b = int(m.geom_bodyid[g])
        if b in excluded:
            continue
        if collision_only and m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0:
            continue
        t = int(m.geom_type[g])
        k = body_index.setdefault(b, len(body_index))
        s = _shape_of(m, g, k, mesh)
        if s is None:
            unmapped.append((_name(m, mujoco.mjtObj.mjOBJ_GEOM, g), _GT(t).name))
            if not any(int(m.geom_bodyid[x]) == b for x in geom_ids):
                body_index.pop(b)
            continue
        shapes.append(s)
        geom_ids.append(g)
    if not shapes:
        raise ValueError("m: no geom outside the sensor body could be mapped")
    body_ids = np.array(sorted(body_index, key=body_index.get), np.int32)
    poses = np.tile([0.0, 0, 0, 0, 0, 0, 1], (len(body_ids), 1))
    sensor_geoms = np.flatnonzero(np.asarray(m.geom_bodyid) == sb).astype(np.int32)
    return MjxScene(
        Bodies(tuple(shapes), poses),
        body_ids,
        np.array(geom_ids, np.int32),
        sb,
        sensor_geoms,
        unmapped,
    )


def body_poses_twists(d, ids, root_ids) -> tuple[Array, Array]:
    """Poses ``[B, 7]`` (x y z qx qy qz qw, world) and twists ``[B, 6]`` (velocity of the body
    origin, then angular velocity; world) of MuJoCo bodies ``ids [B]`` from ``mjx.Data``;
    ``root_ids [B]`` are their ``m.body_rootid`` (``cvel`` is about ``subtree_com`` of the
    root: ``v_origin = v_com + w x (xpos - subtree_com[root])``)."""
    ids = jnp.asarray(ids)
    xpos = d.xpos[ids]
    q = d.xquat[ids]
    poses = jnp.concatenate([xpos, q[..., 1:], q[..., :1]], -1)
    cvel = d.cvel[ids]
    w, v_com = cvel[..., :3], cvel[..., 3:]
    v = v_com + jnp.cross(w, xpos - d.subtree_com[jnp.asarray(root_ids)])
    return poses, jnp.concatenate([v, w], -1)


def contact_mask(scene: MjxScene, d) -> Array:
    """``[B]`` bool: the difftaxel body is in contact with the sensor body in ``d.contact``
    (MJX's contact list: a pair with ``dist < 0`` between a sensor geom and one of the body's
    geoms)."""
    impl = getattr(d, "_impl", None)  # MJX 3.17 keeps the contact list there
    con = impl.contact if impl is not None and hasattr(impl, "contact") else d.contact
    g1, g2, hit = con.geom1, con.geom2, con.dist < 0
    sens = jnp.asarray(scene.sensor_geoms)
    on1 = jnp.any(g1[:, None] == sens[None], -1)
    on2 = jnp.any(g2[:, None] == sens[None], -1)
    other = jnp.where(on1, g2, g1)
    touching = hit & (on1 | on2)
    gid = jnp.asarray(scene.geom_ids)
    gbody = jnp.asarray(np.asarray([s.body for s in scene.bodies.shapes], np.int32))
    per_shape = jnp.any(touching[None] & (other[None] == gid[:, None]), -1)  # [S]
    return jax.ops.segment_max(per_shape.astype(jnp.int32), gbody, scene.body_ids.size) > 0


def sensor_inputs(scene: MjxScene, m, d, dt=None, gated: bool = False) -> SensorInputs:
    """:class:`~difftaxel.sensors.SensorInputs` of the sensor body in ``d`` (``mjx.Data``).

    ``m`` is the host or MJX model (for the static root ids and the timestep); ``dt``
    overrides the timestep; ``gated`` masks bodies not in contact with the sensor's geoms.
    """
    return _inputs(d, scene, np.asarray(_rootids(m)), _timestep(m) if dt is None else dt, gated)


def _rootids(m):
    return np.asarray(m.body_rootid)


def _timestep(m):
    return float(np.asarray(m.opt.timestep))


# ----------------------------------------------------------------------------- taxels on geoms


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
    return np.asarray(q) @ R.T + np.asarray(m.geom_pos[g]), np.asarray(n) @ R.T


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
    from . import pose as _pose

    g = _geom_index(m, geom)
    p = np.asarray(positions, float)
    n = np.asarray(normals, float)
    if p.ndim != 2 or p.shape[1] != 3 or n.shape != p.shape:
        raise ValueError(f"positions, normals: expected matching [N, 3], got {p.shape}, {n.shape}")
    nn = np.linalg.norm(n, axis=1, keepdims=True)
    if not np.all(np.isfinite(p)) or not np.all(nn > 1e-12):
        raise ValueError("normals: every row must be a finite non-zero vector")
    T = np.array([0.0, 0, 0, 0, 0, 0, 1]) if T_geom_layout is None else np.asarray(T_geom_layout)
    shape = _geom_shape(m, g)
    with jax.ensure_compile_time_eval():
        q = _pose.apply(jnp.asarray(T), jnp.asarray(p))
        d = _pose.rotate(jnp.asarray(T), jnp.asarray(n / nn))
        x, nrm = project_to_surface(shape, q + standoff * d, iterations=4)
    R = mujoco_quat_to_matrix(m.geom_quat[g])
    return np.asarray(x) @ R.T + np.asarray(m.geom_pos[g]), np.asarray(nrm) @ R.T


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


# ----------------------------------------------------------------------------- rollouts


def check_differentiable(m) -> None:
    """Raise ``ValueError`` unless reverse-mode gradients can pass MJX's solver: the model must
    use ``<option iterations="1"/>`` (MJX's solver is a ``lax.while_loop`` otherwise, which
    ``jax.grad`` cannot differentiate) and ``ls_iterations`` likewise 1 or its line search off.
    """
    it = int(np.asarray(m.opt.iterations))
    if it != 1:
        raise ValueError(
            f"m.opt.iterations: {it}; gradients through mjx.step need <option "
            'iterations="1"/> (MJX\'s solver loop is a lax.while_loop that reverse mode '
            "cannot differentiate); set it, or pass differentiable=False for forward rollouts"
        )


def _inputs(d, sc, root, dt, gated):
    poses, twists = body_poses_twists(d, sc.body_ids, root[sc.body_ids])
    lp, lt = body_poses_twists(d, np.array([sc.sensor_body]), root[[sc.sensor_body]])
    mask = contact_mask(sc, d) if gated else jnp.ones(sc.body_ids.size, bool)
    return SensorInputs(
        T_world_link=lp[0],
        twist_link=lt[0],
        bodies=sc.bodies.with_state(poses, twists),
        body_mask=mask,
        dt=jnp.asarray(dt, poses.dtype),
    )


def rollout(
    mx,
    d0,
    sensor,
    scene,
    controls,
    *,
    m=None,
    key=None,
    state=None,
    gated: bool = False,
    differentiable: bool = True,
):
    """Scan ``mjx.step`` and taxel sensors together over ``controls [T, nu]`` (one environment).

    Args:
      mx: the ``mjx.Model``; ``m``: the host ``mujoco.MjModel`` (static ids and options;
        defaults to ``mx``, whose ``body_rootid`` and ``opt`` must then be concrete).
      d0: initial ``mjx.Data``.
      sensor, scene: a difftaxel probe sensor (positions in ``scene.sensor_body``'s frame) and
        its :func:`scene_from_model` map, or tuples of them (one per sensor link, e.g. five
        fingertips).
      controls: ``[T, nu]`` (``nu`` may be 0).
      key: PRNG key for the sensors' noise (split per step and sensor) or None.
      state: initial sensor state(s) (default ``sensor.init_state(key)``).
      gated: Genesis-style gating by MJX's contact list.
      differentiable: check that gradients can pass the solver (:func:`check_differentiable`).

    Returns ``(final mjx.Data, final sensor state(s), readings over [T])`` (tuples when tuples
    were given). ``jax.vmap`` it over environments (``d0``, ``controls``, ``key``).
    """
    host = mx if m is None else m
    if differentiable:
        check_differentiable(host)
    many = isinstance(sensor, (tuple, list))
    sensors = tuple(sensor) if many else (sensor,)
    scenes = tuple(scene) if many else (scene,)
    if len(sensors) != len(scenes):
        raise ValueError(f"scene: {len(scenes)} scenes for {len(sensors)} sensors")
    root = np.asarray(_rootids(host))
    dt = _timestep(host)
    if state is None:
        state = tuple(s.init_state(key) for s in sensors)
    elif not many:
        state = (state,)
    T = controls.shape[0]
    keys = None if key is None else jax.random.split(key, (T, len(sensors)))

    def step(carry, xs):
        d, states = carry
        u, k = xs
        d = _mjx.step(mx, d.replace(ctrl=u))
        new, reads = [], []
        for i, (s, sc) in enumerate(zip(sensors, scenes)):  # a few sensor links, static
            st, r = s.step(states[i], _inputs(d, sc, root, dt, gated), None if k is None else k[i])
            new.append(st)
            reads.append(r)
        return (d, tuple(new)), tuple(reads)

    (d, states), readings = jax.lax.scan(step, (d0, tuple(state)), (controls, keys))
    if not many:
        return d, states[0], readings[0]
    return d, states, readings


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
    from .sensors import KinematicTaxel

    m = mujoco.MjModel.from_xml_string(PAD_AND_BALL)
    pos, _ = grid_on_geom(m, "pad", nx, ny, extent=extent)
    sensor = KinematicTaxel(probe_local_pos=pos, **{"probe_radius": 5e-4, **sensor_options})
    return m, sensor, scene_from_model(m, "pad")


FINGERTIPS = ("rh_ffdistal", "rh_mfdistal", "rh_rfdistal", "rh_lfdistal", "rh_thdistal")


class ShadowHand(NamedTuple):
    """The Shadow Hand shipped in the ``mujoco-mjx`` wheel with taxels on its fingertips.

    Attributes:
      m: the host model (``scene_right.xml``: the right hand and a 3 cm ball).
      fingertips: the fingertip body names.
      sensors: one :class:`~difftaxel.sensors.KinematicTaxel` per fingertip (grid on the
        fingertip's collision hull, on the side facing the ball at the initial pose).
      scenes: one :class:`MjxScene` per fingertip.
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


def load_shadow_hand(nx: int = 4, ny: int = 4, include_hand: bool = False, **sensor_options):
    """The Shadow Hand test model with an ``nx x ny`` taxel grid on each fingertip.

    Taxels sense the free ball and the floor (``include_hand=True``: also every other hand
    link). ``sensor_options`` go to each ``KinematicTaxel`` (default probe radius 0.5 mm).
    """
    from .sensors import KinematicTaxel

    m = mujoco.MjModel.from_xml_path(shadow_hand_path())
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    obj = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "object")
    hand = [b for b in range(1, m.nbody) if b != obj]
    opts = {"probe_radius": 5e-4, **sensor_options}
    sensors, scenes = [], []
    for name in FINGERTIPS:  # five fingertips, host-side
        b = _body_id(m, name)
        g = next(
            x
            for x in range(m.ngeom)
            if m.geom_bodyid[x] == b and (m.geom_contype[x] or m.geom_conaffinity[x])
        )
        R = np.asarray(d.geom_xmat[g]).reshape(3, 3)
        to_ball = R.T @ (d.xpos[obj] - d.geom_xpos[g])
        k = int(np.argmax(np.abs(to_ball[:2])))
        face = ("+" if to_ball[k] > 0 else "-") + "xy"[k]
        pos, _ = grid_on_geom(m, g, nx, ny, face=face)
        sensors.append(KinematicTaxel(probe_local_pos=pos, **opts))
        excl = () if include_hand else [x for x in hand if x != b]
        scenes.append(scene_from_model(m, b, exclude_bodies=excl))
    return ShadowHand(m, FINGERTIPS, tuple(sensors), tuple(scenes))


__all__ += [
    "ShadowHand",
    "shadow_hand_path",
    "load_shadow_hand",
    "FINGERTIPS",
    "PAD_AND_BALL",
    "pad_and_ball",
]


# ----------------------------------------------------------------------------- forces


def trajectory(mx, d0, controls, xfrc=None):
    """``mjx.Data`` stacked over ``T`` steps: ``controls [T, nu]``, optional applied body
    wrenches ``xfrc [T, nbody, 6]`` (world force then torque, at the body's centre of mass)."""
    T = controls.shape[0]
    if xfrc is None:
        xfrc = jnp.zeros((T,) + tuple(d0.xfrc_applied.shape), d0.xfrc_applied.dtype)

    def step(d, xs):
        u, f = xs
        d = _mjx.step(mx, d.replace(ctrl=u, xfrc_applied=f))
        return d, d

    return jax.lax.scan(step, d0, (controls, xfrc))[1]


def contact_force_on(m, traj, body) -> Array:
    """World force ``[T, 3]`` (N) that constraints (contacts, when nothing else constrains it)
    exert on ``body`` over a trajectory, read from ``qfrc_constraint`` on its translational
    dofs: a free joint's first three dofs, or slide joints (their world axes; the body's
    parent must be the world). Rotational dofs are ignored."""
    b = _body_id(m, body)
    if int(m.body_jntnum[b]) < 1:
        raise ValueError(f"body: {body!r} has no joint")
    cols, axes = [], []
    for j in range(int(m.body_jntadr[b]), int(m.body_jntadr[b] + m.body_jntnum[b])):
        t, a = int(m.jnt_type[j]), int(m.jnt_dofadr[j])
        if t == mujoco.mjtJoint.mjJNT_FREE:
            cols += [a, a + 1, a + 2]
            axes += list(np.eye(3))
        elif t == mujoco.mjtJoint.mjJNT_SLIDE:
            if int(m.body_parentid[b]) != 0:
                raise ValueError(f"body: {body!r} slides on a moving parent")
            R = mujoco_quat_to_matrix(m.body_quat[b])
            cols.append(a)
            axes.append(R @ np.asarray(m.jnt_axis[j], float))
    if not cols:
        raise ValueError(f"body: {body!r} has no translational joint (free or slide)")
    A = jnp.asarray(np.asarray(axes))  # [k, 3]
    return traj.qfrc_constraint[:, np.asarray(cols)] @ A


def taxel_forces_over(sensor, scene, m, traj) -> Array:
    """Ground-truth taxel forces ``[T, *layout, 3]`` (N, sensor link frame) of a stateless
    sensor (KinematicTaxel) over a recorded trajectory (``jax.vmap`` over time)."""
    root = np.asarray(_rootids(m))
    dt = _timestep(m)

    def one(d):
        return sensor.step(sensor.init_state(), _inputs(d, scene, root, dt, False))[1]

    return jax.vmap(one)(traj).ground_truth.force


class ForceMatch(NamedTuple):
    """Result of :func:`fit_taxel_forces`: the fitted ``sensor``, its ``normal_stiffness``
    and ``shear_scalar``, and the relative error of the summed taxel force against MJX's
    contact force, before and after, on the ``rest`` and ``sliding`` frames."""

    sensor: object
    normal_stiffness: float
    shear_scalar: float
    error_before: dict
    error_after: dict


def _phase_means(F, frames):
    return jnp.stack([jnp.mean(F[np.asarray(sel, bool)], 0) for sel in frames.values()])


def _force_errors(F_sum, F_ref, frames):
    got, ref = np.asarray(_phase_means(F_sum, frames)), np.asarray(_phase_means(F_ref, frames))
    out = {}
    for k, name in enumerate(frames):
        n = max(abs(ref[k, 2]), 1e-12)
        out[name] = {
            "normal": float(abs(got[k, 2] - ref[k, 2]) / n),
            "tangential": float(np.linalg.norm(got[k, :2] - ref[k, :2]) / n),
        }
    return out


def fit_taxel_forces(sensor, scene, m, traj, F_pad, frames: dict, steps: int = 300):
    """Fit a KinematicTaxel's ``normal_stiffness`` and ``shear_scalar`` so that its summed
    taxel force matches MJX's contact force on the pad, ``F_pad [T, 3]`` (world; the force
    the touching body exerts on the sensor link, e.g. ``-contact_force_on(m, traj, probe)``),
    with :func:`difftaxel.calibrate.fit` (log parameters).

    MuJoCo's soft contact and the taxels' spring-damper are different models: the spring's
    stiffness sets the summed normal force for MuJoCo's penetration, the viscous shear gain
    the tangential one. ``frames`` names boolean ``[T]`` phases (e.g. ``{"rest": ...,
    "sliding": ...}``); the fit and the report compare each phase's **mean** force (with
    ``iterations="1"`` MJX resolves sliding friction with frame-to-frame chatter that a
    spring-damper does not have). The report is the error of the normal and of the
    tangential mean force, both relative to the phase's mean normal force. The sensor link
    must be static and aligned with the world (forces compared in the world frame).
    """
    from .calibrate import fit

    F_ref = jnp.asarray(F_pad)
    target = _phase_means(F_ref, frames)
    scale = float(jnp.abs(target).max()) or 1.0

    def summed(k, c):
        s = sensor.replace(normal_stiffness=k, shear_scalar=c)
        F = taxel_forces_over(s, scene, m, traj)
        return F.reshape(F.shape[0], -1, 3).sum(1)

    def loss(p, _):
        return jnp.mean((_phase_means(summed(p["k"], p["c"]), frames) - target) ** 2) / scale**2

    k0 = float(jnp.mean(jnp.asarray(sensor.normal_stiffness)))
    c0 = max(float(jnp.mean(jnp.asarray(sensor.shear_scalar))), 1e-3)
    before = _force_errors(summed(k0, c0), F_ref, frames)
    r = fit(
        loss,
        {"k": jnp.asarray(k0), "c": jnp.asarray(c0)},
        steps=steps,
        learning_rate=0.05,
        transforms={"k": "log", "c": "log"},
    )
    k, c = float(r.params["k"]), float(r.params["c"])
    after = _force_errors(summed(k, c), F_ref, frames)
    return ForceMatch(sensor.replace(normal_stiffness=k, shear_scalar=c), k, c, before, after)


__all__ += ["trajectory", "contact_force_on", "taxel_forces_over", "ForceMatch", "fit_taxel_forces"]
