"""Analytic signed-distance shapes.

Every shape is an immutable pytree (``jax.tree_util.register_dataclass``): its size parameters
and its pose on the owning body, ``T_body_shape [7]`` (position m, quaternion x, y, z, w), are
float leaves (differentiable); the index ``body`` of the owning body in :class:`~difftaxel.
geometry.Bodies` is static.

``shape.sdf_local(p)`` takes query points ``p [..., 3]`` in the **shape frame** (m) and returns
``(sd [...], normal [..., 3])``: the exact signed distance (m, negative inside) and the unit
outward normal (the normalised gradient of ``sd`` wherever it is differentiable). Where the
gradient is undefined (a sphere's centre, a box's medial planes) the normal of one adjacent
region is returned (the zero vector at a sphere's centre, as in Genesis).

``shape.sdf_local_xyz(x, y, z)`` is the same query on coordinate planes: ``x, y, z [...]``
(shape frame, m) in, ``(sd [...], (nx, ny, nz))`` out. The analytic shapes implement their
formula once, in this form (``sdf_local`` stacks its normal); the sensors' hot path uses it
because XLA's CPU backend vectorises a trailing axis of size 3 poorly (one ``[..., 3]`` array
costs about as much as three planes, but every reduction over it is a separate shuffle).
:func:`sdf_local_xyz` gives the planar form of any shape (stacking for the grid and mesh).

Sign convention: ``sd > 0`` outside, ``< 0`` inside, 0 on the surface.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import eps as _eps
from .._numerics import first_argmax, safe_norm, safe_normalize
from .._pytree import pytree_dataclass, static_field
from .._validate import check_last_dim, check_pose, check_positive

Array = jax.Array

__all__ = [
    "Shape",
    "Sphere",
    "Plane",
    "Box",
    "Capsule",
    "Cylinder",
    "ConvexHull",
    "sdf_local_xyz",
]


def _identity_pose():
    return np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])


def _as_float(x):
    if isinstance(x, jax.core.Tracer):
        return x
    return jnp.asarray(x, dtype=jnp.result_type(float))


def _check_common(obj) -> None:
    check_pose(obj.T_body_shape, f"{type(obj).__name__}.T_body_shape")
    if not isinstance(obj.body, (int, np.integer)) or obj.body < 0:
        raise ValueError(f"{type(obj).__name__}.body: expected an int >= 0, got {obj.body!r}")


def _sign_nonzero(x: Array) -> Array:
    return jnp.where(x >= 0, 1.0, -1.0).astype(x.dtype)


def _norm3(x, y, z):
    """``|(x, y, z)|`` on planes, gradient 0 (not NaN) at the origin."""
    sq = x * x + y * y + z * z
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def _unit_or(d, comps, fallback):
    """``comps / d`` where ``d > 0``, else the unit vector ``fallback`` (a direction defined
    where the gradient of the distance is not: a sphere's centre, a capsule's or cylinder's
    axis). Double ``where``: value and gradient finite at ``d == 0``."""
    ok = d > 0
    inv = 1.0 / jnp.where(ok, d, 1.0)  # 1 at d == 0, where every component is 0
    off = 1.0 - ok.astype(d.dtype)
    return tuple(c * inv + off * f if f else c * inv for c, f in zip(comps, fallback))


def _stacked(xyz_fn, p):
    sd, n = xyz_fn(p[..., 0], p[..., 1], p[..., 2])
    return sd, jnp.stack(n, axis=-1)


def sdf_local_xyz(shape, x: Array, y: Array, z: Array):
    """``(sd [...], (nx, ny, nz))`` of ``shape`` at shape-frame points given as planes ``[...]``.

    The analytic shapes answer on planes directly; any other shape (``GridSDF``,
    ``TriangleMesh``) through its ``sdf_local`` on stacked points.
    """
    f = getattr(shape, "sdf_local_xyz", None)
    if f is not None:
        return f(x, y, z)
    sd, n = shape.sdf_local(jnp.stack([x, y, z], axis=-1))
    return sd, (n[..., 0], n[..., 1], n[..., 2])


class Shape:
    """Base class of the analytic shapes (documentation and ``isinstance`` only)."""

    T_body_shape: Array
    body: int

    def sdf_local(self, p: Array) -> tuple[Array, Array]:  # pragma: no cover - interface
        raise NotImplementedError

    def aabb_local(self):  # pragma: no cover - interface
        """``(lo [3], hi [3])``: the shape's box in its own frame (m); traceable."""
        raise NotImplementedError


