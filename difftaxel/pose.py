"""Rigid poses and unit quaternions, stored as arrays.

Conventions:

* A **quaternion** is an array ``(..., 4)`` in **(x, y, z, w)** order (scalar last), unit norm.
  Genesis and Isaac Lab store (w, x, y, z): convert only at the boundary with
  :func:`quat_wxyz_to_xyzw` / :func:`quat_xyzw_to_wxyz`.
* A **pose** ``T_a_b`` is an array ``(..., 7)``: position ``t`` (m) then quaternion ``q``
  (x, y, z, w). It maps points from frame ``b`` into frame ``a``: ``p_a = R(q) p_b + t``.
* A **twist / tangent vector** ``xi`` is ``(..., 6)``: translational part ``rho`` (m) then
  rotational part ``omega`` (rad, a rotation vector). :func:`se3_exp` maps it to a pose and
  :func:`se3_log` back; ``se3_exp(xi)`` composed on the right (``compose(T, se3_exp(xi))``) is a
  body-frame update, the parameterisation used to optimise poses so quaternions stay unit.

Every function broadcasts over leading axes, is pure, jit/vmap/grad-able, and keeps gradients
finite at the identity and at a rotation by pi (Taylor branches near zero angle, guarded
square roots). Functions do not renormalise their inputs; validate on the host with
:func:`check_pose` where inputs come from users.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._numerics import align, cross, safe_norm
from ._validate import check_pose as _check_pose

Array = jax.Array

__all__ = [
    "identity_pose",
    "make_pose",
    "pose_position",
    "pose_quat",
    "quat_identity",
    "quat_mul",
    "quat_mul_planes",
    "quat_conjugate",
    "quat_inverse",
    "quat_normalize",
    "quat_rotate",
    "quat_rotate_planes",
    "quat_to_matrix",
    "quat_to_matrix_planes",
    "matrix_to_quat",
    "quat_from_axis_angle",
    "quat_to_axis_angle",
    "quat_exp",
    "quat_log",
    "quat_slerp",
    "quat_xyzw_to_wxyz",
    "quat_wxyz_to_xyzw",
    "compose",
    "inverse",
    "relative",
    "apply",
    "rotate",
    "inverse_apply",
    "inverse_rotate",
    "se3_exp",
    "se3_log",
    "pose_from_matrix",
    "matrix_apply",
    "pose_to_matrix",
    "check_pose",
]


def check_pose(T, name: str = "pose", atol: float = 1e-6) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``T`` is ``(..., 7)`` with unit quaternions.

    Host-side check (skipped for traced values). The tolerance on ``|q| - 1`` is ``atol``.
    """
    _check_pose(T, name, atol)


def quat_identity(dtype=None) -> Array:
    """The identity quaternion ``(0, 0, 0, 1)``, shape ``[4]``, (x, y, z, w)."""
    return jnp.array([0.0, 0.0, 0.0, 1.0], dtype=dtype)


def identity_pose(shape: tuple = (), dtype=None) -> Array:
    """Identity poses of shape ``[*shape, 7]`` (zero position, quaternion (0, 0, 0, 1))."""
    base = jnp.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], dtype=dtype)
    return jnp.broadcast_to(base, tuple(shape) + (7,))


def make_pose(position: Array, quat_xyzw: Array | None = None) -> Array:
    """Stack a position ``[..., 3]`` (m) and a quaternion ``[..., 4]`` (x, y, z, w) into ``[..., 7]``.

    ``quat_xyzw=None`` means the identity rotation.
    """
    position = jnp.asarray(position)
    if quat_xyzw is None:
        quat_xyzw = jnp.broadcast_to(quat_identity(position.dtype), position.shape[:-1] + (4,))
    quat_xyzw = jnp.asarray(quat_xyzw)
    shape = jnp.broadcast_shapes(position.shape[:-1], quat_xyzw.shape[:-1])
    return jnp.concatenate(
        [jnp.broadcast_to(position, shape + (3,)), jnp.broadcast_to(quat_xyzw, shape + (4,))],
        axis=-1,
    )


def pose_position(T: Array) -> Array:
    """Position part ``[..., 3]`` (m) of poses ``[..., 7]``."""
    return T[..., :3]


def pose_quat(T: Array) -> Array:
    """Quaternion part ``[..., 4]`` (x, y, z, w) of poses ``[..., 7]``."""
    return T[..., 3:]


