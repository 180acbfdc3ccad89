"""Which (sensor, geom) pairs a ``<tactile>`` reading evaluates, and their values.

A tactile sensor reads the geoms in MuJoCo's contact list that touch its weld body (see
:mod:`difftaxel.mjx.tactile`). Two passes give the same readings:

* ``"pairs"``: every (sensor, geom) pair MJX could ever collide, each evaluated at the
  sensor's taxels and then gated by the contact list (``P x N`` distances and velocities, ``P``
  fixed by the model). Pairs of one geom type are one batch, so each distance is one formula.
* ``"contacts"``: only the entries of the contact list. Each contact slot ``k`` has two sides;
  on each, every sensor on the weld body of one geom reads the other geom. So ``W = 2 K B``
  items (``K`` contact slots, ``B`` the most sensors on one weld body), each a geom whose type
  is known only at run time: its distance is every sensed type's formula, selected. A geom
  listed twice for one sensor (two contact points, or two geoms of the sensor's body) is read
  once, as MuJoCo reads it: by the first of its items, with the largest of their gates.
  ``K`` is MJX's contact capacity, fixed by the model (with ``max_contact_points`` a few per
  condim), so there is nothing to guess and nothing to overflow.

``"auto"`` (the default) takes ``"contacts"`` when its items times the sensed types are fewer
than the pairs: the Shadow Hand's 21 plates (``max_contact_points = 15``) evaluate 30 items
instead of 338 pairs. Both are plain JAX: values and derivatives of the two passes are equal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco

from .._numerics import smooth_relu
from .mujoco_sdf import mujoco_distance_xyz

Array = jax.Array

__all__ = ["VISITS", "choose_visit", "taxel_frames", "pairs_pass", "contacts_pass", "combine"]

_MESH = int(mujoco.mjtGeom.mjGEOM_MESH)

#: the ways of choosing what a reading evaluates
VISITS = ("auto", "pairs", "contacts")


def _rows(c, i):
    """Rows ``i`` of every array of the (nested) tuple ``c``."""
    return jax.tree.map(lambda v: v[i], c)


def _velocity(d, body, root, x):
    """Linear velocity (world, components ``[W, N]``) of body ``body [W]``'s material points
    at ``x`` (components ``[W, N]``): ``v + w x (x - subtree_com[root])``."""
    cvel = d.cvel[body]  # [W, 6]: angular, then linear (about the root's subtree_com)
    com = d.subtree_com[root]
    w = [cvel[:, i, None] for i in range(3)]
    r = [x[i] - com[:, i, None] for i in range(3)]
    return (
        cvel[:, 3, None] + w[1] * r[2] - w[2] * r[1],
        cvel[:, 4, None] + w[2] * r[0] - w[0] * r[2],
        cvel[:, 5, None] + w[0] * r[1] - w[1] * r[0],
    )


def taxel_frames(tac, d):
    """Every taxel's world position ``x``, velocity ``v`` (its sensor body's) and tangents
    ``(t1, t2)``, each a tuple of components ``[S, N]`` (m, m/s, unit). Why components: XLA's
    CPU backend vectorizes poorly over a trailing axis of 3 under ``vmap``."""
    dtype = d.geom_xpos.dtype
    R = d.geom_xmat[tac.sensor_geom]  # [S, 3, 3]
    p = d.geom_xpos[tac.sensor_geom]

    def turn(local):  # [S, N, 3] in the sensor geom's frame -> world components
        return tuple(sum(R[:, i, j, None] * local[..., j] for j in range(3)) for i in range(3))

    x = tuple(c + p[:, i, None] for i, c in enumerate(turn(tac.vertices.astype(dtype))))
    v = _velocity(d, tac.sensor_weld, tac.sensor_root, x)
    local_tangents = tac.tangents_mujoco if tac.mode == "mujoco" else tac.tangents_local
    t = local_tangents.astype(dtype)
    return x, v, (turn(t[:, :, 0]), turn(t[:, :, 1]))


def _contacts(d):
    impl = getattr(d, "_impl", None)  # MJX 3.17 keeps the contact list there
    return impl.contact if impl is not None and hasattr(impl, "contact") else d.contact


def choose_visit(tac, d) -> str:
    """The pass ``tac.visit`` names, ``"auto"`` resolved by the item counts (static)."""
    if tac.visit != "auto":
        return tac.visit
    n_pairs = sum(int(p.sensor.shape[0]) for p in tac.pairs)
    items = 2 * int(_contacts(d).dist.shape[-1]) * int(tac.weld_sensors.shape[-1])
    return "contacts" if items * len(tac.types) < n_pairs else "pairs"


def _local(d, g, x):
    """Points ``x`` (world components ``[W, N]``) in geom ``g [W]``'s frame:
    ``R^T (x - p)``, as components."""
    R, p = d.geom_xmat[g], d.geom_xpos[g]
    dx = [x[c] - p[:, c, None] for c in range(3)]
    return tuple(sum(dx[c] * R[:, c, i, None] for c in range(3)) for i in range(3))


def _distance(tac, t, local, g, dtype):
    """MuJoCo's signed distance ``[W, N]`` of points ``local`` (components ``[W, N]``) in the
    frames of geoms ``g [W]``, as geoms of type ``t``; a mesh: its convex hull's largest
    face-plane distance (padded faces never win)."""
    if t == _MESH:
        h = tac.geom_hull[g]
        normals, offsets = tac.hull_normals[h].astype(dtype), tac.hull_offsets[h].astype(dtype)
        dots = sum(local[i][..., None] * normals[:, None, :, i] for i in range(3))
        return jnp.max(dots - offsets[:, None], -1)
    size = tac.geom_size[g].astype(dtype)
    return mujoco_distance_xyz(t, *local, *(size[:, i, None] for i in range(3)))


def _values(tac, d, frames, s, g, gate, sd):
    """Gated depth ``[W, N]`` and sliding speeds ``[W, N, 2]`` of items (sensor ``s [W]``,
    geom ``g [W]``) with signed distances ``sd [W, N]`` and gates ``gate [W]``."""
    w = tac.smoothing
    dtype = sd.dtype
    if w > 0:
        pen = smooth_relu(-sd, w)
        touch = jax.nn.sigmoid(-sd / w)
    else:
        pen = jnp.maximum(-sd, 0.0)
        touch = (sd < 0).astype(dtype)
    x, v_s, tang = _rows(frames, s)
    # both bodies' velocities at the taxel (MuJoCo 3.17.0; older sources took the sensed
    # body's at its geom's centre)
    v_o = _velocity(d, tac.geom_body[g], tac.geom_root[g], x)
    dv = [a - b for a, b in zip(v_s, v_o)]
    on = gate[:, None] * touch
    speed = [on * jnp.abs(sum(dv[c] * t[c] for c in range(3))) for t in tang]
    return gate[:, None] * pen, jnp.stack(speed, -1)


def pairs_pass(tac, d, frames):
    """Every candidate pair, gated: ``(depth [P, N], speeds [P, N, 2], sensor [P],
    gate [P])`` (``frames``: :func:`taxel_frames`)."""
    dtype = d.geom_xpos.dtype
    con = _contacts(d)
    g1, g2, dist = con.geom1, con.geom2, con.dist
    margin = con.includemargin  # MuJoCo lists a contact while dist <= margin (gap 0)
    depth, speeds, seg, gates = [], [], [], []
    for t, pr in zip(tac.types, tac.pairs):  # one batched pass per geom type (a few, static)
        s, g = pr.sensor, pr.geom
        ws = tac.sensor_weld[s]
        hits = ((g1[None] == g[:, None]) & (tac.geom_weld[g2][None] == ws[:, None])) | (
            (g2[None] == g[:, None]) & (tac.geom_weld[g1][None] == ws[:, None])
        )  # [P, K]
        if tac.smoothing > 0:
            soft = jax.nn.sigmoid((margin - dist) / tac.smoothing)[None]
            gate = jnp.max(jnp.where(hits, soft, 0.0), -1)
        else:
            gate = jnp.any(hits & (dist <= margin)[None], -1).astype(dtype)
        sd = _distance(tac, t, _local(d, g, _rows(frames[0], s)), g, dtype)
        a, b = _values(tac, d, frames, s, g, gate, sd)
        depth.append(a)
        speeds.append(b)
        seg.append(s)
        gates.append(gate)
    return tuple(jnp.concatenate(z) for z in (depth, speeds, seg, gates))


def contacts_pass(tac, d, frames):
    """The contact list's entries: ``(depth [W, N], speeds [W, N, 2], sensor [W], gate [W])``,
    ``W = 2 K B`` (``frames``: :func:`taxel_frames`); an item that reads nothing (no sensor
    on that side, a geom MuJoCo skips, a repeat) has gate 0 and sensor index 0."""
    dtype = d.geom_xpos.dtype
    S = tac.vertices.shape[0]
    con = _contacts(d)
    if tac.smoothing > 0:
        on = jax.nn.sigmoid((con.includemargin - con.dist) / tac.smoothing)
    else:
        on = (con.dist <= con.includemargin).astype(dtype)  # [K]
    sensed = jnp.stack([con.geom2, con.geom1])  # [2, K]: the geom read on each side
    owner = jnp.stack([con.geom1, con.geom2])  # the geom whose weld body carries the sensors
    s = tac.weld_sensors[tac.geom_weld[owner]]  # [2, K, B]; S where no sensor
    g = jnp.broadcast_to(sensed[..., None], s.shape).reshape(-1)
    s = s.reshape(-1)
    B = tac.weld_sensors.shape[-1]
    gate = jnp.broadcast_to(on[None, :, None], (2, on.shape[0], B)).reshape(-1)
    gate = jnp.where((s < S) & tac.geom_sensed[g], gate, 0.0)
    # one item per (sensor, geom), the first, with the largest of their gates (a max, so that
    # tied gates share its derivative as the pair pass's max does)
    key = s * tac.geom_type.shape[0] + g
    same = key[None] == key[:, None]
    i = jnp.arange(s.size)
    first = ~jnp.any(same & (i[None] < i[:, None]), -1)
    gate = jnp.where(first, jnp.max(jnp.where(same, gate[None], 0.0), -1), 0.0)
    s = jnp.where(s < S, s, 0)
    local = _local(d, g, _rows(frames[0], s))
    gtype = tac.geom_type[g]
    sd = jnp.zeros(local[0].shape, dtype)
    for t in tac.types:  # every sensed type's formula, selected per item (a few, static)
        sd = jnp.where((gtype == t)[:, None], _distance(tac, t, local, g, dtype), sd)
    a, b = _values(tac, d, frames, s, g, gate, sd)
    return a, b, s, gate


def combine(tac, depth, speeds, seg, gate, dtype) -> Array:
    """Per-sensor readings ``[S, 3, N]`` from the items' gated values (``depth``, ``speeds``),
    sensors ``seg [W]`` and gates ``gate [W]``.

    Exact: the largest depth, the summed speeds. Smooth (``w = smoothing > 0``): the depth is a
    softmax-weighted mean over "no geom" (depth 0, weight 1) and the items, each weighted by
    its gate times ``exp(depth / w)``: the largest depth as ``w -> 0``, 0 with nothing listed,
    and a geom that is not in the contact list (gate 0) weighs nothing, so the reading does not
    depend on how many geoms could ever touch.
    """
    S, N = tac.vertices.shape[:2]
    if depth.shape[0] == 0:
        return jnp.zeros((S, 3, N), dtype)
    w = tac.smoothing
    if w > 0:
        z = depth / w
        zmax = jax.lax.stop_gradient(jnp.maximum(jax.ops.segment_max(z, seg, S), 0.0))
        e = gate[:, None] * jnp.exp(z - zmax[seg])
        num = jax.ops.segment_sum(e * depth, seg, S)
        out = num / (jnp.exp(-zmax) + jax.ops.segment_sum(e, seg, S))
    else:
        out = jnp.maximum(jax.ops.segment_max(depth, seg, S), 0.0)
    tangential = jax.ops.segment_sum(speeds, seg, S) * tac.has_frame[:, None, None]
    return jnp.concatenate([out[:, None], jnp.moveaxis(tangential, -1, 1)], 1)