@pytree_dataclass
class Sphere(Shape):
    """Sphere of ``radius`` (m) centred at the shape origin.

    ``sd = |p| - radius``; normal ``p / |p|``, and ``+z`` (of the frame the point is given in) at
    the centre, where the
    direction is undefined (Genesis returns the zero vector there, so a probe at the exact centre
    reads no force; here it is pushed along ``+z``).
    """

    radius: Array = 0.01
    T_body_shape: Array = dataclasses.field(default_factory=_identity_pose)
    body: int = static_field(0)

    def __post_init__(self):
        object.__setattr__(self, "radius", _as_float(self.radius))
        object.__setattr__(self, "T_body_shape", _as_float(self.T_body_shape))
        check_positive(self.radius, "Sphere.radius")
        _check_common(self)

    def sdf_local(self, p):
        return _stacked(self.sdf_local_xyz, p)

    def sdf_local_xyz(self, x, y, z):
        d = _norm3(x, y, z)
        return d - self.radius.astype(x.dtype), _unit_or(d, (x, y, z), (0.0, 0.0, 1.0))

    def aabb_local(self):
        r = jnp.broadcast_to(jnp.asarray(self.radius), (3,))
        return -r, r


@pytree_dataclass
class Plane(Shape):
    """Infinite half-space ``{p : normal . p <= 0}`` through the shape origin.

    ``normal [3]`` (unit after construction) points out of the solid; ``sd = normal . p``.
    Unlike Genesis's raycast slab, the half-space has no bottom.
    """

    normal: Array = dataclasses.field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))
    T_body_shape: Array = dataclasses.field(default_factory=_identity_pose)
    body: int = static_field(0)

    def __post_init__(self):
        n = _as_float(self.normal)
        check_last_dim(n, 3, "Plane.normal")
        if not isinstance(n, jax.core.Tracer):
            nn = float(np.linalg.norm(np.asarray(n)))
            if not np.isfinite(nn) or nn < 1e-12:
                raise ValueError(f"Plane.normal: expected a non-zero vector, got {np.asarray(n)}")
            n = n / nn
        object.__setattr__(self, "normal", n)
        object.__setattr__(self, "T_body_shape", _as_float(self.T_body_shape))
        _check_common(self)

    def sdf_local(self, p):
        return _stacked(self.sdf_local_xyz, p)

    def sdf_local_xyz(self, x, y, z):
        n = self.normal.astype(x.dtype)
        sd = n[0] * x + n[1] * y + n[2] * z
        return sd, tuple(jnp.broadcast_to(n[i], sd.shape) for i in range(3))

    def aabb_local(self):
        return -jnp.full(3, jnp.inf), jnp.full(3, jnp.inf)


@pytree_dataclass
class Box(Shape):
    """Box of full edge lengths ``size [3]`` (m) centred at the shape origin, axis-aligned.

    Exact SDF: ``|max(q, 0)| + min(max_k q_k, 0)`` with ``q = |p| - size/2``.
    Inside, the normal is that of the nearest face (ties: lowest axis index).
    """

    size: Array = dataclasses.field(default_factory=lambda: np.array([0.1, 0.1, 0.1]))
    T_body_shape: Array = dataclasses.field(default_factory=_identity_pose)
    body: int = static_field(0)

    def __post_init__(self):
        s = _as_float(self.size)
        check_last_dim(s, 3, "Box.size")
        check_positive(s, "Box.size")
        object.__setattr__(self, "size", s)
        object.__setattr__(self, "T_body_shape", _as_float(self.T_body_shape))
        _check_common(self)

    def sdf_local(self, p):
        return _stacked(self.sdf_local_xyz, p)

    def sdf_local_xyz(self, x, y, z, keep=None):
        """Signed distance ``sd [...]`` (m, negative inside) and unit outward normal ``(nx, ny,
        nz)`` (three ``[...]`` planes, box frame) at box-frame points ``x, y, z`` (``[...]``
        planes, m). Outside, the normal is the clamped offset over the distance; inside, the
        nearest face's (ties: the lowest axis). ``keep`` (optional) maps the distance before
        the normal reads it and must return the same values, e.g. the distance stored once
        (:func:`~difftaxel._numerics.compute_once`) so that no normal component recomputes
        it (why: a norm and a square root per component)."""
        h = 0.5 * self.size.astype(x.dtype)
        p = (x, y, z)
        sgn = [_sign_nonzero(c) for c in p]
        q = [jnp.abs(c) - h[i] for i, c in enumerate(p)]
        qo = [jnp.maximum(c, 0.0) for c in q]
        outside_d = _norm3(*qo)
        qmax = jnp.maximum(jnp.maximum(q[0], q[1]), q[2])
        sd = outside_d + jnp.minimum(qmax, 0.0)
        # nearest face inside; ties go to the lowest axis (argmax's rule)
        kx = (q[0] >= q[1]) & (q[0] >= q[2])
        ky = ~kx & (q[1] >= q[2])
        kz = ~kx & ~ky
        if keep is not None:
            sd = keep(sd)
        # outside (qmax > 0), sd is the outside distance exactly (its min term is 0)
        inv = 1.0 / jnp.maximum(sd, _eps(x.dtype))
        outside = qmax > 0
        zero = jnp.zeros((), x.dtype)
        n = tuple(
            jnp.where(outside, qo[i] * sgn[i] * inv, jnp.where(k, sgn[i], zero))
            for i, k in enumerate((kx, ky, kz))
        )
        return sd, n

    def aabb_local(self):
        h = 0.5 * jnp.asarray(self.size)
        return -h, h