# ----------------------------------------------------------------------------- quaternions


def quat_mul(q1: Array, q2: Array) -> Array:
    """Hamilton product ``q1 * q2`` of (x, y, z, w) quaternions: rotate by ``q2`` then ``q1``."""
    q1, q2 = align(q1, q2)
    planes = lambda q: tuple(q[..., i] for i in range(4))  # noqa: E731
    return jnp.stack(quat_mul_planes(planes(q1), planes(q2)), axis=-1)


def quat_mul_planes(q1, q2) -> tuple:
    """:func:`quat_mul` on coordinate planes: ``q1, q2 = (x, y, z, w)``, each a tuple of
    arrays that broadcast together; returns four arrays (see :func:`quat_rotate_planes`)."""
    x1, y1, z1, w1 = q1
    x2, y2, z2, w2 = q2
    return (
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
    )


def quat_conjugate(q: Array) -> Array:
    """Conjugate ``(-x, -y, -z, w)``; the inverse of a unit quaternion."""
    return jnp.concatenate([-q[..., :3], q[..., 3:]], axis=-1)


def quat_inverse(q: Array) -> Array:
    """Inverse of a unit quaternion (its conjugate)."""
    return quat_conjugate(q)


def quat_normalize(q: Array) -> Array:
    """``q / |q|`` (the zero quaternion maps to the identity)."""
    n = safe_norm(q, keepdims=True)
    ident = jnp.broadcast_to(quat_identity(q.dtype), q.shape)
    return jnp.where(n > 0, q / jnp.where(n > 0, n, 1.0), ident)


def quat_rotate(q: Array, v: Array) -> Array:
    """Rotate vectors ``v [..., 3]`` by unit quaternions ``q [..., 4]`` (x, y, z, w).

    Uses ``v + 2 w (u x v) + 2 u x (u x v)`` with ``u = q.xyz``.
    """
    q, v = align(q, v)
    u = q[..., :3]
    w = q[..., 3:4]
    uv = cross(u, v)
    return v + 2.0 * (w * uv + cross(u, uv))


def quat_rotate_planes(q, v, conjugate: bool = False) -> tuple:
    """:func:`quat_rotate` on coordinate planes: ``v = (vx, vy, vz)`` rotated by the unit
    quaternions ``q = (qx, qy, qz, qw)`` (or by their conjugates, ``R^T v``, with
    ``conjugate``), each a tuple of arrays that broadcast together; returns three arrays.
    Why: no ``[..., 3]`` or ``[..., 4]`` array is stacked (each stack is an operation of its
    own under ``vmap``, and a trailing axis of 3 vectorises poorly on the CPU)."""
    qx, qy, qz, qw = q
    if conjugate:
        qx, qy, qz = -qx, -qy, -qz
    vx, vy, vz = v
    tx = 2 * (qy * vz - qz * vy)
    ty = 2 * (qz * vx - qx * vz)
    tz = 2 * (qx * vy - qy * vx)
    return (
        vx + qw * tx + qy * tz - qz * ty,
        vy + qw * ty + qz * tx - qx * tz,
        vz + qw * tz + qx * ty - qy * tx,
    )


def quat_to_matrix(q: Array) -> Array:
    """Rotation matrix ``[..., 3, 3]`` of unit quaternions ``[..., 4]`` (x, y, z, w)."""
    rows = quat_to_matrix_planes(tuple(q[..., i] for i in range(4)))
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def quat_to_matrix_planes(q) -> tuple:
    """:func:`quat_to_matrix` on coordinate planes: ``q = (x, y, z, w)`` a tuple of arrays;
    returns the rows, three tuples of three arrays (``R[i][j]``)."""
    x, y, z, w = q
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    return (
        (1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy)),
        (2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx)),
        (2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy)),
    )


