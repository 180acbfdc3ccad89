"""A set of rigid bodies carrying signed-distance shapes, queried many points at a time."""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import compute_once, cross, first_argmin, runtime_one
from .._pytree import pytree_dataclass
from .._validate import check_finite, check_last_dim, check_pose, check_shape
from .planes import Planes, affine_planes
from .shapes import Box, Sphere, sdf_local_xyz

Array = jax.Array

__all__ = ["Bodies", "ShapeQuery", "point_velocity", "shape_kinds", "shape_rows", "in_shape_order"]

#: Up to this many shapes, per-shape rows are static slices; beyond, one gather.
STATIC_ROWS_MAX = 8


def shape_kinds(shapes) -> list:
    """Shapes grouped by kind (class, static fields other than the owning body, leaf shapes and
    dtypes): ``(indices [G], treedef, stacked leaves, owning bodies [G])`` per kind, in order of first appearance.
    A scene of many shapes of few kinds is then a few batched evaluations (``jax.vmap`` over a
    kind, the shape rebuilt with ``jax.tree.unflatten(treedef, leaves)``): the program, and
    its compile time, do not grow with the number of shapes."""
    groups: dict = {}
    for i, s in enumerate(shapes):
        anon = copy.copy(s)  # the owning body is an index, not a kind: every kind's is 0
        object.__setattr__(anon, "body", 0)
        leaves, treedef = jax.tree.flatten(anon)
        key = (treedef, tuple((np.shape(v), jnp.result_type(v)) for v in leaves))
        groups.setdefault(key, []).append((i, leaves))
    out = []
    for (treedef, _), members in groups.items():
        idx = np.array([i for i, _ in members], dtype=np.int64)
        cols = list(zip(*[lv for _, lv in members]))
        stacked = [jnp.stack([jnp.asarray(v) for v in c]) for c in cols]
        out.append((idx, treedef, stacked, np.array([shapes[i].body for i in idx], np.int64)))
    return out


def shape_rows(x: Array, bodies: np.ndarray) -> Array:
    """Rows ``x[bodies]`` ``[S, ...]`` of a per-body array ``x [B, ...]`` for the static body
    index of each shape: static slices of its runs of consecutive indices, joined, while there
    are at most ``STATIC_ROWS_MAX`` runs; beyond that one gather, so the program does not grow
    with the number of shapes. Why: on the CPU a gather costs about a nanosecond per element
    while slices fuse into their consumers, and a gather's transpose in reverse mode is a
    scatter."""
    b = np.asarray(bodies, np.int64).reshape(-1)
    cuts = np.flatnonzero(np.diff(b) != 1) + 1
    runs = np.split(b, cuts) if b.size else []
    if b.size and len(runs) <= STATIC_ROWS_MAX:
        parts = [x[int(r[0]) : int(r[-1]) + 1] for r in runs]
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)
    return x[jnp.asarray(b)]


def point_velocity(twist: Array, origin: Array, p: Array) -> Array:
    """Velocity ``[..., 3]`` (m/s, world) of the material point at ``p [..., 3]`` (world).

    ``twist [..., 6]`` = (linear velocity of the body frame origin, angular velocity), both in
    the world frame; ``origin [..., 3]`` is the body frame origin (world). ``v + w x (p - o)``.
    """
    return twist[..., :3] + cross(twist[..., 3:], p - origin)


@pytree_dataclass
class ShapeQuery:
    """Per-shape answers of :meth:`Bodies.query` for ``P`` points and ``S`` shapes.

    Attributes:
      sd: ``[S, P]`` signed distances (m; negative inside).
      normal: unit outward normals in the query's frame: ``[S, P, 3]``, or
        :class:`~difftaxel.geometry.Planes` of ``[S, P]`` for a planar query.
      mask: ``[S, P]`` bool, False where the shape's body is masked out (filtered / gated);
        those entries must be ignored (their ``sd`` is set to ``+inf``-like ``1e6``).
    """

    sd: Array
    normal: Array
    mask: Array


