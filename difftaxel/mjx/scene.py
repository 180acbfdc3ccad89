"""MuJoCo models mapped to difftaxel bodies; sensor inputs from ``mjx.Data``; rollouts."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco  # the package's __init__ checked the extra is installed
import numpy as np
from mujoco import mjx as _mjx

from .._numerics import cross
from ..geometry import Bodies, Box, Capsule, ConvexHull, Cylinder, Plane, Sphere, TriangleMesh
from ..sensors import SensorInputs

Array = jax.Array

__all__ = [
    "MjxScene",
    "scene_from_model",
    "body_poses_twists",
    "sensor_inputs",
    "contact_mask",
    "check_differentiable",
    "rollout",
    "link_groups",
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
      bodies: :class:`~difftaxel.geometry.Bodies` template: one difftaxel body per MuJoCo
        body, in MuJoCo's order (``B = m.nbody``; a body with no mapped geom carries no
        shape), shapes posed on it by their geom pose (poses filled per step). Why every
        body: each sensor link then reads the step's poses and twists of all bodies as they
        are, computed once, instead of a copy of its own rows.
      body_ids: ``[B]`` int, the MuJoCo body of each difftaxel body (``arange(m.nbody)``).
      geom_ids: ``[S]`` int, the MuJoCo geom of each shape.
      sensor_body: the MuJoCo body carrying the taxels (its geoms are excluded, or kept
        and masked out: ``keep_sensor_body``).
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
    keep_sensor_body: bool = False,
) -> MjxScene:
    """Map the geoms of ``m`` (``mujoco.MjModel``) to difftaxel shapes.

    Args:
      m: the host model (``mujoco.MjModel``).
      sensor_body: name or id of the body carrying the taxels; its geoms are excluded
        (see ``keep_sensor_body``).
      exclude_bodies: names or ids of other bodies to leave out.
      mesh: ``"hull"`` (a :class:`ConvexHull` of each mesh's vertices, as MuJoCo collides) or
        ``"exact"`` (a :class:`TriangleMesh`, much slower).
      include_world: map the world body's geoms (floors, fixed planes).
      collision_only: skip geoms that collide with nothing (``contype == conaffinity == 0``:
        visual meshes).
      keep_sensor_body: map the sensor body's own geoms too; the sensor inputs mask that body
        out, so they never count and the readings are the same. Why: the scenes of several
        sensor links are then one scene, and :func:`rollout` steps such links in one loop
        (the program holds one link's sensing, not one per link).

    Returns an :class:`MjxScene`; geoms of other types are listed in ``unmapped``.
    """
    if not isinstance(m, mujoco.MjModel):
        raise TypeError(f"m: expected a mujoco.MjModel (host model), got {type(m).__name__}")
    if mesh not in ("hull", "exact"):
        raise ValueError(f"mesh: expected 'hull' or 'exact', got {mesh!r}")
    sb = _body_id(m, sensor_body)
    excluded = {_body_id(m, b) for b in exclude_bodies}
    if keep_sensor_body:
        excluded.discard(sb)
    else:
        excluded.add(sb)
    if not include_world:
        excluded.add(0)
    shapes, geom_ids, unmapped = [], [], []
    for g in range(m.ngeom):  # host-side, once per model
        b = int(m.geom_bodyid[g])
        if b in excluded:
            continue
        if collision_only and m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0:
            continue
        t = int(m.geom_type[g])
        s = _shape_of(m, g, b, mesh)
        if s is None:
            unmapped.append((_name(m, mujoco.mjtObj.mjOBJ_GEOM, g), _GT(t).name))
            continue
        shapes.append(s)
        geom_ids.append(g)
    if not shapes:
        raise ValueError("m: no geom outside the sensor body could be mapped")
    body_ids = np.arange(m.nbody, dtype=np.int32)
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
    origin, then angular velocity; world) of MuJoCo bodies ``ids [B]`` from ``mjx.Data``
    (``ids=None``: every body, ``B = nbody``, no gather); ``root_ids [B]`` are their
    ``m.body_rootid`` (``cvel`` is about ``subtree_com`` of the root:
    ``v_origin = v_com + w x (xpos - subtree_com[root])``)."""
    rows = (lambda a: a) if ids is None else (lambda a: a[jnp.asarray(ids)])  # noqa: E731
    xpos, q, cvel = rows(d.xpos), rows(d.xquat), rows(d.cvel)
    poses = jnp.concatenate([xpos, q[..., 1:], q[..., :1]], -1)
    w, v_com = cvel[..., :3], cvel[..., 3:]
    v = v_com + cross(w, xpos - d.subtree_com[jnp.asarray(root_ids)])
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


def _inputs(d, sc, root, dt, gated, every=None):
    """The :class:`SensorInputs` of scene ``sc``; ``every``: :func:`_every_body` of ``d``
    (computed here if None). The sensor body is masked out (its geoms, if the scene keeps
    them, never count); ``sc.sensor_body`` and ``sc.sensor_geoms`` may be traced."""
    poses, twists = _every_body(d, root) if every is None else every
    mask = jnp.arange(sc.body_ids.size) != sc.sensor_body
    if gated:
        mask = mask & contact_mask(sc, d)
    return SensorInputs(
        T_world_link=poses[sc.sensor_body],
        twist_link=twists[sc.sensor_body],
        bodies=sc.bodies.with_state(poses, twists),
        body_mask=mask,
        dt=jnp.asarray(dt, poses.dtype),
    )


def _every_body(d, root) -> tuple[Array, Array]:
    """:func:`body_poses_twists` of every MuJoCo body, computed once per step for all sensor
    links (``root``: ``m.body_rootid``)."""
    return body_poses_twists(d, None, root)


def _link_key(sensor, state, sc):
    """What links stepped in one loop share: the sensor's and the state's structure (static
    options included), their leaves' shapes and dtypes, and the scene's shapes."""

    def struct(tree):
        leaves, td = jax.tree.flatten(tree)
        return td, tuple((np.shape(x), jnp.result_type(x)) for x in leaves)

    shapes = jax.tree.leaves(sc.bodies.shapes)
    scene = (
        jax.tree.structure(sc.bodies.shapes),
        sc.body_ids.size,
        tuple(np.asarray(sc.geom_ids).tolist()),
        tuple(np.asarray(x).tobytes() for x in shapes),
    )
    return struct(sensor), struct(state), scene


def link_groups(sensors, scenes, states) -> tuple:
    """Static groups of sensor links that :func:`rollout` (``link_loops``) may step in one loop.

    Args:
      sensors, scenes, states: one per link: the probe sensors, their
        :func:`scene_from_model` maps (host data) and their states.

    Returns a tuple of tuples of link indices, in order of first appearance: links whose
    sensors and states have the same structure (static options; leaf shapes and dtypes) and
    whose scenes hold the same shapes (built with ``keep_sensor_body=True``, or sensing only
    bodies that carry no taxels). A link alike no other is a group of one."""
    keys, groups = [], []
    for i, (s, st, sc) in enumerate(zip(sensors, states, scenes, strict=True)):
        k = _link_key(s, st, sc)
        for j, other in enumerate(keys):
            if other == k:
                groups[j].append(i)
                break
        else:
            keys.append(k)
            groups.append([i])
    return tuple(tuple(g) for g in groups)


def _loops(n: int, loops: int | None) -> int:
    """Loops for a group of ``n`` alike links (``None``: one per link)."""
    if loops is None:
        return n
    if isinstance(loops, bool) or not isinstance(loops, (int, np.integer)) or loops < 1:
        raise ValueError(f"link_loops: expected None or an int >= 1, got {loops!r}")
    return min(n, int(loops))


def _stack(trees):
    return jax.tree.map(lambda *x: jnp.stack([jnp.asarray(v) for v in x]), *trees)


def _unstack(tree, n, axis=0):
    return tuple(jax.tree.map(lambda x, i=i: jnp.take(x, i, axis=axis), tree) for i in range(n))


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
    link_loops: int | None = None,
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
      link_loops: step the links of each group (:func:`link_groups`) in at most this many
        ``lax.map`` loops (static int >= 1), or each link in its own code (None, the default).
        Only the compile time and the speed depend on it: one loop holds one link's sensing
        in the program, not one per link.

    Returns ``(final mjx.Data, final sensor state(s), readings over [T])`` (tuples when tuples
    were given). ``jax.vmap`` it over environments (``d0``, ``controls``, ``key``).

    ``link_loops=1`` and the whole Shadow Hand (21 links, :func:`load_shadow_hand` builds
    their scenes with ``keep_sensor_body``): its sensing compiles about ten times faster, and
    runs as fast on one CPU core but about 1.4 times slower on two, where XLA's CPU runtime
    runs the links of an unrolled program side by side (not the iterations of a loop).
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
    groups = tuple(  # each chunk of a group: one loop (a chunk of one: that link's own code)
        tuple(int(i) for i in chunk)
        for g in link_groups(sensors, scenes, state)
        for chunk in np.array_split(np.asarray(g), _loops(len(g), link_loops))
    )
    # per group: the links' sensors stacked, their sensor bodies and (padded) geoms
    stacked = []
    for g in groups:
        if len(g) == 1:
            stacked.append(None)
            continue
        n_geoms = max(len(scenes[i].sensor_geoms) for i in g)
        geoms = np.full((len(g), n_geoms), -1, np.int32)  # -1: no geom
        for r, i in enumerate(g):
            geoms[r, : len(scenes[i].sensor_geoms)] = scenes[i].sensor_geoms
        bodies = np.array([scenes[i].sensor_body for i in g], np.int32)
        stacked.append((_stack([sensors[i] for i in g]), bodies, geoms))

    def step(carry, xs):
        d, states = carry
        u, k = xs
        d = _mjx.step(mx, d.replace(ctrl=u))
        new, reads = [], []
        every = _every_body(d, root)
        for g, st, grp in zip(groups, states, stacked, strict=True):  # a few groups, static
            if grp is None:
                inputs = _inputs(d, scenes[g[0]], root, dt, gated, every)
                st, r = sensors[g[0]].step(st, inputs, None if k is None else k[g[0]])
            else:  # links alike: one loop over them, one link's program (not one per link)
                sc = scenes[g[0]]

                def one(a, sc=sc, d=d, every=every, i=g[0]):
                    s, st_i, b, geoms, k_i = a
                    inputs = _inputs(
                        d, sc._replace(sensor_body=b, sensor_geoms=geoms), root, dt, gated, every
                    )
                    return s.step(st_i, inputs, k_i)

                kg = None if k is None else k[np.asarray(g)]
                st, r = jax.lax.map(one, (grp[0], st, grp[1], grp[2], kg))
            new.append(st)
            reads.append(r)
        return (d, tuple(new)), tuple(reads)

    state0 = tuple(state[g[0]] if len(g) == 1 else _stack([state[i] for i in g]) for g in groups)
    (d, gstates), greads = jax.lax.scan(step, (d0, state0), (controls, keys))
    states, readings = [None] * len(sensors), [None] * len(sensors)
    for g, st, r in zip(groups, gstates, greads, strict=True):
        sts = (st,) if len(g) == 1 else _unstack(st, len(g))
        rs = (r,) if len(g) == 1 else _unstack(r, len(g), axis=1)  # [T, links, ...]
        for j, i in enumerate(g):
            states[i], readings[i] = sts[j], rs[j]
    states, readings = tuple(states), tuple(readings)
    if not many:
        return d, states[0], readings[0]
    return d, states, readings