def _safe_sqrt(x: Array) -> Array:
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def matrix_to_quat(R: Array) -> Array:
    """Unit quaternion ``[..., 4]`` (x, y, z, w, with ``w >= 0``) of rotation matrices ``[..., 3, 3]``.

    Shepperd's method: of the four algebraically equal formulas the one with the largest
    pivot is used, so the result is accurate (and differentiable) at every rotation,
    including rotations by pi.
    """
    m00, m11, m22 = R[..., 0, 0], R[..., 1, 1], R[..., 2, 2]
    tr = m00 + m11 + m22
    # candidate 0: w largest
    s0 = _safe_sqrt(1.0 + tr) * 2.0
    s1 = _safe_sqrt(1.0 + m00 - m11 - m22) * 2.0
    s2 = _safe_sqrt(1.0 - m00 + m11 - m22) * 2.0
    s3 = _safe_sqrt(1.0 - m00 - m11 + m22) * 2.0

    def _d(s):
        return jnp.where(s > 0, s, 1.0)

    q0 = jnp.stack(
        [
            (R[..., 2, 1] - R[..., 1, 2]) / _d(s0),
            (R[..., 0, 2] - R[..., 2, 0]) / _d(s0),
            (R[..., 1, 0] - R[..., 0, 1]) / _d(s0),
            0.25 * s0,
        ],
        -1,
    )
    q1 = jnp.stack(
        [
            0.25 * s1,
            (R[..., 0, 1] + R[..., 1, 0]) / _d(s1),
            (R[..., 0, 2] + R[..., 2, 0]) / _d(s1),
            (R[..., 2, 1] - R[..., 1, 2]) / _d(s1),
        ],
        -1,
    )
    q2 = jnp.stack(
        [
            (R[..., 0, 1] + R[..., 1, 0]) / _d(s2),
            0.25 * s2,
            (R[..., 1, 2] + R[..., 2, 1]) / _d(s2),
            (R[..., 0, 2] - R[..., 2, 0]) / _d(s2),
        ],
        -1,
    )
    q3 = jnp.stack(
        [
            (R[..., 0, 2] + R[..., 2, 0]) / _d(s3),
            (R[..., 1, 2] + R[..., 2, 1]) / _d(s3),
            0.25 * s3,
            (R[..., 1, 0] - R[..., 0, 1]) / _d(s3),
        ],
        -1,
    )
    pivots = jnp.stack([tr, m00, m11, m22], axis=-1)
    k = jnp.argmax(pivots, axis=-1)[..., None]
    q = jnp.where(k == 0, q0, jnp.where(k == 1, q1, jnp.where(k == 2, q2, q3)))
    return q * jnp.where(q[..., 3:4] < 0, -1.0, 1.0)


# Taylor thresholds on the squared angle: below these the closed forms lose precision.
def _small_angle_sq(dtype) -> float:
    return 1e-6 if jnp.dtype(dtype) == jnp.float64 else 1e-3


def quat_exp(omega: Array) -> Array:
    """Unit quaternion ``[..., 4]`` (x, y, z, w) of rotation vectors ``omega [..., 3]`` (rad).

    ``omega = angle * axis``. Exact gradient at ``omega = 0`` (Taylor branch of sinc).
    """
    th2 = jnp.sum(omega * omega, axis=-1, keepdims=True)
    small = th2 < _small_angle_sq(omega.dtype)
    th = jnp.sqrt(jnp.where(small, 1.0, th2))
    half = 0.5 * th
    # sin(th/2)/th and cos(th/2), with their Taylor series near 0
    s_big = jnp.sin(half) / th
    c_big = jnp.cos(half)
    s_small = 0.5 - th2 / 48.0 + th2 * th2 / 3840.0
    c_small = 1.0 - th2 / 8.0 + th2 * th2 / 384.0
    s = jnp.where(small, s_small, s_big)
    c = jnp.where(small, c_small, c_big)
    return jnp.concatenate([s * omega, c], axis=-1)


def quat_log(q: Array) -> Array:
    """Rotation vector ``[..., 3]`` (rad, angle in [0, pi]) of unit quaternions ``[..., 4]``.

    The inverse of :func:`quat_exp` on the hemisphere ``w >= 0`` (``q`` and ``-q`` give the same
    result). Gradients are finite at the identity (Taylor branch) and at pi.
    """
    q = q * jnp.where(q[..., 3:4] < 0, -1.0, 1.0)
    v = q[..., :3]
    w = q[..., 3:4]
    n2 = jnp.sum(v * v, axis=-1, keepdims=True)
    small = n2 < _small_angle_sq(q.dtype)
    n = jnp.sqrt(jnp.where(small, 1.0, n2))
    # angle = 2 atan2(|v|, w); omega = angle * v / |v|
    big = 2.0 * jnp.arctan2(n, w) / n
    ws = jnp.where(small, w, 1.0)
    # 2 atan(n/w)/n = (2/w)(1 - n^2/(3 w^2) + n^4/(5 w^4)) for small n/w
    r2 = n2 / (ws * ws)
    small_f = (2.0 / ws) * (1.0 - r2 / 3.0 + r2 * r2 / 5.0)
    return jnp.where(small, small_f, big) * v


