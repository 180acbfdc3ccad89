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

from .._numerics import safe_norm

Array = jax.Array

__all__ = ["mujoco_distance", "SDF_TYPES"]

_GT = mujoco.mjtGeom


def _box(x, size):
    """MuJoCo's box distance: exact outside; inside, the distance along a unit field that
    turns from radial to the face normals (``radialField3d``)."""
    a = jnp.abs(x) - size
    outside = jnp.any(a >= 0, -1)
    d_out = safe_norm(jnp.maximum(a, 0.0)) + jnp.minimum(jnp.max(a, -1), 0.0)
    a_in = jnp.where(outside[..., None], -1.0, a)  # strictly negative inside
    field = -size / a_in
    field = field / safe_norm(field, keepdims=True)
    t = -a_in / jnp.abs(field)
    d_in = -jnp.min(t, -1) * safe_norm(field)
    return jnp.where(outside, d_out, d_in)


def _ellipsoid(x, size):
    a = x / size
    b = a / size
    k0, k1 = safe_norm(a), safe_norm(b)
    return k0 * (k0 - 1.0) / jnp.where(k1 > 0, k1, 1.0)


def _cylinder(x, size):
    a = jnp.stack([safe_norm(x[..., :2]) - size[..., 0], jnp.abs(x[..., 2]) - size[..., 1]], -1)
    return jnp.minimum(jnp.max(a, -1), 0.0) + safe_norm(jnp.maximum(a, 0.0))


def _capsule(x, size):
    z = x[..., 2] - jnp.clip(x[..., 2], -size[..., 1], size[..., 1])
    return safe_norm(jnp.stack([x[..., 0], x[..., 1], z], -1)) - size[..., 0]


_DISTANCE = {
    int(_GT.mjGEOM_PLANE): lambda x, size: x[..., 2],
    int(_GT.mjGEOM_SPHERE): lambda x, size: safe_norm(x) - size[..., 0],
    int(_GT.mjGEOM_CAPSULE): _capsule,
    int(_GT.mjGEOM_ELLIPSOID): _ellipsoid,
    int(_GT.mjGEOM_CYLINDER): _cylinder,
    int(_GT.mjGEOM_BOX): _box,
}


def mujoco_distance(geom_type: int, x_local: Array, size: Array) -> Array:
    """MuJoCo's signed distance ``[...]`` (m) of points ``x_local [..., 3]`` in a geom's frame,
    for ``geom_type`` (an ``mjtGeom``), with MuJoCo's half-sizes ``size [..., 3]``."""
    return _DISTANCE[int(geom_type)](x_local, size)


#: geom types with a signed distance here
SDF_TYPES = tuple(sorted(_DISTANCE))
