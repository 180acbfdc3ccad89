"""ProximityTaxel's pair sums over the points of several rigid bodies.

A loop per tracked body written in Python is unrolled into the program: its size and its
compile time grow with the bodies tracked (1.3 s -> 26 s from 1 to 64 far bodies). Here the
bodies are grouped by how many blocks of points they hold (rounded up to a power of two; a
body's points in blocks of its own, padded with far points, so that a spatial order's
clusters stay whole), and each group is one ``lax.scan`` over its bodies of the one-body
sums (:func:`~difftaxel.sensors.pairs.pair_sums_rigid`: only the blocks near the probes,
each against a window of a grid's probes). The program grows with the number of groups (at
most the logarithm of the largest body's blocks), not with the bodies.

A rigid body's points have affine velocities, so each body only sums ``S = sum P`` and,
with shear, ``D = sum P (x - p)``; they are folded into the spin and velocity sums ``Pw =
sum P w = w_b S`` and ``Pv = sum P v = v_b S + w_b x (D + (p - x_b) S)``, where ``(v_b,
w_b)`` is the body's twist at its origin ``x_b`` (all in the probes' frame).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import eps as _eps
from .._numerics import running_count
from .pair_blocks import FAR, block_shape
from .pairs import pair_sums_rigid
from .tracked import pose_in_frame

Array = jax.Array


@functools.cache
def body_groups(segments, block: int) -> tuple:
    """Static groups of the segments (``(body, count)``, consecutive points) that hold
    points: ``((segment ids [n], C, index [n, nb C]), ...)``, one per block count ``nb`` (a
    power of two). Each segment's points are cut in blocks as
    :func:`~difftaxel.sensors.pair_blocks.block_shape` cuts them, each block padded to the
    group's ``C`` points and the segment to ``nb`` blocks with the index ``M`` (a far point)."""
    starts = np.cumsum([0] + [c for _, c in segments])
    M = int(starts[-1])
    buckets: dict = {}
    for g, (_, c) in enumerate(segments):
        if c:
            nb, Cg = block_shape(c, block)
            buckets.setdefault(1 << (nb - 1).bit_length(), []).append((g, nb, Cg))
    out = []
    for nb_max, members in sorted(buckets.items()):
        C = max(Cg for _, _, Cg in members)
        index = np.full((len(members), nb_max, C), M, np.int64)
        for r, (g, nb, Cg) in enumerate(members):
            c = segments[g][1]
            for j in range(nb):
                ix = np.arange(starts[g] + j * Cg, min(starts[g] + (j + 1) * Cg, starts[g] + c))
                index[r, j, : len(ix)] = ix
        ids = tuple(g for g, _, _ in members)
        out.append((ids, C, index.reshape(len(members), nb_max * C)))
    return tuple(out)


def fold_motion(acc, S, D, p, mot):
    """Add one body's sums ``S`` (and ``D``) to ``(S, Pw, Pv)``; ``mot = (v_b, w_b, x_b)``,
    three ``[3]`` (the probes' frame)."""
    v, w, xb = mot
    S0, Pw, Pv = acc
    Pw = tuple(Pw[i] + w[i] * S for i in range(3))
    if D is not None:
        r = [D[i] + (p[i] - xb[i])[None] * S for i in range(3)]  # sum P (x - x_b)
        Pv = (
            Pv[0] + v[0] * S + w[1] * r[2] - w[2] * r[1],
            Pv[1] + v[1] * S + w[2] * r[0] - w[0] * r[2],
            Pv[2] + v[2] * S + w[0] * r[1] - w[1] * r[0],
        )
    return S0 + S, Pw, Pv


def body_frames(T, P, tw):
    """One body seen from the probes' frame at world pose ``T [7]``: ``(R [3, 3], t [3],
    (v, w, x))``, its rotation and position (``R x + t`` maps its points there), and its
    linear velocity at its origin (m/s), angular velocity (rad/s) and origin (m), three
    ``[3]``, from its world pose ``P [7]`` and twist ``tw [6]`` (quaternions x, y, z, w)."""
    R, t = pose_in_frame(T, P)
    R_l = _pose.quat_to_matrix(T[3:])
    return R, t, (tw[:3] @ R_l, tw[3:] @ R_l, (P[:3] - T[:3]) @ R_l)


def pair_sums_bodies(p, radii, T, poses, twists, points, on, groups, with_d: bool, grid=None):
    """Sums over the tracked points of ``G`` rigid bodies (segments) against the probes.

    Args:
      p: probe positions, three ``[N]`` planes (m, the probes' frame, e.g. the sensor link's).
      radii: ``[B, N]`` sensing radii (m), one row per radius branch.
      T: ``[7]`` world pose of the probes' frame (position m, quaternion x, y, z, w).
      poses, twists: ``[G, 7]`` and ``[G, 6]``: each segment's body world pose and twist
        (velocity of its origin, m/s, then angular velocity, rad/s; world frame).
      points: three ``[M]`` planes (m, body frames), grouped by segment.
      on: ``[G]`` bool, segments that count.
      groups: :func:`body_groups` of the segments (static).
      with_d: also return the velocity sums (shear on).
      grid: the probes' windows (:func:`~difftaxel.sensors.pair_windows.choose_window`) or
        None (every probe).

    Returns:
      ``(S, Pw, Pv)``: ``S = sum P`` ``[B, N]`` over points ``0 < d <= R`` with ``P = R - d``;
      ``Pw = sum P w`` and ``Pv = sum P v`` (each point's spin and velocity), three ``[B, N]``
      planes each (``Pv`` None without ``with_d``), in the probes' frame. Derivatives are
      those of :func:`~difftaxel.sensors.pairs.pair_sums_rigid` (its dense pass).

    A group of several bodies visits only the bodies whose points can reach a probe: each
    body's bounding sphere (body frame, its own points) against the ball holding the probes,
    grown by the largest radius; a body beyond it adds nothing to any sum, so skipping it is
    exact. The visit is a ``while_loop`` over the near bodies (as many as the environment with
    the most needs), each body's frame (:func:`body_frames`) computed only when visited: a far
    body costs one rotated point. Derivatives come from the scan over every body (a
    ``while_loop`` has no reverse mode), whose far bodies contribute exact zeros.
    """
    return _bodies(tuple(p), radii, T, poses, twists, tuple(points), on, groups, bool(with_d), grid)