def quat_from_axis_angle(axis: Array, angle: Array) -> Array:
    """Quaternion (x, y, z, w) of a rotation by ``angle`` (rad) about unit ``axis [..., 3]``."""
    angle = jnp.asarray(angle)[..., None]
    return jnp.concatenate([jnp.sin(0.5 * angle) * axis, jnp.cos(0.5 * angle)], axis=-1)


def quat_to_axis_angle(q: Array) -> tuple[Array, Array]:
    """Unit axis ``[..., 3]`` and angle ``[...]`` (rad, in [0, pi]) of unit quaternions.

    At the identity the axis is undefined; ``(1, 0, 0)`` is returned with angle 0.
    """
    omega = quat_log(q)
    angle = safe_norm(omega)
    default = jnp.broadcast_to(jnp.array([1.0, 0.0, 0.0], omega.dtype), omega.shape)
    pos = angle[..., None] > 0
    axis = jnp.where(pos, omega / jnp.where(pos, angle[..., None], 1.0), default)
    return axis, angle


def quat_slerp(q0: Array, q1: Array, t: Array) -> Array:
    """Spherical linear interpolation from ``q0`` (t = 0) to ``q1`` (t = 1) along the short arc.

    Implemented as ``q0 * exp(t * log(q0^-1 q1))``, which is exact and differentiable also
    when ``q0 == q1``.
    """
    t = jnp.asarray(t)[..., None]
    d = quat_mul(quat_conjugate(q0), q1)
    return quat_mul(q0, quat_exp(t * quat_log(d)))


def quat_xyzw_to_wxyz(q: Array) -> Array:
    """Reorder (x, y, z, w) -> (w, x, y, z), the storage order of Genesis and Isaac Lab."""
    return jnp.concatenate([q[..., 3:4], q[..., :3]], axis=-1)


def quat_wxyz_to_xyzw(q: Array) -> Array:
    """Reorder (w, x, y, z) -> (x, y, z, w), difftaxel's storage order."""
    return jnp.concatenate([q[..., 1:4], q[..., 0:1]], axis=-1)


# ----------------------------------------------------------------------------- poses


def compose(T_a_b: Array, T_b_c: Array) -> Array:
    """``T_a_c = T_a_b * T_b_c`` for poses ``[..., 7]`` (broadcasting)."""
    T_a_b, T_b_c = align(T_a_b, T_b_c)
    qa = T_a_b[..., 3:]
    t = T_a_b[..., :3] + quat_rotate(qa, T_b_c[..., :3])
    q = quat_mul(qa, T_b_c[..., 3:])
    return jnp.concatenate([t, q], axis=-1)


def inverse(T_a_b: Array) -> Array:
    """``T_b_a``, the inverse pose: ``(-R^T t, q^-1)``."""
    qi = quat_conjugate(T_a_b[..., 3:])
    return jnp.concatenate([-quat_rotate(qi, T_a_b[..., :3]), qi], axis=-1)


def relative(T_w_a: Array, T_w_b: Array) -> Array:
    """``T_a_b = inverse(T_w_a) * T_w_b``: pose of frame b seen from frame a."""
    return compose(inverse(T_w_a), T_w_b)


def apply(T_a_b: Array, p_b: Array) -> Array:
    """Map points ``p_b [..., 3]`` (frame b, m) to frame a: ``R p_b + t``.

    ``T_a_b`` broadcasts against ``p_b``'s leading axes.
    """
    T_a_b, p_b = align(T_a_b, p_b)
    return quat_rotate(T_a_b[..., 3:], p_b) + T_a_b[..., :3]


def inverse_apply(T_a_b: Array, p_a: Array) -> Array:
    """Map points ``p_a [..., 3]`` from frame a to frame b: ``R^T (p_a - t)``."""
    T_a_b, p_a = align(T_a_b, p_a)
    return quat_rotate(quat_conjugate(T_a_b[..., 3:]), p_a - T_a_b[..., :3])


def rotate(T_a_b: Array, v_b: Array) -> Array:
    """Rotate direction/force vectors ``v_b [..., 3]`` from frame b into frame a (no translation)."""
    return quat_rotate(T_a_b[..., 3:], v_b)


