"""Tracked point clouds: surface points of the bodies a point-cloud sensor follows, and the
options every point-cloud sensor shares (:class:`PointCloudSensor`).

Points are sampled once (:func:`difftaxel.sample_surface_points`, Genesis's area-weighted +
farthest-point procedure), stored in each body's frame and grouped by body, and moved rigidly
with their bodies every step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._pytree import pytree_dataclass, static_field
from ..geometry import Planes
from ..geometry.planes import affine_planes
from .base import ProbeSensor

Array = jax.Array

__all__ = ["PointCloudSensor", "TrackedPoints", "check_normals", "motion_planes", "pose_in_frame"]


def motion_planes(T_body: Array, tw: Array, bx: Array, by: Array, bz: Array):
    """World positions, velocities and angular velocities (:class:`Planes` of ``[K]``; m, m/s,
    rad/s) of points given in the body frame as planes ``bx, by, bz [K]``, for a body at pose
    ``T_body [7]`` with world twist ``tw [6]``."""
    R = _pose.quat_to_matrix(T_body[3:])
    p = affine_planes(R, T_body[:3], bx, by, bz)
    r = [p[i] - T_body[i] for i in range(3)]
    w = tw[3:]
    v = (
        tw[0] + w[1] * r[2] - w[2] * r[1],
        tw[1] + w[2] * r[0] - w[0] * r[2],
        tw[2] + w[0] * r[1] - w[1] * r[0],
    )
    ang = tuple(jnp.broadcast_to(w[i], bx.shape) for i in range(3))
    return Planes(*p), Planes(*v), Planes(*ang)


def pose_in_frame(T_world_frame: Array, T_world_body: Array) -> tuple[Array, Array]:
    """``(R [3, 3], t [3])``: a body at world pose ``T_world_body [7]`` seen from the frame at
    world pose ``T_world_frame [7]`` (quaternions (x, y, z, w)); ``R p + t`` maps body-frame
    points into that frame in one affine map."""
    R_f = _pose.quat_to_matrix(T_world_frame[3:])
    R_b = _pose.quat_to_matrix(T_world_body[3:])
    return R_f.T @ R_b, R_f.T @ (T_world_body[:3] - T_world_frame[:3])


@pytree_dataclass
class TrackedPoints:
    """Surface points of the tracked bodies, in each body's frame.

    Attributes:
      points: ``[M, 3]`` positions (m), body frames, grouped by body in ``segments`` order.
      segments: static tuple of ``(body_index, count)``: the first ``count`` points belong to
        ``body_index``, the next group to the next entry, ...
    """

    points: Array
    segments: tuple = static_field(())

    def __post_init__(self):
        p = np.asarray(self.points, dtype=float)
        if p.ndim != 2 or p.shape[1] != 3 or p.shape[0] == 0:
            raise ValueError(f"TrackedPoints.points: expected shape (M, 3), M > 0, got {p.shape}")
        if not np.all(np.isfinite(p)):
            raise ValueError("TrackedPoints.points: expected finite values")
        seg = tuple((int(b), int(c)) for b, c in self.segments)
        if sum(c for _, c in seg) != p.shape[0] or any(c < 0 or b < 0 for b, c in seg):
            raise ValueError(
                f"TrackedPoints.segments: counts must be >= 0 and sum to {p.shape[0]} points, "
                f"got {seg}"
            )
        object.__setattr__(self, "points", jnp.asarray(p, jnp.result_type(float)))
        object.__setattr__(self, "segments", seg)

    @classmethod
    def from_body_index(cls, points, body_index):
        """Build from ``points [M, 3]`` and an integer ``body_index [M]`` (points regrouped)."""
        p = np.asarray(points, dtype=float)
        b = np.asarray(body_index).astype(int)
        if b.shape != (p.shape[0],):
            raise ValueError(f"body_index: expected shape ({p.shape[0]},), got {b.shape}")
        order = np.argsort(b, kind="stable")
        bodies, counts = np.unique(b[order], return_counts=True)
        return cls(points=p[order], segments=tuple(zip(bodies.tolist(), counts.tolist())))

    @property
    def n_points(self) -> int:
        return self.points.shape[0]

    def check_bodies(self, bodies) -> None:
        """Trace-time check that every segment's body exists in ``bodies``."""
        for b, _ in self.segments:
            if b >= bodies.num_bodies:
                raise ValueError(
                    f"TrackedPoints.segments: body {b} but inputs.bodies has "
                    f"{bodies.num_bodies} bodies"
                )

    def world_planes(self, inputs, dtype):
        """World positions, velocities and angular velocities (:class:`Planes` of ``[M]``; m,
        m/s, rad/s) and the per-point body mask ``[M]`` (static slices per segment)."""
        bodies = inputs.bodies
        self.check_bodies(bodies)
        pts = self.points.astype(dtype)
        parts, msk, start = [], [], 0
        for b, c in self.segments:
            seg = [pts[start : start + c, i] for i in range(3)]
            T, tw = bodies.poses[b].astype(dtype), bodies.twists[b].astype(dtype)
            parts.append(motion_planes(T, tw, *seg))
            msk.append(jnp.broadcast_to(jnp.asarray(inputs.body_mask)[b], (c,)))
            start += c
        pos, vel, ang = (
            Planes(*(jnp.concatenate([p[k][i] for p in parts]) for i in range(3))) for k in range(3)
        )
        return pos, vel, ang, jnp.concatenate(msk)

    def frame_planes(self, inputs, T_world_frame: Array, dtype):
        """Positions (:class:`Planes` of ``[M]``, m) in the frame at world pose
        ``T_world_frame [7]`` (e.g. the sensor link), and the body mask ``[M]``.

        Each body's pose is composed with the frame's first (:func:`pose_in_frame`), so each
        point is moved once."""
        bodies = inputs.bodies
        self.check_bodies(bodies)
        pts = self.points.astype(dtype)
        parts, msk, start = [], [], 0
        for b, c in self.segments:
            R, t = pose_in_frame(T_world_frame, bodies.poses[b].astype(dtype))
            parts.append(affine_planes(R, t, *(pts[start : start + c, i] for i in range(3))))
            msk.append(jnp.broadcast_to(jnp.asarray(inputs.body_mask)[b], (c,)))
            start += c
        pos = Planes(*(jnp.concatenate([p[i] for p in parts]) for i in range(3)))
        return pos, jnp.concatenate(msk)

    def world(self, inputs, dtype):
        """:meth:`world_planes` stacked: positions, velocities, angular velocities
        ``[M, 3]`` (world) and the body mask ``[M]``."""
        pos, vel, ang, msk = self.world_planes(inputs, dtype)
        return pos.stack(), vel.stack(), ang.stack(), msk


