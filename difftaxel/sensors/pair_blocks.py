"""The primitives of ProximityTaxel's pair sums, shared by the every-probe pass
(:mod:`difftaxel.sensors.pairs`) and the windowed one (:mod:`difftaxel.sensors.pair_windows`):
blocks of consecutive points, their per-block sums against the probes, which blocks lie near
the probes, and the dense and sparse passes over one rigid body's blocks.

For probes ``p`` (three ``[N]`` planes, m), sensing radii ``radii [B, N]`` and points ``x``
(three ``[K]`` planes), a block's sums run over points of ``P = R - d`` for ``0 < d <= R``
(``d = |x - p|``), of ``P (x - p)`` (``with_d``) and of ``P f`` for each per-point feature.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._numerics import eps as _eps
from .._numerics import running_count
from ..geometry.planes import affine_planes

Array = jax.Array

#: a masked point is moved this far (m): it is no probe's neighbour
FAR = 1e6


def _block_sums(acc, blk, p, radii, with_d: bool, value_only: bool = False):
    """Add a block of points (``x``, ``y``, ``z``, then the features, each ``[C]``) to the
    accumulators. XLA evaluates every output of a fusion separately, so the sums travel in
    pairs as complex accumulators (``S + i D_x``, ``D_y + i D_z``, ...): the pair arithmetic
    is done once per accumulator, not once per sum. ``value_only`` (a pass that is never
    differentiated) takes the square root of ``d^2 >= 0`` as it is: the same values, without
    the guard that keeps the derivative at ``d = 0`` finite."""
    px, py, pz = p
    cx, cy, cz, *cf = blk
    eps = _eps(radii.dtype)
    r2 = radii * radii
    n_terms = 1 + 3 * bool(with_d) + len(cf)
    for k in range(cx.shape[0]):  # unrolled: one fused loop over the probes per point
        dx, dy, dz = cx[k] - px, cy[k] - py, cz[k] - pz  # [N]
        d2 = dx * dx + dy * dy + dz * dz
        if value_only:
            dist = jnp.sqrt(d2)
        else:
            pos = d2 > 0
            dist = jnp.where(pos, jnp.sqrt(jnp.where(pos, d2, 1.0)), 0.0)
        hit = (d2[None] <= r2) & (dist[None] > eps)  # [B, N]
        P = jnp.where(hit, radii - dist[None], 0.0)
        t = [P]
        if with_d:
            t += [P * dx[None], P * dy[None], P * dz[None]]
        t += [P * f[k] for f in cf]
        acc = tuple(
            a + (jax.lax.complex(t[2 * j], t[2 * j + 1]) if 2 * j + 1 < n_terms else t[2 * j])
            for j, a in enumerate(acc)
        )
    return acc


def _zeros(radii, n_terms):
    ctype = jnp.result_type(radii.dtype, jnp.complex64)
    return tuple(
        jnp.zeros(radii.shape, ctype if 2 * j + 1 < n_terms else radii.dtype)
        for j in range((n_terms + 1) // 2)
    )


def _unpack(acc, with_d: bool):
    sums = []
    for a in acc:
        sums += [a.real, a.imag] if jnp.iscomplexobj(a) else [a]
    D = tuple(sums[1:4]) if with_d else None
    return sums[0], D, tuple(sums[1 + 3 * bool(with_d) :])


def pair_sums_dense(p, radii, x, feats, block: int, with_d: bool):
    """Every point against every probe, in a ``scan`` over blocks of ``block`` points."""
    n_terms = 1 + 3 * bool(with_d) + len(feats)

    def body(acc, blk):
        return _block_sums(acc, blk, p, radii, with_d), None

    acc, _ = jax.lax.scan(body, _zeros(radii, n_terms), _blocks(x, feats, block))
    return _unpack(acc, with_d)


def block_shape(K: int, block: int) -> tuple[int, int]:
    """``(n_blocks, C)``: ``K`` points cut in blocks of equal size ``C <= block``, the least
    padding (the blocks the sums visit)."""
    n_blocks = max(1, -(-K // max(1, block)))
    return n_blocks, max(1, -(-K // n_blocks))


def _blocks(x, feats, block: int):
    """Points and features padded (far points, zero features) and cut in ``[n_blocks, C]``
    blocks (:func:`block_shape`)."""
    K = x[0].shape[0]
    n_blocks, C = block_shape(K, block)
    pad = n_blocks * C - K
    x = tuple(jnp.concatenate([q, jnp.full((pad,), FAR, q.dtype)]) for q in x)
    feats = tuple(jnp.concatenate([f, jnp.zeros((pad,), f.dtype)]) for f in feats)
    return tuple(q.reshape(n_blocks, C) for q in (*x, *feats))


def _rigid_dense(p, radii, R, t, pb, on, block: int, with_d: bool):
    world = affine_planes(R, t, *pb)
    world = tuple(jnp.where(on, q, FAR) for q in world)
    return pair_sums_dense(p, radii, world, (), block, with_d)


def block_order(p, radii, R, t, cols, on):
    """``(order [nb + 1], count [])``: the indices of the blocks ``cols`` (three ``[nb, C]``
    planes, body frame, padded with far points) whose body-frame box meets the probes' box
    grown by the largest radius (:func:`blocks_near`), first, in block order; ``count`` of
    them."""
    meets = blocks_near(p, radii, R, t, cols, on)
    nb = cols[0].shape[0]
    cum = running_count(meets)
    slots = jnp.where(meets, cum - 1, nb)
    order = jnp.zeros((nb + 1,), jnp.int32).at[slots].set(jnp.arange(nb, dtype=jnp.int32))
    return order, cum[-1]


def blocks_near(p, radii, R, t, cols, on):
    """``[nb]`` bool: the blocks ``cols`` (three ``[nb, C]`` planes, body frame, padded with
    far points) whose body-frame box meets the probes' box grown by the largest radius (all
    False unless ``on``)."""
    nb = cols[0].shape[0]
    # the probes' box: the eight corners of their box in their own frame, taken into the
    # body frame (the same box when the probes lie on an axis-aligned rectangle, such as a
    # grid on a face of the link; a larger one otherwise); why: eight points a step, not N
    lo_p = [jnp.min(q) for q in p]
    hi_p = [jnp.max(q) for q in p]
    corners = [jnp.stack([(lo_p[i], hi_p[i])[(k >> i) & 1] for k in range(8)]) for i in range(3)]
    qb = affine_planes(R.T, -(R.T @ t), *corners)  # three [8], body frame
    margin = reach(p, radii, t)
    meets = jnp.broadcast_to(on, (nb,))
    for q, c in zip(qb, cols, strict=True):
        real = c < 0.5 * FAR
        lo = jnp.min(jnp.where(real, c, jnp.inf), 1)
        hi = jnp.max(jnp.where(real, c, -jnp.inf), 1)
        meets = meets & (lo <= jnp.max(q) + margin) & (hi >= jnp.min(q) - margin)
    return meets


def reach(p, radii, t):
    """``[]``: the largest radius with a relative margin (m), so that a point whose
    distance rounds to at most its probe's radius is never culled."""
    rmax = jnp.max(radii)
    scale = jnp.max(jnp.stack([jnp.max(jnp.abs(q)) for q in p])) + jnp.max(jnp.abs(t)) + rmax
    return rmax * (1.0 + 1e-3) + 64 * _eps(radii.dtype) * scale


def _rigid_sparse(p, radii, R, t, pb, on, block: int, with_d: bool):
    """Block boxes in the body frame (the same for every environment) against the probes'
    box taken into the body frame; only the visited blocks are moved to the probes' frame."""
    cols = _blocks(pb, (), block)  # [nb, C] body frame
    order, count = block_order(p, radii, R, t, cols, on)
    n_terms = 1 + 3 * bool(with_d)

    def cond(carry):
        return carry[0] < count

    def body(carry):
        k, acc = carry
        blk = affine_planes(R, t, *(c[order[k]] for c in cols))
        return k + 1, _block_sums(acc, blk, p, radii, with_d, value_only=True)

    _, acc = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), _zeros(radii, n_terms)))
    return _unpack(acc, with_d)
