"""ProximityTaxel's spatial pre-selection (``max_candidates``): the same readings and gradients
as every point against every probe while the capacity holds, a sticky overflow flag when it
does not, vmap == loop, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import trimesh

import difftaxel as dt
from difftaxel.layout import generate_grid_points_on_plane
from difftaxel.sensors import ProximityTaxel, TrackedPoints, make_inputs
from difftaxel.testing import assert_trees_close, assert_vmap_matches_loop, check_grad_fd

# a rotated, offset link (the cull works in the link frame) and two tracked bodies
Q_LINK = np.array([0.1, -0.2, 0.3, 0.9])
Q_LINK = Q_LINK / np.linalg.norm(Q_LINK)
T_LINK = np.array([0.05, -0.02, 0.3, *Q_LINK])


def _scene():
    grid = generate_grid_points_on_plane((-0.006, -0.006, 0), (0.006, 0.006, 0), (0, 0, 1), 5, 5)
    sph, _ = dt.sample_surface_points(trimesh.creation.icosphere(3, 0.01), 200)
    box, _ = dt.sample_surface_points(trimesh.creation.box((0.02, 0.02, 0.02)), 120)
    track = TrackedPoints(np.concatenate([sph, box]), ((0, 200), (1, 120)))
    # bodies placed in the link frame, then mapped to the world frame
    local = np.array([[0.001, -0.0005, 0.0105, 0, 0, 0, 1.0], [0.009, 0.004, 0.0115, 0, 0, 0, 1.0]])
    world = np.asarray(dt.pose.compose(jnp.asarray(T_LINK)[None], jnp.asarray(local)))
    bodies = dt.Bodies(
        (dt.Sphere(radius=0.01), dt.Box(size=[0.02, 0.02, 0.02])),
        world,
        np.array([[0.02, 0.01, 0.0, 0.0, 0.0, 2.0], [-0.01, 0.0, 0.01, 1.0, 0.0, 0.0]]),
    )
    inp = make_inputs(T_LINK, bodies, twist_link=np.array([0.0, 0.01, 0, 0, 0.5, 0]))
    return grid, track, inp


def _sensor(grid, track, **kw):
    base = dict(
        probe_local_pos=grid,
        track_points=track,
        probe_radius=0.003,
        probe_radius_noise=2e-4,
        shear_coupling=5.0,
    )
    base.update(kw)
    return ProximityTaxel(**base)


def _n_inside(sensor, inp, r_max=0.003 + 5 * 2e-4):
    """Tracked points inside the probes' bounding box grown by ``r_max`` (numpy count)."""
    pts, start = [], 0
    for b, c in sensor.track_points.segments:
        T_lb = dt.pose.relative(inp.T_world_link, inp.bodies.poses[b])
        pts.append(np.asarray(dt.pose.apply(T_lb, sensor.track_points.points[start : start + c])))
        start += c
    pts = np.concatenate(pts)
    q = np.asarray(sensor.probe_local_pos).reshape(-1, 3)
    return int(np.sum(np.all((pts >= q.min(0) - r_max) & (pts <= q.max(0) + r_max), -1)))


@pytest.fixture(scope="module")
def scene():
    return _scene()