@functools.partial(jax.custom_jvp, nondiff_argnums=(7, 8, 9))
def _bodies(p, radii, T, poses, twists, points, on, groups, with_d, grid):
    return _accumulate(p, radii, T, poses, twists, points, on, groups, with_d, grid, True)


@_bodies.defjvp
def _bodies_jvp(groups, with_d, grid, primals, tangents):
    def dense(*a):
        return _accumulate(*a, groups, with_d, grid, False)

    return jax.jvp(dense, primals, tangents)


def _spheres(cols, real):
    """Bounding spheres of each body's points (three ``[n, K]`` planes, body frames; ``real
    [n, K]`` marks points, not padding): centres, three ``[n]``, and radii ``[n]`` (m)."""
    lo = [jnp.min(jnp.where(real, q, jnp.inf), 1) for q in cols]
    hi = [jnp.max(jnp.where(real, q, -jnp.inf), 1) for q in cols]
    c = [0.5 * (a + b) for a, b in zip(lo, hi)]
    d2 = sum(jnp.where(real, q - ci[:, None], 0.0) ** 2 for q, ci in zip(cols, c))
    return c, jnp.sqrt(jnp.max(d2, 1))


def _accumulate(p, radii, T, poses, twists, points, on, groups, with_d, grid, sparse):
    """The sums of :func:`pair_sums_bodies`: with ``sparse`` visiting only near bodies."""
    z = jnp.zeros(radii.shape, radii.dtype)
    acc = (z, (z,) * 3, (z,) * 3 if with_d else None)
    pad = [jnp.concatenate([q, jnp.full((1,), FAR, q.dtype)]) for q in points]
    p = tuple(p)
    for ids, C, index in groups:  # a few block counts, static
        ix = np.asarray(ids)
        cols = tuple(q[index] for q in pad)  # three [n, nb C], body frames
        xs = (poses[ix], twists[ix], cols, on[ix])

        def one(acc, x, C=C):
            P, tw, pb, on_g = x
            R_g, t_g, mot = body_frames(T, P, tw)
            S, D, _ = pair_sums_rigid(p, radii, R_g, t_g, pb, on_g, C, with_d, grid)
            return fold_motion(acc, S, D, p, mot), None

        if len(ids) == 1:  # one body: no loop
            acc = one(acc, jax.tree.map(lambda a: a[0], xs))[0]
        elif not sparse:
            acc = jax.lax.scan(one, acc, xs)[0]
        else:
            real = index < points[0].shape[0]  # not the far padding point
            near = on[ix] & _near(p, radii, T, poses[ix], cols, real)
            cum = running_count(near)

            def visit(j, acc, xs=xs, cum=cum, one=one):
                # the j-th near body: the first whose running count passes j (no scatter)
                s = jnp.sum((cum <= j).astype(jnp.int32))
                return one(acc, jax.tree.map(lambda a, s=s: a[s], xs))[0]

            _, acc = jax.lax.while_loop(
                lambda c, n=cum[-1]: c[0] < n,
                lambda c, visit=visit: (c[0] + 1, visit(c[0], c[1])),
                (jnp.zeros((), jnp.int32), acc),
            )
    return acc


def _near(p, radii, T, poses, cols, real):
    """``[n]`` bool: bodies (world poses ``poses [n, 7]``) whose bounding sphere comes within
    the largest radius of the ball holding the probes ``p`` (the frame at world pose ``T``).
    In world coordinates, one rotated point per body (coordinate planes ``[n]``: a far body
    costs a few dozen flops). No derivative: it only decides which bodies to visit."""
    p, radii, T, poses, cols = jax.lax.stop_gradient((p, radii, T, poses, cols))
    cb, rb = _spheres(cols, real)
    cp = jnp.stack([jnp.mean(q) for q in p])
    rho = jnp.sqrt(jnp.max(sum((q - c) ** 2 for q, c in zip(p, cp))))
    cw = _pose.apply(T, cp)  # [3] the probes' ball centre, world
    rc = _pose.quat_rotate_planes(tuple(poses[:, 3 + i] for i in range(4)), tuple(cb))
    w = tuple(rc[i] + poses[:, i] - cw[i] for i in range(3))  # centres minus the ball's, world
    reach = rb + rho + jnp.max(radii)
    gap = jnp.sqrt(sum(a * a for a in w)) - reach
    # a margin for rounding (the spheres, and world coordinates far from the origin): a skip
    # must be certain
    scale = jnp.max(jnp.abs(poses[:, :3]), 1) + jnp.max(jnp.abs(T[:3]))
    return ~(gap > 1e-4 * reach + 64 * _eps(reach.dtype) * scale)
