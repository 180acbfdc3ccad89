"""A set of rigid bodies carrying signed-distance shapes, queried many points at a time."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import affine_planes, cross
from .._pytree import pytree_dataclass
from .._validate import check_finite, check_pose, check_shape
from .shapes import Sphere, sdf_local_xyz, shape_sdf_world

Array = jax.Array

__all__ = ["Bodies", "ShapeQuery", "point_velocity"]


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
      sd: ``[S, P]`` signed distances (m, world scale; negative inside).
      normal: ``[S, P, 3]`` unit outward normals (world).
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

    Shapes are evaluated one after the other (a static loop over the few shapes); points are
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
        """Same shapes, new ``poses [B, 7]`` and ``twists [B, 6]`` (no validation: jit-safe)."""
        from .._pytree import replace

        return replace(self, poses=poses, twists=self.twists if twists is None else twists)

    def query(self, points_world: Array, body_mask: Array | None = None) -> ShapeQuery:
        """Signed distance and normal of every shape at ``points_world [P, 3]`` (world, m).

        Args:
          points_world: ``[P, 3]`` query points.
          body_mask: optional ``[B]`` bool; False removes that body (filtered or not in contact).

        Returns:
          :class:`ShapeQuery` with ``[S, P]`` arrays.
        """
        sds, normals = [], []
        for s in self.shapes:
            sd, n = shape_sdf_world(s, self.poses[s.body].astype(points_world.dtype), points_world)
            sds.append(sd)
            normals.append(n)
        sd = jnp.stack(sds)
        normal = jnp.stack(normals)
        mask = self._mask(body_mask, sd.shape)
        sd = jnp.where(mask, sd, jnp.asarray(1e6, sd.dtype))
        return ShapeQuery(sd=sd, normal=normal, mask=mask)

    def query_in_frame(
        self, T_world_frame: Array, points_frame: Array, body_mask: Array | None = None
    ) -> ShapeQuery:
        """Like :meth:`query` for points ``[P, 3]`` given in frame F (``T_world_frame [7]``).

        Normals are returned in frame F. Each shape's pose relative to F is composed once, so
        every point costs one rigid transform in and one rotation out (the fast path used by
        the sensors, whose probes live in the sensor link frame).
        """
        p = points_frame
        sd, n, mask = self.query_in_frame_xyz(
            T_world_frame, (p[..., 0], p[..., 1], p[..., 2]), body_mask
        )
        return ShapeQuery(sd=sd, normal=jnp.stack(n, axis=-1), mask=mask)

    def query_in_frame_xyz(
        self, T_world_frame: Array, points_frame: tuple, body_mask: Array | None = None
    ) -> tuple[Array, tuple, Array]:
        """:meth:`query_in_frame` on coordinate planes.

        Args:
          T_world_frame: ``[7]`` pose of frame F (position m, quaternion x, y, z, w).
          points_frame: ``(x, y, z)``, each ``[P]``: the points in frame F (m).
          body_mask: optional ``[B]`` bool, as in :meth:`query`.

        Returns:
          ``(sd [S, P], (nx, ny, nz) each [S, P], mask [S, P])``: normals in frame F; masked
          entries have ``sd = 1e6``. The planar form keeps every per-point array free of a
          trailing axis of size 3, which XLA's CPU backend handles poorly.
        """
        x, y, z = points_frame
        dtype = x.dtype
        T_frame_world = _pose.inverse(T_world_frame.astype(dtype))
        sds, ns = [], []
        for s in self.shapes:
            T_world_shape = _pose.compose(
                self.poses[s.body].astype(dtype), s.T_body_shape.astype(dtype)
            )
            T_frame_shape = _pose.compose(T_frame_world, T_world_shape)
            if isinstance(s, Sphere):
                # rotation-equivariant: queried on frame F's axes, sd and normal need no
                # rotation (exactly the rotated query; the normal is 0 at the centre either
                # way). A quarter of the flops, and no pose-rotation terms in the gradient.
                c = T_frame_shape[:3]
                sd, m = s.sdf_local_xyz(x - c[0], y - c[1], z - c[2])
                sds.append(sd)
                ns.append(list(m))
                continue
            R = _pose.quat_to_matrix(T_frame_shape[3:])
            t = -(R.T @ T_frame_shape[:3])
            # shape-frame point = R^T p - R^T t_fs, one plane at a time
            ps = affine_planes(R.T, t, x, y, z)
            sd, m = sdf_local_xyz(s, *ps)
            sds.append(sd)
            ns.append([R[i, 0] * m[0] + R[i, 1] * m[1] + R[i, 2] * m[2] for i in range(3)])
        sd = jnp.stack(sds)
        normal = tuple(jnp.stack([n[i] for n in ns]) for i in range(3))
        mask = self._mask(body_mask, sd.shape)
        sd = jnp.where(mask, sd, jnp.asarray(1e6, sd.dtype))
        return sd, normal, mask

    def _mask(self, body_mask, shape):
        if body_mask is None:
            return jnp.ones(shape, bool)
        bm = jnp.asarray(body_mask)
        per_shape = jnp.stack([bm[int(b)] for b in self.shape_bodies])  # static slices
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
        k = jnp.argmin(q.sd, axis=0)
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