@pytest.mark.slow  # 10-35 s; CI runs it with the slow cases
def test_preselection_equals_exhaustive_and_flags_overflow(scene):
    grid, track, inp = scene
    full = _sensor(grid, track)
    n_in = _n_inside(full, inp)
    assert 10 < n_in < 200  # the scene exercises the cull: some points in, most out
    key = jax.random.key(3)
    step = jax.jit(lambda s, st, i, k: s.step(st, i, k))
    st_f, r_f = step(full, full.init_state(), inp, key)
    for cap in (n_in + 40, 320):  # with room to spare; and = every point (no selection)
        sel = full.replace(max_candidates=cap)
        st_s, r_s = step(sel, sel.init_state(), inp, key)
        assert not bool(st_s.candidate_overflow)
        assert_trees_close(r_s, r_f, rtol=1e-12, atol=1e-14)
    # without shear (the candidates' loop sums only P and P w), both bodies contributing
    no_shear = _sensor(grid, track, shear_coupling=0.0)
    r_ns = step(no_shear, no_shear.init_state(), inp, key)[1]
    sel = no_shear.replace(max_candidates=n_in + 40)
    assert_trees_close(step(sel, sel.init_state(), inp, key)[1], r_ns, rtol=1e-12, atol=1e-14)
    assert np.max(np.abs(np.asarray(r_ns.ground_truth.torque))) > 0
    for b in (0, 1):  # each body alone changes the readings: both are in range
        only = inp.replace(body_mask=jnp.arange(2) == b)
        r_b = step(full, full.init_state(), only, key)[1].ground_truth.force
        assert np.max(np.abs(np.asarray(r_b))) > 1e-6
    # one body masked off: its points are never candidates
    inp_m = inp.replace(body_mask=jnp.array([True, False]))
    sel = full.replace(max_candidates=n_in + 40)
    assert_trees_close(
        step(sel, sel.init_state(), inp_m, key)[1],
        step(full, full.init_state(), inp_m, key)[1],
        rtol=1e-12,
        atol=1e-14,
    )
    # too small a capacity: flagged, sticky across steps, readings miss points
    small = full.replace(max_candidates=max(1, n_in // 3))
    st, r = step(small, small.init_state(), inp, key)
    assert bool(st.candidate_overflow)
    assert np.max(np.abs(np.asarray(r.ground_truth.force - r_f.ground_truth.force))) > 0
    far = inp.replace(T_world_link=inp.T_world_link.at[2].add(1.0))  # nothing near now
    st2, _ = step(small, st, far, key)
    assert bool(st2.candidate_overflow)
    assert not bool(step(small, small.init_state(), far, key)[0].candidate_overflow)
    assert not bool(st_f.candidate_overflow)


@pytest.mark.slow  # 10-35 s; CI runs it with the slow cases
def test_preselection_gradients(scene):
    grid, track, inp = scene
    sel = _sensor(
        grid,
        track,
        probe_radius_noise=0.0,
        max_candidates=_n_inside(_sensor(grid, track), inp) + 40,
    )
    st = sel.init_state()
    w = jnp.linspace(0.5, 1.5, 3)[None, None]

    def loss_of(sensor):
        def f(params):
            xi, k, probes = params
            b = inp.bodies.with_state(dt.pose.compose(inp.bodies.poses, dt.pose.se3_exp(xi)[None]))
            s = sensor.replace(stiffness=k, probe_local_pos=probes)
            r = s.step(st, inp.replace(bodies=b))[1].ground_truth
            return jnp.sum(r.force * w) + 100 * jnp.sum(r.torque * w)

        return f

    f, f_full = loss_of(sel), loss_of(sel.replace(max_candidates=None))
    params = (jnp.zeros(6), sel.stiffness, sel.probe_local_pos)
    check_grad_fd(
        jax.jit(f), params, step=1e-8, rtol=1e-4, atol=1e-6, coordinates=False, n_directions=5
    )
    assert_trees_close(
        jax.jit(jax.grad(f))(params), jax.jit(jax.grad(f_full))(params), rtol=1e-10, atol=1e-14
    )


@pytest.mark.slow  # 10-35 s; CI runs it with the slow cases
def test_preselection_vmap_matches_loop(scene):
    grid, track, inp = scene
    sel = _sensor(grid, track, probe_radius_noise=0.0, max_candidates=64)
    st = sel.init_state()
    dz = jnp.array([-0.001, 0.0, 0.002, 0.02])

    def f(d):
        b = inp.bodies.with_state(inp.bodies.poses.at[:, 2].add(d))
        s1, r = sel.step(st, inp.replace(bodies=b))
        return r.ground_truth.force, s1.candidate_overflow

    assert_vmap_matches_loop(f, (dz,))


def test_max_candidates_bad_input(scene):
    grid, track, _ = scene
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="ProximityTaxel.max_candidates"):
            _sensor(grid, track, max_candidates=bad)
