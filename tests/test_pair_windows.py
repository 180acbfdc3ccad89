"""ProximityTaxel's windowed pair sums on a probe grid (:mod:`difftaxel.sensors.pair_windows`):
the static window choice; the windowed value equals the exhaustive pass under vmap, unbatched,
nested vmap and with per-environment probes; a window too small for the blocks (a traced radius
larger than the constructor's) or rows out of order fall back to the every-probe pass, and the
windowed sums alone would have been wrong there; derivatives are those of the dense pass."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import difftaxel as dt
from difftaxel import pose as P
from difftaxel.sensors import ProximityTaxel, TrackedPoints, make_inputs
from difftaxel.sensors import proximity as prox_mod
from difftaxel.sensors.pair_windows import choose_window, window_pass
from difftaxel.sensors.pairs import _rigid_dense, pair_sums_rigid
from difftaxel.sensors.proximity import spatial_order

NY = NX = 8
PITCH, RADIUS = 0.003, 0.002


def grid_positions(ny=NY, nx=NX):
    u = (np.arange(nx) - (nx - 1) / 2) * PITCH
    v = (np.arange(ny) - (ny - 1) / 2) * PITCH
    return np.stack(np.meshgrid(u, v, [0.0], indexing="xy"), -1)[:, :, 0]  # [ny, nx, 3]


def sphere_points(n=2000, r=0.01, seed=0):
    v = np.random.default_rng(seed).normal(size=(n, 3))
    pts = r * v / np.linalg.norm(v, axis=-1, keepdims=True)
    return pts[np.asarray(spatial_order(pts, ((0, n),)))]


def planes(a):
    return tuple(jnp.asarray(a[..., i]) for i in range(3))


def poses(E, seed=1):
    """Sphere centres 0.5-1.5 mm into the probe plane at spread xy, random orientations; the
    last environment far away."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(E, 4))
    R = np.asarray(jax.vmap(P.quat_to_matrix)(jnp.asarray(q / np.linalg.norm(q, axis=1)[:, None])))
    t = np.c_[rng.uniform(-0.008, 0.008, (E, 2)), 0.01 - rng.uniform(0.0005, 0.0015, E)]
    t[-1] = [0.2, 0.0, 0.3]
    return jnp.asarray(R), jnp.asarray(t)


def setup(radius=RADIUS, branches=1):
    g = grid_positions()
    pts = sphere_points()
    window = choose_window(g, radius, pts, ((0, len(pts)),), 8)
    radii = jnp.asarray(
        np.stack([np.full(NY * NX, radius * (1 + 0.1 * b)) for b in range(branches)])
    )
    return planes(g.reshape(-1, 3)), radii, planes(pts), window


def dense(p, radii, R, t, pts, on, with_d):
    f = jax.vmap(lambda R, t, on: _rigid_dense(p, radii, R, t, pts, on, 8, with_d))
    return f(R, t, on)


def assert_sums_close(a, b, scale):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-12 * scale)


def test_choose_window():
    g = grid_positions()
    pts = sphere_points()
    # blocks reach 4 rows: 4 x 4 windows starting at every row
    assert choose_window(g, RADIUS, pts, ((0, len(pts)),), 8) == (8, 8, 4, 4, 1, 1)
    # blocks reach 3 rows: 4 x 4 windows starting every other row (and at the last)
    assert choose_window(g, 0.0015, pts, ((0, len(pts)),), 8) == (8, 8, 4, 4, 2, 2)
    # a larger radius reaches more rows: windows of two vectors do not pay on 64 probes...
    assert choose_window(g, 0.004, pts, ((0, len(pts)),), 8) is None
    # ...but do on 1600
    ny, nx, wy, wx, _, _ = choose_window(grid_positions(40, 40), 0.004, pts, ((0, len(pts)),), 8)
    assert (ny, nx) == (40, 40) and 16 < wy * wx <= 32
    assert choose_window(grid_positions(3, 3), RADIUS, pts, ((0, len(pts)),), 8) is None
    # a dense pad (0.6 mm pitch): 16 x 15 windows starting every row or two would keep 62
    # times the grid's sums (36 GB at 10,000 probes x 1024 envs): every probe instead
    dense = grid_positions(50, 50) * 0.2
    assert choose_window(dense, RADIUS, pts, ((0, len(pts)),), 8) is None
    assert choose_window(g[:1], RADIUS, pts, ((0, len(pts)),), 8) is None  # one row
    shuffled = g[np.r_[1, 0, 2:NY]]  # rows out of order: no windows
    assert choose_window(shuffled, RADIUS, pts, ((0, len(pts)),), 8) is None


@pytest.mark.parametrize(
    "with_d,branches,radius,window",
    [pytest.param(False, 1, RADIUS, (1, 1), marks=pytest.mark.slow), (True, 2, 0.0015, (2, 2))],
)
def test_windowed_equals_exhaustive_under_vmap(with_d, branches, radius, window):
    p, radii, pts, window_ = setup(radius, branches=branches)
    assert window_ == (8, 8, 4, 4) + window
    window = window_
    R, t = poses(6)
    on = jnp.array([True] * 4 + [False, True])
    f = jax.jit(
        jax.vmap(lambda R, t, on: pair_sums_rigid(p, radii, R, t, pts, on, 8, with_d, window))
    )
    got = f(R, t, on)
    want = dense(p, radii, R, t, pts, on, with_d)
    scale = float(np.max(np.abs(want[0])))
    assert scale > 0 and float(np.sum(np.asarray(got[0])[4])) == 0.0  # masked: nothing
    assert_sums_close(got, want, scale)
    fast, exhaustive = window_pass(p, radii, R, t, pts, on, 8, with_d, window)
    assert not bool(exhaustive)  # the windows held every block: the windowed sums were used
    assert_sums_close(fast, want, scale)
    # one environment, no vmap: the same values
    one = jax.jit(lambda R, t: pair_sums_rigid(p, radii, R, t, pts, True, 8, with_d, window))
    assert_sums_close(one(R[0], t[0]), jax.tree.map(lambda x: x[0], want), scale)


