"""MuJoCo's signed distances of a point to a primitive geom (``engine_collision_sdf.c``,
``geomDistance``), in JAX, for the ``<tactile>`` sensor (:mod:`difftaxel.mjx.tactile`).

They are MuJoCo's formulas, not exact distances everywhere: the box's inside is a field that
turns from radial to the face normals, and the ellipsoid is ``k0 (k0 - 1) / k1``. Norms are
guarded (``safe_norm``), so gradients stay finite at a centre or on an axis.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco

Array = jax.Array

__all__ = ["mujoco_distance", "mujoco_distance_xyz", "SDF_TYPES"]

_GT = mujoco.mjtGeom


def _norm(*c):
    """Euclidean norm of the components ``c`` (gradient 0, not NaN, at the zero vector)."""
    sq = sum(v * v for v in c)
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def _box(x, y, z, sx, sy, sz):
    """MuJoCo's box distance: exact outside; inside, the distance along a unit field that
    turns from radial to the face normals (``radialField3d``)."""
    a = (jnp.abs(x) - sx, jnp.abs(y) - sy, jnp.abs(z) - sz)
    outside = (a[0] >= 0) | (a[1] >= 0) | (a[2] >= 0)
    d_out = _norm(*(jnp.maximum(v, 0.0) for v in a)) + jnp.minimum(
        jnp.maximum(jnp.maximum(a[0], a[1]), a[2]), 0.0
    )
    a_in = [jnp.where(outside, -1.0, v) for v in a]  # strictly negative inside
    field = [-h / v for h, v in zip((sx, sy, sz), a_in)]
    n = _norm(*field)
    field = [f / n for f in field]
    t = jnp.minimum(
        jnp.minimum(-a_in[0] / jnp.abs(field[0]), -a_in[1] / jnp.abs(field[1])),
        -a_in[2] / jnp.abs(field[2]),
    )
    d_in = -t * _norm(*field)
    return jnp.where(outside, d_out, d_in)


def _ellipsoid(x, y, z, sx, sy, sz):
    a = (x / sx, y / sy, z / sz)
    k0, k1 = _norm(*a), _norm(a[0] / sx, a[1] / sy, a[2] / sz)
    return k0 * (k0 - 1.0) / jnp.where(k1 > 0, k1, 1.0)


def _cylinder(x, y, z, sx, sy, sz):
    a0, a1 = _norm(x, y) - sx, jnp.abs(z) - sy
    return jnp.minimum(jnp.maximum(a0, a1), 0.0) + _norm(jnp.maximum(a0, 0.0), jnp.maximum(a1, 0.0))


def _capsule(x, y, z, sx, sy, sz):
    return _norm(x, y, z - jnp.clip(z, -sy, sy)) - sx


# Why components, not [..., 3] vectors: XLA's CPU backend vectorizes poorly over a minor axis
# of 3 under vmap; written per component, MuJoCo's box distance of 1,470 points costs about a
# tenth as much.
_DISTANCE = {
    int(_GT.mjGEOM_PLANE): lambda x, y, z, *size: z,
    int(_GT.mjGEOM_SPHERE): lambda x, y, z, sx, sy, sz: _norm(x, y, z) - sx,
    int(_GT.mjGEOM_CAPSULE): _capsule,
    int(_GT.mjGEOM_ELLIPSOID): _ellipsoid,
    int(_GT.mjGEOM_CYLINDER): _cylinder,
    int(_GT.mjGEOM_BOX): _box,
}


def mujoco_distance_xyz(geom_type: int, x, y, z, sx, sy, sz) -> Array:
    """:func:`mujoco_distance` on components: points ``(x, y, z)`` (each ``[...]``, m) in a
    geom's frame, half-sizes ``(sx, sy, sz)`` broadcasting with them."""
    return _DISTANCE[int(geom_type)](x, y, z, sx, sy, sz)


def mujoco_distance(geom_type: int, x_local: Array, size: Array) -> Array:
    """MuJoCo's signed distance ``[...]`` (m) of points ``x_local [..., 3]`` in a geom's frame,
    for ``geom_type`` (an ``mjtGeom``), with MuJoCo's half-sizes ``size [..., 3]``."""
    return mujoco_distance_xyz(
        geom_type, *(x_local[..., i] for i in range(3)), *(size[..., i] for i in range(3))
    )


#: geom types with a signed distance here
SDF_TYPES = tuple(sorted(_DISTANCE))