def inverse_rotate(T_a_b: Array, v_a: Array) -> Array:
    """Rotate vectors ``v_a [..., 3]`` from frame a into frame b: ``R^T v_a``."""
    return quat_rotate(quat_conjugate(T_a_b[..., 3:]), v_a)


def matrix_apply(R: Array, t: Array, p: Array) -> Array:
    """``R p + t`` for one rotation matrix ``R [3, 3]`` / ``t [3]`` and many points ``p [..., 3]``.

    Written out elementwise (9 multiply-adds per point): for transforming many points by one
    pose this is cheaper than the quaternion sandwich and fuses on every backend.
    """
    x, y, z = p[..., 0], p[..., 1], p[..., 2]
    return jnp.stack([R[i, 0] * x + R[i, 1] * y + R[i, 2] * z + t[i] for i in range(3)], axis=-1)


def pose_to_matrix(T: Array) -> Array:
    """Homogeneous matrices ``[..., 4, 4]`` of poses ``[..., 7]``."""
    R = quat_to_matrix(T[..., 3:])
    top = jnp.concatenate([R, T[..., :3, None]], axis=-1)
    bottom = jnp.broadcast_to(jnp.array([0.0, 0.0, 0.0, 1.0], dtype=T.dtype), T.shape[:-1] + (1, 4))
    return jnp.concatenate([top, bottom], axis=-2)


def pose_from_matrix(M: Array) -> Array:
    """Poses ``[..., 7]`` of homogeneous matrices ``[..., 4, 4]`` (or ``[..., 3, 4]``)."""
    return jnp.concatenate([M[..., :3, 3], matrix_to_quat(M[..., :3, :3])], axis=-1)


def _hat_coeffs(th2: Array, dtype):
    """Coefficients (a, b) of ``V = I + a [w]x + b [w]x^2`` with Taylor branches near 0.

    a = (1 - cos th)/th^2, b = (th - sin th)/th^3.
    """
    small = th2 < _small_angle_sq(dtype)
    th = jnp.sqrt(jnp.where(small, 1.0, th2))
    a = jnp.where(small, 0.5 - th2 / 24.0 + th2 * th2 / 720.0, (1.0 - jnp.cos(th)) / (th * th))
    b = jnp.where(
        small, 1.0 / 6.0 - th2 / 120.0 + th2 * th2 / 5040.0, (th - jnp.sin(th)) / (th * th * th)
    )
    return a, b


def se3_exp(xi: Array) -> Array:
    """Pose ``[..., 7]`` of tangent vectors ``xi = (rho, omega) [..., 6]`` (m, rad).

    ``exp`` of SE(3): rotation ``quat_exp(omega)``, translation ``V(omega) rho`` with
    ``V = I + (1 - cos th)/th^2 [omega]x + (th - sin th)/th^3 [omega]x^2``.
    """
    rho, omega = xi[..., :3], xi[..., 3:]
    th2 = jnp.sum(omega * omega, axis=-1, keepdims=True)
    a, b = _hat_coeffs(th2, xi.dtype)
    wr = cross(omega, rho)
    t = rho + a * wr + b * cross(omega, wr)
    return jnp.concatenate([t, quat_exp(omega)], axis=-1)


def se3_log(T: Array) -> Array:
    """Tangent vectors ``[..., 6]`` = (rho, omega) of poses ``[..., 7]``; inverse of :func:`se3_exp`.

    The rotation angle is taken in [0, pi]. ``rho = V(omega)^-1 t`` with
    ``V^-1 = I - [omega]x / 2 + (1/th^2)(1 - th sin th / (2 (1 - cos th))) [omega]x^2``.
    """
    omega = quat_log(T[..., 3:])
    t = T[..., :3]
    th2 = jnp.sum(omega * omega, axis=-1, keepdims=True)
    small = th2 < _small_angle_sq(T.dtype)
    th = jnp.sqrt(jnp.where(small, 1.0, th2))
    big = (1.0 - th * jnp.sin(th) / (2.0 * (1.0 - jnp.cos(th)))) / (th * th)
    c = jnp.where(small, 1.0 / 12.0 + th2 / 720.0 + th2 * th2 / 30240.0, big)
    wt = cross(omega, t)
    rho = t - 0.5 * wt + c * cross(omega, wt)
    return jnp.concatenate([rho, omega], axis=-1)