@pytree_dataclass
class Capsule(Shape):
    """Capsule: points within ``radius`` (m) of the segment ``z in [-length/2, length/2]``.

    ``length`` (m) is the length of the axis segment (total extent ``length + 2 radius``).
    """

    radius: Array = 0.01
    length: Array = 0.05
    T_body_shape: Array = dataclasses.field(default_factory=_identity_pose)
    body: int = static_field(0)

    def __post_init__(self):
        object.__setattr__(self, "radius", _as_float(self.radius))
        object.__setattr__(self, "length", _as_float(self.length))
        check_positive(self.radius, "Capsule.radius")
        check_positive(self.length, "Capsule.length", allow_zero=True)
        object.__setattr__(self, "T_body_shape", _as_float(self.T_body_shape))
        _check_common(self)

    def sdf_local(self, p):
        return _stacked(self.sdf_local_xyz, p)

    def sdf_local_xyz(self, x, y, z):
        hl = 0.5 * self.length.astype(x.dtype)
        dz = z - jnp.clip(z, -hl, hl)
        d = _norm3(x, y, dz)
        # on the axis segment the direction is undefined: +x (shape frame)
        return d - self.radius.astype(x.dtype), _unit_or(d, (x, y, dz), (1.0, 0.0, 0.0))

    def aabb_local(self):
        r, hl = jnp.asarray(self.radius), 0.5 * jnp.asarray(self.length)
        e = jnp.stack([r, r, r + hl])
        return -e, e


@pytree_dataclass
class Cylinder(Shape):
    """Solid cylinder of ``radius`` (m) and ``height`` (m) along the shape's z axis, centred."""

    radius: Array = 0.01
    height: Array = 0.05
    T_body_shape: Array = dataclasses.field(default_factory=_identity_pose)
    body: int = static_field(0)

    def __post_init__(self):
        object.__setattr__(self, "radius", _as_float(self.radius))
        object.__setattr__(self, "height", _as_float(self.height))
        check_positive(self.radius, "Cylinder.radius")
        check_positive(self.height, "Cylinder.height")
        object.__setattr__(self, "T_body_shape", _as_float(self.T_body_shape))
        _check_common(self)

    def sdf_local(self, p):
        pxy = p[..., :2]
        rho = safe_norm(pxy)
        dr = rho - self.radius
        dz = jnp.abs(p[..., 2]) - 0.5 * self.height
        dro, dzo = jnp.maximum(dr, 0.0), jnp.maximum(dz, 0.0)
        sd = safe_norm(jnp.stack([dro, dzo], -1)) + jnp.minimum(jnp.maximum(dr, dz), 0.0)
        rhat = jnp.stack(
            _unit_or(rho, (pxy[..., 0], pxy[..., 1]), (1.0, 0.0)), -1
        )  # +x on the axis
        zero = jnp.zeros_like(dr)
        sz = _sign_nonzero(p[..., 2])
        radial = jnp.concatenate([rhat, zero[..., None]], -1)
        axial = jnp.stack([zero, zero, sz], -1)
        n_out = safe_normalize(dro[..., None] * radial + dzo[..., None] * axial)
        n_in = jnp.where((dr >= dz)[..., None], radial, axial)
        outside = ((dr > 0) | (dz > 0))[..., None]
        return sd, jnp.where(outside, n_out, n_in)

    def aabb_local(self):
        r, hh = jnp.asarray(self.radius), 0.5 * jnp.asarray(self.height)
        e = jnp.stack([r, r, hh])
        return -e, e