@pytree_dataclass
class Bodies:
    """Rigid bodies with poses, twists and attached shapes.

    Attributes:
      shapes: tuple of shapes (``Sphere``, ``Plane``, ``Box``, ``Capsule``, ``Cylinder``,
        ``GridSDF``, ``TriangleMesh``); each names its body by ``shape.body`` (static).
      poses: ``[B, 7]`` body poses ``T_world_body`` (position m, quaternion x, y, z, w).
      twists: ``[B, 6]`` body twists: linear velocity of the body frame origin (m/s) then
        angular velocity (rad/s), both world frame. Defaults to zeros.

    Shapes of one kind (class, static fields, leaf shapes) are one batched evaluation
    (:func:`shape_kinds`), so the program does not grow with the number of shapes; points are
    vectorised. For many environments, ``jax.vmap`` over ``poses``/``twists`` (the shapes can
    be shared with ``in_axes=None`` on their leaves).
    """

    shapes: tuple
    poses: Array
    twists: Array = None

    def __post_init__(self):
        shapes = tuple(self.shapes) if isinstance(self.shapes, (list, tuple)) else (self.shapes,)
        if len(shapes) == 0:
            raise ValueError("Bodies.shapes: expected at least one shape, got none")
        poses = np.asarray(self.poses, dtype=float)
        if poses.ndim == 1:
            poses = poses[None]
        check_shape(poses, (None, 7), "Bodies.poses")
        check_pose(poses, "Bodies.poses")
        B = poses.shape[0]
        tw = np.zeros((B, 6)) if self.twists is None else np.asarray(self.twists, dtype=float)
        if tw.ndim == 1:
            tw = tw[None]
        check_shape(tw, (B, 6), "Bodies.twists")
        check_finite(tw, "Bodies.twists")
        for i, s in enumerate(shapes):
            if not hasattr(s, "sdf_local"):
                raise TypeError(f"Bodies.shapes[{i}]: expected a shape, got {type(s).__name__}")
            if s.body >= B:
                raise ValueError(
                    f"Bodies.shapes[{i}].body: expected an index < {B} (number of poses), "
                    f"got {s.body}"
                )
        dt = jnp.result_type(float)
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "poses", jnp.asarray(poses, dt))
        object.__setattr__(self, "twists", jnp.asarray(tw, dt))

    @property
    def num_bodies(self) -> int:
        return self.poses.shape[-2]

    @property
    def shape_bodies(self) -> np.ndarray:
        """``[S]`` int: owning body of each shape (static)."""
        return np.array([s.body for s in self.shapes], dtype=np.int32)

    def with_state(self, poses: Array, twists: Array | None = None) -> Bodies:
        """Same shapes, new ``poses [..., B, 7]`` and ``twists [..., B, 6]``.

        Concrete (host) values are checked: shapes, finite values and unit quaternions (x, y, z,
        w) within 1e-6, so a doubled or zero quaternion is refused with an error naming
        ``poses``. Traced values (inside ``jit``, ``vmap``, ``grad``) are used as given: a
        quaternion of norm ``s`` then rotates and scales points by ``s^2``, so normalise them
        upstream (:func:`difftaxel.pose.quat_normalize`) if they can drift.
        """
        from .._pytree import replace

        B = self.num_bodies
        check_last_dim(poses, 7, "poses")
        if np.shape(poses)[-2:-1] != (B,):
            raise ValueError(f"poses: expected shape (..., {B}, 7), got {np.shape(poses)}")
        check_pose(poses, "poses")
        if twists is not None:
            check_last_dim(twists, 6, "twists")
            check_finite(twists, "twists")
        return replace(self, poses=poses, twists=self.twists if twists is None else twists)

    def query(self, points, body_mask: Array | None = None, *, frame: Array | None = None):
        """Signed distance and outward normal of every shape at many points.

        Args:
          points: the query points (m), in frame F: an array ``[P, 3]`` or
            :class:`~difftaxel.geometry.Planes` of ``[P]`` planes (the sensors' layout).
          body_mask: optional ``[B]`` bool; False removes that body (filtered or not in
            contact): its entries are masked and their ``sd`` set to ``1e6``.
          frame: ``T_world_frame [7]`` of frame F (position m, quaternion x, y, z, w), or None
            for the world frame.

        Returns:
          :class:`ShapeQuery` with ``sd [S, P]``, ``mask [S, P]`` and normals in frame F, in the
          layout of ``points``: ``[S, P, 3]``, or :class:`Planes` of ``[S, P]``.

        Each shape's pose relative to F is composed once, so every point costs one rigid
        transform in and one rotation out. Spheres are queried on F's axes (their distance is
        rotation-equivariant: exact, and no rotation terms in the gradient).
        """
        planar = isinstance(points, Planes)
        x, y, z = points if planar else Planes.from_array(points)
        dtype = x.dtype
        T_frame_world = None if frame is None else _pose.inverse(frame.astype(dtype))
        sd, normal = query_kinds(shape_kinds(self.shapes), self.poses, T_frame_world, x, y, z)
        mask = self._mask(body_mask, sd.shape)
        sd = jnp.where(mask, sd, jnp.asarray(1e6, sd.dtype))
        return ShapeQuery(sd=sd, normal=normal if planar else normal.stack(), mask=mask)

    def _mask(self, body_mask, shape):
        if body_mask is None:
            return jnp.ones(shape, bool)
        bm = jnp.asarray(body_mask)
        per_shape = shape_rows(bm, self.shape_bodies)
        return jnp.broadcast_to(per_shape[:, None], shape)

    def signed_distance(
        self, points_world: Array, body_mask: Array | None = None
    ) -> tuple[Array, Array, Array]:
        """Nearest-surface signed distance over all shapes (the union's SDF).

        Returns:
          ``sd [P]`` (m; ``1e6`` where every body is masked), ``normal [P, 3]`` (world, of the
          shape with the smallest ``sd``; first shape on ties), ``body [P]`` int32 (owning body).
        """
        q = self.query(points_world, body_mask)
        k = first_argmin(q.sd, axis=0)
        sd = jnp.take_along_axis(q.sd, k[None], 0)[0]
        normal = jnp.take_along_axis(q.normal, k[None, :, None], 0)[0]
        body = jnp.asarray(self.shape_bodies)[k]
        return sd, normal, body

    def velocity_at(self, body: Array, points_world: Array) -> Array:
        """Material-point velocity ``[P, 3]`` (m/s, world) of bodies ``body [P]`` at ``points_world``."""
        return point_velocity(
            self.twists[body].astype(points_world.dtype),
            _pose.pose_position(self.poses[body]).astype(points_world.dtype),
            points_world,
        )


