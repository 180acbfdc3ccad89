"""ProximityTaxel's pair sums on a probe grid: each visited block against one window of probes.

:func:`~difftaxel.sensors.pairs.pair_sums_rigid` visits only the blocks of a tracked body's
points near the probes, but takes each block against every probe, though a block of a few
millimetres reaches only a few rows and columns of a grid. On a grid layout ``[ny, nx]`` the
sums here take each visited block against one window of ``wy x wx`` probes (rows and columns
of the grid, chosen per block from the block's points; windows start every ``sy`` rows and
``sx`` columns, and at the last that fits) and add the window's sums into per-window
accumulators, folded into the grid once at the end.

Exact, with no capacity: a window is chosen so that every row and column outside it lies
farther than the largest radius from the block's points (measured along the grid's own row
and column directions, which bounds the distance from below). If a block, on any
environment, reaches more rows or columns than the window holds (the window's size is static,
chosen from the constructor's grid and radii, and a traced option may change them), or the
grid's rows or columns are not in order, the step takes the every-probe pass instead, with the
same readings.

Under ``vmap`` the loop over blocks runs as a batched loop written here
(:func:`jax.custom_batching.custom_vmap`): as many trips as the fullest environment needs,
each environment's window picked by a row gather and its sums added by a scatter; a
``while_loop`` under ``vmap`` would instead select its whole carry (every window's
accumulators) on every trip. Under a second ``vmap`` (environments of environments) the
outer one batches this loop the ordinary way: the same values, less of the gain. Values
only: derivatives come from the exhaustive pass (:mod:`difftaxel.sensors.pairs`). It builds on
:mod:`difftaxel.sensors.pair_blocks`, as the every-probe pass does.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .._numerics import compute_once, running_count, runtime_one
from ..crosstalk import grid_metadata
from ..geometry.planes import affine_planes
from .pair_blocks import (
    _block_sums,
    _blocks,
    _rigid_sparse,
    _unpack,
    _zeros,
    block_shape,
    blocks_near,
    reach,
)

Array = jax.Array

#: lanes of one vector register of float32 (AVX-512): a window is grown to fill them
LANES = 16

#: windows are used only while their sums (one per window and probe in it) hold at most this
#: many times the grid's probes
MAX_WINDOW_SUMS = 16


def choose_window(grid: np.ndarray, radius: float, points: np.ndarray, segments, block: int):
    """Static ``(ny, nx, wy, wx, sy, sx)`` windows for the probes ``grid [ny, nx, 3]`` (m, link
    frame), the largest sensing radius ``radius`` (m) and the tracked ``points [M, 3]`` (body
    frames, in the order the sums cut them in blocks of ``block``), or None where windows
    would not pay (a window wider than one vector of :data:`LANES` probes, unless every probe
    takes eight times its vectors; half the grid; or windows whose sums would hold more than
    :data:`MAX_WINDOW_SUMS` times the grid's probes, as on a dense pad, where their memory and
    their fold cost more than they save) or the rows and columns are not in order.

    A block of diameter ``d`` reaches at most ``floor((d + 2 R) / s) + 1`` rows of pitch
    ``s``; the window takes that many (and 5 % more reach), grown to fill a vector of
    :data:`LANES`. Only the speed depends on this choice: a step whose blocks reach beyond the
    window is computed by the every-probe pass."""
    g = np.asarray(grid, np.float64)
    if g.ndim != 3 or min(g.shape[:2]) < 2:
        return None
    ny, nx = g.shape[:2]
    s_v, s_u, t_u, t_v = grid_metadata(g)
    if not (s_v > 0 and s_u > 0):
        return None
    u, v = g @ t_u, g @ t_v  # rows and columns must be in order along the grid's axes
    if not (np.all(v.max(1)[:-1] < v.min(1)[1:]) and np.all(u.max(0)[:-1] < u.min(0)[1:])):
        return None
    pts = np.asarray(points, np.float64)
    diam, start = 0.0, 0
    for _, c in segments:
        if c:
            nb, C = block_shape(c, block)
            seg = pts[start : start + c]
            for b in range(nb):
                q = seg[b * C : (b + 1) * C]
                if len(q):
                    diam = max(diam, float(np.linalg.norm(q.max(0) - q.min(0))))
        start += c
    span = (diam + 2.0 * float(radius)) * 1.05
    wy, wx = min(ny, int(span // s_v) + 1), min(nx, int(span // s_u) + 1)
    need = (wy, wx)
    lanes = LANES * math.ceil(wy * wx / LANES)
    while True:  # fill the vector: more rows or columns at no cost
        if wy < ny and (wy + 1) * wx <= lanes and wy <= wx:
            wy += 1
        elif wx < nx and wy * (wx + 1) <= lanes:
            wx += 1
        elif wy < ny and (wy + 1) * wx <= lanes:
            wy += 1
        else:
            break
    # worth it where a window takes one vector, or an eighth of the vectors of every probe
    # (measured: a 30-probe window on an 11 x 11 pad is slower than every probe)
    if wy * wx > LANES and 8 * math.ceil(wy * wx / LANES) > math.ceil(ny * nx / LANES):
        return None
    if 2 * wy * wx > ny * nx:  # half the grid or more: every probe
        return None
    # windows start every ``w - need + 1`` rows (and at the last row that fits): a block
    # reaching ``need`` rows fits in one of them
    sy, sx = wy - need[0] + 1, wx - need[1] + 1
    n_windows = len(_starts(ny, wy, sy)) * len(_starts(nx, wx, sx))
    if n_windows * wy * wx > MAX_WINDOW_SUMS * ny * nx:
        return None  # each window keeps its own sums: they would outweigh the grid's
    return (ny, nx, wy, wx, sy, sx)


def _grid_frame(p, grid):
    """The grid's unit column and row directions ``eu, ev [3]`` (this step's positions), the
    extent of each row along ``ev`` (``vlo, vhi [ny]``) and of each column along ``eu``
    (``ulo, uhi [nx]``), and whether rows and columns are in order (``[]`` bool)."""
    ny, nx = grid[:2]
    q = [x.reshape(ny, nx) for x in p]
    du = jnp.stack([jnp.mean(x[:, 1:] - x[:, :-1]) for x in q])
    dv = jnp.stack([jnp.mean(x[1:] - x[:-1]) for x in q])
    nu, nv = jnp.sqrt(jnp.sum(du * du)), jnp.sqrt(jnp.sum(dv * dv))
    good = (nu > 0) & (nv > 0)
    eu = du / jnp.where(good, nu, 1.0)
    ev = dv / jnp.where(good, nv, 1.0)
    u = sum(q[i] * eu[i] for i in range(3))  # [ny, nx]
    v = sum(q[i] * ev[i] for i in range(3))
    vlo, vhi = jnp.min(v, 1), jnp.max(v, 1)
    ulo, uhi = jnp.min(u, 0), jnp.max(u, 0)
    good = good & jnp.all(vhi[:-1] < vlo[1:]) & jnp.all(uhi[:-1] < ulo[1:])
    return eu, ev, (vlo, vhi), (ulo, uhi), good


def _starts(n, w, s):
    """The rows where windows of ``w`` of ``n`` rows start: every ``s`` rows, and the last."""
    return np.array(sorted(set(range(0, n - w + 1, s)) | {n - w}))


def _first_and_fit(x, lo, hi, r, n, w, s):
    """Window (``[]`` int: its index in :func:`_starts`) along one grid axis for points at
    coordinates ``x [C]``: the last start at or before the first of the ``n`` rows whose
    extent ``[lo, hi]`` comes within ``r`` of them, and whether every such row is inside."""
    x_lo = x_hi = x[0]
    for k in range(1, x.shape[0]):  # unrolled (why: a reduction is its own kernel)
        x_lo, x_hi = jnp.minimum(x_lo, x[k]), jnp.maximum(x_hi, x[k])
    first = jnp.sum(hi < x_lo - r)
    last = jnp.sum(lo <= x_hi + r) - 1
    ia = jnp.minimum(first // s, len(_starts(n, w, s)) - 1)
    i0 = jnp.minimum(ia * s, n - w)
    return ia, last <= i0 + w - 1


def _batched_order(near):
    """``(order [E, nb + 1], count [E])`` of :func:`~difftaxel.sensors.pairs.block_order`
    for ``near [E, nb]``: the prefix sums by :func:`~difftaxel._numerics.running_count`, and
    the slots one flat scatter (why: a scatter under ``vmap`` first builds ``[E nb, 2]``
    indices)."""
    E, nb = near.shape
    cum = running_count(near)
    base = (nb + 1) * jnp.arange(E, dtype=jnp.int32)[:, None]
    slots = (jnp.where(near, cum - 1, nb) + base).reshape(-1)
    blocks = jnp.broadcast_to(jnp.arange(nb, dtype=jnp.int32), (E, nb)).reshape(-1)
    order = jnp.zeros((E * (nb + 1),), jnp.int32).at[slots].set(blocks)
    return order.reshape(E, nb + 1), cum[:, -1]


def _windowed_batched(p, radii, R, t, pb, on, block, with_d, grid):
    """The sums for ``E`` environments: ``R [E, 3, 3]``, ``t [E, 3]``, ``on [E]``; ``p``,
    ``radii`` and ``pb`` the same for all. Returns ``(S, D, F)`` with a leading ``[E]``."""
    fast, exhaustive = window_pass(p, radii, R, t, pb, on, block, with_d, grid)

    def every_probe(carry):  # at most one trip
        flag, _ = carry
        # tied to the loop's flag: XLA may not hoist the pass out of the loop and run it always
        R_, t_, _ = jax.lax.optimization_barrier((R, t, flag))
        out = jax.vmap(
            lambda R_e, t_e, on_e: _rigid_sparse(p, radii, R_e, t_e, pb, on_e, block, with_d)
        )(R_, t_, on)
        return jnp.zeros_like(flag), out

    # a loop rather than a cond (why: under a second vmap a batched cond runs both branches;
    # a loop runs only while some environment needs the every-probe pass)
    return jax.lax.while_loop(lambda c: c[0], every_probe, (exhaustive, fast))[1]


def window_pass(p, radii, R, t, pb, on, block, with_d, grid):
    """The windowed sums alone (arguments of :func:`_windowed_batched`), and whether they
    must be replaced by the every-probe pass (``[]`` bool: a block reached beyond its window
    on some environment, or the grid's rows or columns are out of order)."""
    ny, nx, wy, wx, sy, sx = grid
    E = R.shape[0]
    cols = _blocks(pb, (), block)  # three [nb, C], body frame
    nb, C = cols[0].shape
    near = jax.vmap(blocks_near, in_axes=(None, None, 0, 0, None, 0))(p, radii, R, t, cols, on)
    order, count = _batched_order(near)
    eu, ev, (vlo, vhi), (ulo, uhi), good = _grid_frame(p, grid)
    B, L = radii.shape[0], wy * wx
    ay, ax = _starts(ny, wy, sy), _starts(nx, wx, sx)
    nwy, nwx = len(ay), len(ax)
    rows = ay[:, None, None, None] + np.arange(wy)[None, None, :, None]
    colx = ax[None, :, None, None] + np.arange(wx)[None, None, None, :]
    idx = (rows * nx + colx).reshape(nwy * nwx, L)  # each window's probes, row-major
    # one row per window: the probes' x, y, z and each branch's radii (a trip gathers one)
    table = jnp.concatenate([x[idx] for x in p] + [radii[b][idx] for b in range(B)], 1)
    points = jnp.stack(cols, 1).reshape(nb, 3 * C)
    n_terms = 1 + 3 * bool(with_d)
    zero = _zeros(jnp.zeros((B, L), radii.dtype), n_terms)  # a window's sums, [B, L] each
    acc0 = tuple(jnp.zeros((E, B, nwy * nwx, L), a.dtype) for a in zero)

    r_env = jax.vmap(lambda t_e: reach(p, radii, t_e))(t)  # [E], once, not once a trip

    def trip(k, acc, bad, R_e, t_e, r, order_e, count_e):
        valid = k < count_e
        pts = points[order_e[k]].reshape(3, C)
        x = affine_planes(R_e, t_e, pts[0], pts[1], pts[2])  # link frame, three [C]
        x = compute_once(runtime_one(x[0]), *x)  # moved once, not once per probe
        iy, fit_v = _first_and_fit(sum(x[i] * ev[i] for i in range(3)), vlo, vhi, r, ny, wy, sy)
        ix, fit_u = _first_and_fit(sum(x[i] * eu[i] for i in range(3)), ulo, uhi, r, nx, wx, sx)
        w = iy * nwx + ix  # the window: its row of starts, its column of starts
        g = table[w]
        g = compute_once(runtime_one(g), g)  # gathered once, not once per point
        gp = (g[:L], g[L : 2 * L], g[2 * L : 3 * L])
        gr = jnp.stack([g[(3 + b) * L : (4 + b) * L] for b in range(B)])
        sums = _block_sums(zero, x, gp, gr, with_d, value_only=True)
        acc = tuple(a.at[:, w].add(jnp.where(valid, s, 0)) for a, s in zip(acc, sums, strict=True))
        return acc, bad | (valid & ~(fit_v & fit_u))

    def body(carry):  # bad: per environment, reduced once after the loop
        k, acc, bad = carry
        args = (k, acc, bad, R, t, r_env, order, count)
        acc, bad = jax.vmap(trip, in_axes=(None,) + (0,) * 7)(*args)
        return k + 1, acc, bad

    init = (jnp.zeros((), jnp.int32), acc0, jnp.zeros((E,), bool))
    kmax = jnp.max(count)
    _, acc, bad = jax.lax.while_loop(lambda c: c[0] < kmax, body, init)
    bad = jnp.any(bad)

    # each window's sums onto its probes: products with 0/1 matrices, columns then rows
    # (why: a few small matrix products, where a sum of shifted copies reads every window
    # once per offset)
    onto_x = np.zeros((nwx, wx, nx), np.float32)
    onto_x[np.arange(nwx)[:, None], np.arange(wx)[None], ax[:, None] + np.arange(wx)[None]] = 1
    onto_y = np.zeros((nwy, wy, ny), np.float32)
    onto_y[np.arange(nwy)[:, None], np.arange(wy)[None], ay[:, None] + np.arange(wy)[None]] = 1

    def fold(a):  # [E, B, nw, L] -> [E, B, N]
        a = a.reshape(E, B, nwy, nwx, wy, wx)
        c = jnp.einsum("ebyxij,xjn->ebyin", a, jnp.asarray(onto_x, a.real.dtype))
        out = jnp.einsum("ebyin,yim->ebmn", c, jnp.asarray(onto_y, a.real.dtype))
        return out.reshape(E, B, ny * nx)

    return _unpack(tuple(fold(a) for a in acc), with_d), bad | ~good


@functools.cache
def windowed_sums(block: int, with_d: bool, grid: tuple):
    """The value of :func:`~difftaxel.sensors.pairs.pair_sums_rigid` on the grid
    ``grid = (ny, nx, wy, wx, sy, sx)`` (:func:`choose_window`), as a function of ``(p, radii, R, t,
    pb, on)`` whose ``vmap`` over ``R``, ``t`` and ``on`` is the batched loop above. Other
    batched arguments (per-environment probes, radii or points) take the every-probe pass."""

    @jax.custom_batching.custom_vmap
    def sums(p, radii, R, t, pb, on):
        out = _windowed_batched(p, radii, R[None], t[None], pb, on[None], block, with_d, grid)
        return jax.tree.map(lambda x: x[0], out)

    @sums.def_vmap
    def _rule(axis_size, in_batched, p, radii, R, t, pb, on):
        b_p, b_r, b_R, b_t, b_pb, b_on = in_batched
        if any(jax.tree.leaves((b_p, b_r, b_pb))):
            axes = jax.tree.map(lambda b: 0 if b else None, tuple(in_batched))
            out = jax.vmap(
                lambda *a: _rigid_sparse(*a, block, with_d), in_axes=axes
            )(p, radii, R, t, pb, on)  # fmt: skip
        else:
            E = axis_size
            R = R if b_R else jnp.broadcast_to(R, (E, 3, 3))
            t = t if b_t else jnp.broadcast_to(t, (E, 3))
            on = on if b_on else jnp.broadcast_to(on, (E,))
            out = _windowed_batched(p, radii, R, t, pb, on, block, with_d, grid)
        return out, jax.tree.map(lambda _: True, out)

    return sums