@pytree_dataclass
class ConvexHull(Shape):
    """Convex polytope: the intersection of the half-spaces ``normals[f] . p <= offsets[f]``.

    The hull MuJoCo collides a mesh geom with. ``sd = max_f (normals[f] . p - offsets[f])``:
    exact inside (the penetration depth) and in front of a face; outside, near an edge or a
    vertex, a lower bound of the distance (the contact models only need the inside). The normal
    is the face attaining the max (ties: the lowest face index).

    Attributes:
      normals: ``[F, 3]`` unit outward face normals (shape frame).
      offsets: ``[F]`` m, ``normals[f] . x`` for any point ``x`` on face ``f``.
      vertices: ``[V, 3]`` m, the hull's vertices (for its box and for drawing).

    Build it from points with :meth:`from_points`.
    """

    normals: Array = None
    offsets: Array = None
    vertices: Array = None
    T_body_shape: Array = dataclasses.field(default_factory=_identity_pose)
    body: int = static_field(0)

    def __post_init__(self):
        n, d, v = (_as_float(a) for a in (self.normals, self.offsets, self.vertices))
        check_last_dim(n, 3, "ConvexHull.normals")
        check_last_dim(v, 3, "ConvexHull.vertices")
        if np.shape(d) != np.shape(n)[:1] or np.shape(n)[0] < 4:
            raise ValueError(
                f"ConvexHull.offsets: expected [F] with F >= 4 faces like normals "
                f"{np.shape(n)}, got {np.shape(d)}"
            )
        for name, a in (("normals", n), ("offsets", d), ("vertices", v)):
            if not isinstance(a, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(a))):
                raise ValueError(f"ConvexHull.{name}: non-finite values")
        object.__setattr__(self, "normals", n)
        object.__setattr__(self, "offsets", d)
        object.__setattr__(self, "vertices", v)
        object.__setattr__(self, "T_body_shape", _as_float(self.T_body_shape))
        _check_common(self)

    @classmethod
    def from_points(cls, points, *, T_body_shape=None, body: int = 0, decimals: int = 9):
        """The convex hull of ``points [V, 3]`` (m; at least 4, not coplanar), coplanar
        triangles merged into one face plane (planes equal to ``decimals``)."""
        import trimesh

        pts = np.asarray(points, float)
        if pts.ndim != 2 or pts.shape[1] != 3 or pts.shape[0] < 4:
            raise ValueError(f"points: expected [V, 3] with V >= 4, got {pts.shape}")
        try:
            hull = trimesh.convex.convex_hull(pts)
        except Exception as e:  # qhull's own error types
            raise ValueError(f"points: no 3-d convex hull ({e})") from None
        if hull.volume <= 0:
            raise ValueError("points: the hull is flat (coplanar points)")
        nrm = np.asarray(hull.face_normals)
        off = np.sum(nrm * hull.vertices[hull.faces[:, 0]], 1)
        planes = np.unique(np.round(np.c_[nrm, off], decimals), axis=0)
        return cls(
            normals=planes[:, :3] / np.linalg.norm(planes[:, :3], axis=1, keepdims=True),
            offsets=planes[:, 3],
            vertices=np.asarray(hull.vertices),
            T_body_shape=_identity_pose() if T_body_shape is None else T_body_shape,
            body=body,
        )

    def sdf_local(self, p):
        return _stacked(self.sdf_local_xyz, p)

    def sdf_local_xyz(self, x, y, z):
        n = self.normals.astype(x.dtype)
        d = self.offsets.astype(x.dtype)
        lead = (1,) * x.ndim
        col = lambda a: a.reshape(lead + (-1,))  # noqa: E731
        e = x[..., None] * col(n[:, 0]) + y[..., None] * col(n[:, 1])
        e = e + z[..., None] * col(n[:, 2]) - col(d)
        k = first_argmax(e)
        sd = jnp.max(e, axis=-1)
        return sd, (n[k, 0], n[k, 1], n[k, 2])

    def aabb_local(self):
        v = jnp.asarray(self.vertices)
        return v.min(0), v.max(0)


def shape_sdf_world(shape, T_world_body: Array, p_world: Array) -> tuple[Array, Array]:
    """World signed distance ``[...]`` (m) and unit outward normal ``[..., 3]`` (world) of ``shape``.

    Args:
      shape: any shape with ``sdf_local`` and ``T_body_shape``.
      T_world_body: pose ``[7]`` of the owning body (x, y, z, qx, qy, qz, qw).
      p_world: query points ``[..., 3]`` in the world frame (m).
    """
    T_world_shape = _pose.compose(T_world_body, shape.T_body_shape.astype(T_world_body.dtype))
    p_local = _pose.inverse_apply(T_world_shape, p_world)
    sd, n_local = shape.sdf_local(p_local)
    return sd, _pose.rotate(T_world_shape, n_local)