def in_shape_order(parts: list, order: list) -> Array:
    """The kinds' stacked outputs ``[G_k, ...]`` (kind ``k`` holding shapes ``order[k]``) back
    in the shapes' order ``[S, ...]``."""
    back = np.argsort(np.concatenate(order))
    out = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
    return out if np.array_equal(back, np.arange(back.size)) else out[back]


def query_kinds(kinds, poses, T_frame_world, x, y, z):
    """``(sd [S, P], normal Planes of [S, P])`` of every shape at the points ``x, y, z``
    (``[P]`` each, frame F): one batched evaluation per kind of :func:`shape_kinds` (``kinds``:
    ``(indices [G], treedef, stacked leaves, bodies [G])``), back in the shapes' order.
    ``poses [B, 7]`` are the bodies' world poses; ``T_frame_world`` maps world to F (None: F
    is the world frame)."""
    sds, ns, order = [], [], []
    for idx, treedef, leaves, bodies in kinds:
        T_b = shape_rows(poses, bodies).astype(x.dtype)
        sd, n = jax.vmap(
            lambda leaf, T, td=treedef: _query_one(td, leaf, T, T_frame_world, x, y, z)
        )(leaves, T_b)
        sds.append(sd)
        ns.append(n)
        order.append(idx)
    sd = in_shape_order(sds, order)
    return sd, Planes(*(in_shape_order([n[i] for n in ns], order) for i in range(3)))


def _query_one(treedef, leaves, T_body, T_frame_world, x, y, z):
    """Signed distance and normal (frame F's axes) of one shape at the points ``x, y, z`` (F):
    the shape rebuilt from its leaves, its pose composed once."""
    s = jax.tree.unflatten(treedef, leaves)
    T_frame_shape = _pose.compose(T_body, s.T_body_shape.astype(x.dtype))
    if T_frame_world is not None:
        T_frame_shape = _pose.compose(T_frame_world, T_frame_shape)
    # ones batched like the shape's pose (per environment under vmap): ones of the shared
    # probe planes alone would be one row broadcast over the environments, and XLA turns a
    # division by a broadcast into a product, which its CPU fusion then copies into every reader
    one = runtime_one(x + T_frame_shape[0])
    if isinstance(s, Sphere):
        c = T_frame_shape[:3]
        sd, m = s.sdf_local_xyz(x - c[0], y - c[1], z - c[2])
        return compute_once(one, sd), tuple(m)  # the distance: read by every branch
    R = _pose.quat_to_matrix(T_frame_shape[3:])
    t = -(R.T @ T_frame_shape[:3])
    # shape-frame point = R^T p - R^T t_fs, one plane at a time, stored once: the distance and
    # each normal component read all three
    ps = compute_once(one, *affine_planes(R.T, t, x, y, z))
    # the distance and the local normal planes stored once: every rotated normal component
    # reads all three, and XLA's CPU fusion would otherwise recompute the shape's SDF in each
    if isinstance(s, Box):  # and a box's normal reads the stored distance
        sd, m = s.sdf_local_xyz(*ps, keep=lambda d: compute_once(one, d))
        m = compute_once(one, *m)
    else:
        sd, m = sdf_local_xyz(s, *ps)
        sd, *m = compute_once(one, sd, *m)
    return sd, tuple(R[i, 0] * m[0] + R[i, 1] * m[1] + R[i, 2] * m[2] for i in range(3))