def test_window_too_small_falls_back_to_every_probe():
    # the window chosen for a 2 mm radius, used with 6 mm (a traced option may do this)
    p, radii, pts, window = setup()
    radii = 3.0 * radii
    R, t = poses(4)
    on = jnp.ones(4, bool)
    fast, exhaustive = window_pass(p, radii, R, t, pts, on, 8, False, window)
    want = dense(p, radii, R, t, pts, on, False)
    scale = float(np.max(np.abs(want[0])))
    assert bool(exhaustive)
    assert float(np.max(np.abs(np.asarray(fast[0]) - np.asarray(want[0])))) > 1e-3 * scale
    f = jax.jit(jax.vmap(lambda R, t: pair_sums_rigid(p, radii, R, t, pts, True, 8, False, window)))
    assert_sums_close(f(R, t), want, scale)


def test_rows_out_of_order_fall_back():
    p, radii, pts, window = setup()
    perm = np.r_[1, 0, 2:NY]  # two rows swapped: the grid's rows are out of order
    p = tuple(q.reshape(NY, NX)[perm].reshape(-1) for q in p)
    R, t = poses(3)
    on = jnp.ones(3, bool)
    _, exhaustive = window_pass(p, radii, R, t, pts, on, 8, True, window)
    assert bool(exhaustive)
    f = jax.jit(jax.vmap(lambda R, t: pair_sums_rigid(p, radii, R, t, pts, True, 8, True, window)))
    want = dense(p, radii, R, t, pts, on, True)
    assert_sums_close(f(R, t), want, float(np.max(np.abs(want[0]))))


def test_per_environment_probes_and_nested_vmap():
    p, radii, pts, window = setup()
    R, t = poses(4)
    on = jnp.ones(4, bool)
    want = dense(p, radii, R, t, pts, on, False)
    scale = float(np.max(np.abs(want[0])))
    # probes batched with the poses: the every-probe pass, per environment
    pb = tuple(jnp.broadcast_to(q, (4,) + q.shape) for q in p)
    f = jax.vmap(lambda p, R, t: pair_sums_rigid(p, radii, R, t, pts, True, 8, False, window))
    assert_sums_close(jax.jit(f)(pb, R, t), want, scale)
    # two levels of vmap ([2, 2] environments)
    g = jax.vmap(
        jax.vmap(lambda R, t: pair_sums_rigid(p, radii, R, t, pts, True, 8, False, window))
    )
    got = jax.jit(g)(R.reshape(2, 2, 3, 3), t.reshape(2, 2, 3))
    assert_sums_close(jax.tree.map(lambda x: x.reshape((4,) + x.shape[2:]), got), want, scale)


def test_derivatives_are_the_dense_pass():
    p, radii, pts, window = setup()
    R, t = poses(3)

    def loss(t, win):
        S, D, _ = pair_sums_rigid(p, radii, R[0], t, pts, True, 8, True, win)
        return jnp.sum(S**2) + sum(jnp.sum(d) for d in D)

    g_win = jax.jit(jax.vmap(jax.grad(lambda t: loss(t, window))))(t)
    g_none = jax.jit(jax.vmap(jax.grad(lambda t: loss(t, None))))(t)
    assert float(np.max(np.abs(np.asarray(g_none)))) > 0
    np.testing.assert_allclose(np.asarray(g_win), np.asarray(g_none), rtol=1e-12, atol=0)


def test_sensor_readings_with_and_without_windows(monkeypatch):
    g = grid_positions()
    pts = sphere_points()
    kw = dict(
        probe_local_pos=g,
        probe_radius=RADIUS,
        track_points=TrackedPoints(pts, segments=((0, len(pts)),)),
        shear_coupling=0.5,
    )
    fast = ProximityTaxel(**kw)
    monkeypatch.setattr(prox_mod, "choose_window", lambda *a, **k: None)
    slow = ProximityTaxel(**kw)
    assert fast.pair_window[:4] == (8, 8, 4, 4) and slow.pair_window is None
    # the window follows the options: replace re-derives it
    monkeypatch.undo()
    assert fast.replace(probe_radius=0.004).pair_window is None
    assert fast.replace(probe_radius=0.0015).pair_window == (8, 8, 4, 4, 2, 2)

    R, t = poses(4)
    quat = jax.vmap(P.matrix_to_quat)(R)
    body_poses = jnp.concatenate([t, quat], -1)[:, None]  # [E, 1, 7]
    bodies = dt.Bodies((dt.Sphere(radius=0.01),), np.zeros((1, 7)) + [0, 0, 0, 0, 0, 0, 1], None)
    inp = make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), bodies, dt=0.005)

    def read(sensor, pose):
        b = inp.bodies.with_state(pose, jnp.asarray([[0.01, 0.0, 0.0, 0.0, 0.0, 2.0]]))
        st = sensor.init_state()
        return sensor.step(st, inp.replace(bodies=b))[1]

    a = jax.jit(jax.vmap(read, in_axes=(None, 0)))(fast, body_poses)
    b = jax.jit(jax.vmap(read, in_axes=(None, 0)))(slow, body_poses)
    scale = max(float(np.max(np.abs(np.asarray(x)))) for x in jax.tree.leaves(b))
    assert scale > 0
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-10 * scale)