def check_normals(name, normal, layout):
    """``probe_local_normal``: ``(3,)``, ``(N, 3)`` or ``(*layout, 3)`` non-zero vectors (link
    frame), normalised and kept in their shape."""
    a = np.asarray(normal, dtype=float)
    n = int(np.prod(layout))
    if a.shape not in ((3,), (n, 3), tuple(layout) + (3,)):
        raise ValueError(
            f"{name}.probe_local_normal: expected shape (3,) or ({n}, 3), got {a.shape}"
        )
    nrm = np.linalg.norm(a, axis=-1, keepdims=True)
    if np.any(nrm < 1e-12) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name}.probe_local_normal: expected non-zero finite vectors")
    return jnp.asarray(a / nrm, jnp.result_type(float))


@pytree_dataclass(kw_only=True)
class PointCloudSensor(ProbeSensor):
    """Options every point-cloud sensor shares (ProximityTaxel, ElastomerTaxel), besides
    :class:`~difftaxel.sensors.ProbeSensor`'s.

    Attributes:
      track_points: the tracked bodies' surface points (:class:`TrackedPoints`).
      probe_local_normal: ``(3,)`` for every probe, ``[N, 3]`` or ``[*layout, 3]`` unit probe
        normals (link frame; normalised at construction).
    """

    probe_local_pos: Array
    track_points: TrackedPoints
    probe_local_normal: Array = (0.0, 0.0, 1.0)

    def _check_field(self, name, v):
        o = type(self).__name__
        if name == "track_points":
            if not isinstance(v, TrackedPoints):
                raise TypeError(f"{o}.track_points: expected TrackedPoints, got {type(v).__name__}")
            return v
        if name == "probe_local_normal":
            return check_normals(o, v, self.layout)
        return super()._check_field(name, v)

    def flat_normals(self, dtype) -> Array:
        """``[N, 3]`` unit probe normals (link frame)."""
        n = self.probe_local_normal.astype(dtype).reshape(-1, 3)
        return jnp.broadcast_to(n, (self.n_probes, 3))
