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

from .pair_blocks import FAR, block_shape
from .pairs import pair_sums_rigid

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


def pair_sums_bodies(p, radii, R, t, motion, points, on, groups, with_d: bool, grid=None):
    """Sums over the tracked points of ``G`` rigid bodies (segments) against the probes.

    Args:
      p: probe positions, three ``[N]`` planes (m, the probes' frame, e.g. the sensor link's).
      radii: ``[B, N]`` sensing radii (m), one row per radius branch.
      R, t: ``[G, 3, 3]`` and ``[G, 3]``: each segment's body rotation and position in the
        probes' frame (``R x + t`` maps its body-frame points there).
      motion: ``(v [G, 3], w [G, 3], x [G, 3])``: each segment's body linear velocity at its
        origin (m/s), angular velocity (rad/s) and origin (m), in the probes' frame.
      points: three ``[M]`` planes (m, body frames), grouped by segment.
      on: ``[G]`` bool, segments that count.
      groups: :func:`body_groups` of the segments (static).
      with_d: also return the velocity sums (shear on).
      grid: the probes' windows (:func:`~difftaxel.sensors.pair_windows.choose_window`) or
        None (every probe).

    Returns:
      ``(S, Pw, Pv)``: ``S = sum P`` ``[B, N]`` over points ``0 < d <= R`` with ``P = R - d``;
      ``Pw = sum P w`` and ``Pv = sum P v`` (each point's spin and velocity), three ``[B, N]``
      planes each (``Pv`` None without ``with_d``). Derivatives are those of
      :func:`~difftaxel.sensors.pairs.pair_sums_rigid` (its dense pass).
    """
    z = jnp.zeros(radii.shape, radii.dtype)
    acc = (z, (z,) * 3, (z,) * 3 if with_d else None)
    pad = [jnp.concatenate([q, jnp.full((1,), FAR, q.dtype)]) for q in points]
    p = tuple(p)
    for ids, C, index in groups:  # a few block counts, static
        ix = np.asarray(ids)
        cols = tuple(q[index] for q in pad)  # three [n, nb C], body frames
        xs = (R[ix], t[ix], tuple(m[ix] for m in motion), cols, on[ix])

        def one(acc, x, C=C):
            R_g, t_g, mot, pb, on_g = x
            S, D, _ = pair_sums_rigid(p, radii, R_g, t_g, pb, on_g, C, with_d, grid)
            return fold_motion(acc, S, D, p, mot), None

        if len(ids) == 1:  # one body: no loop
            acc = one(acc, jax.tree.map(lambda a: a[0], xs))[0]
        else:
            acc = jax.lax.scan(one, acc, xs)[0]
    return acc
