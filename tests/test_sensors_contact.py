"""ContactDepthProbe, ContactProbe, KinematicTaxel: closed forms, gradients, transforms, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import difftaxel as dt
from difftaxel import pose as P
from difftaxel.sensors import ContactDepthProbe, ContactProbe, KinematicTaxel, make_inputs
from difftaxel.testing import (
    assert_finite_tree,
    assert_jit_matches_eager,
    assert_no_recompile,
    assert_trees_close,
    assert_vmap_matches_loop,
    check_grad_fd,
)

IDENT = np.array([0.0, 0, 0, 0, 0, 0, 1])
GRID = dt.generate_grid_points_on_plane((-0.006, -0.006, 0), (0.006, 0.006, 0), (0, 0, 1), 5, 5)


def sphere_inputs(z=0.009, twist=None, R=0.01, link=IDENT, link_twist=None):
    b = dt.Bodies((dt.Sphere(radius=R),), np.array([[0.001, -0.0005, z, 0, 0, 0, 1]]), twist)
    return make_inputs(link, b, twist_link=link_twist)


def plane_inputs(height, twist):
    b = dt.Bodies((dt.Plane(),), np.array([[0, 0, -height, 0, 0, 0, 1.0]]), np.asarray([twist]))
    return make_inputs(IDENT, b)


# ----------------------------------------------------------------------------- closed forms


def test_hertz_sphere_grid():
    k, e, r = 2000.0, 1.5, 0.002
    kt = KinematicTaxel(
        probe_local_pos=GRID,
        probe_radius=r,
        normal_stiffness=k,
        normal_exponent=e,
        normal_damping=0.0,
    )
    inp = sphere_inputs()
    _, rd = kt.step(kt.init_state(), inp)
    c = np.array([0.001, -0.0005, 0.009])
    d = GRID.reshape(-1, 3) - c
    sd = np.linalg.norm(d, axis=-1) - 0.01
    pen = np.maximum(r - sd, 0)
    F = (k * pen**e)[:, None] * d / np.linalg.norm(d, axis=-1, keepdims=True)
    F[pen <= 0] = 0
    np.testing.assert_allclose(np.asarray(rd.ground_truth.force).reshape(-1, 3), F, atol=1e-13)
    np.testing.assert_allclose(
        np.asarray(rd.ground_truth.torque).reshape(-1, 3),
        np.cross(GRID.reshape(-1, 3), F),
        atol=1e-15,
    )
    assert (pen > 0).sum() >= 9 and (pen == 0).sum() >= 3  # both regimes covered
    # depth probe: max(0, r - sd)
    cdp = ContactDepthProbe(probe_local_pos=GRID, probe_radius=r)
    _, d_r = cdp.step(cdp.init_state(), inp)
    np.testing.assert_allclose(np.asarray(d_r.ground_truth).reshape(-1), pen, atol=1e-16)


def test_sliding_flat_shear_and_damping():
    k, ks, c = 500.0, 3.0, 20.0
    v = np.array([0.1, -0.05, 0.02])
    kt = KinematicTaxel(
        probe_local_pos=GRID,
        probe_radius=0.002,
        normal_stiffness=k,
        shear_scalar=ks,
        normal_damping=c,
        twist_scalar=0.0,
    )
    _, rd = kt.step(kt.init_state(), plane_inputs(0.0005, np.r_[v, 0, 0, 0]))
    pen = 0.002 - 0.0005
    n = np.array([0, 0, 1.0])
    F = k * pen * n + c * pen * v[2] * n - ks * np.array([v[0], v[1], 0])
    np.testing.assert_allclose(
        np.asarray(rd.ground_truth.force).reshape(-1, 3), np.broadcast_to(F, (25, 3)), atol=1e-14
    )


def test_spinning_object_twist():
    kt_tw, ks, k = 0.7, 2.0, 100.0
    w = 3.0
    kt = KinematicTaxel(
        probe_local_pos=GRID,
        probe_radius=0.002,
        normal_stiffness=k,
        shear_scalar=ks,
        normal_damping=0.0,
        twist_scalar=kt_tw,
    )
    _, rd = kt.step(kt.init_state(), plane_inputs(0.001, [0, 0, 0, 0, 0, w]))
    p = GRID.reshape(-1, 3)
    pen = 0.001
    v = np.cross([0, 0, w], p - [0, 0, -0.001])  # material point velocity of the plane
    F = k * pen * np.array([0, 0, 1.0]) - ks * v * [1, 1, 0]
    T = np.cross(p, F) - kt_tw * w * np.array([0, 0, 1.0])
    np.testing.assert_allclose(np.asarray(rd.ground_truth.force).reshape(-1, 3), F, atol=1e-14)
    np.testing.assert_allclose(np.asarray(rd.ground_truth.torque).reshape(-1, 3), T, atol=1e-14)


def test_moving_sensor_relative_velocity():
    """A sensor moving with the object reads no shear or damping: only relative motion counts."""
    q = P.quat_from_axis_angle(jnp.array([0.0, 1.0, 0.0]), 0.3)
    link = np.r_[0.01, 0.02, 0.03, np.asarray(q)]
    tw = np.array([0.1, 0.2, -0.1, 0.5, -1.0, 2.0])
    # put a sphere rigidly attached to the link, moving with the same rigid motion
    c_local = np.array([0.0, 0.0, 0.0085])
    c_world = np.asarray(P.apply(jnp.asarray(link), jnp.asarray(c_local)))
    v_c = tw[:3] + np.cross(tw[3:], c_world - link[:3])
    b = dt.Bodies(
        (dt.Sphere(radius=0.01),), np.r_[c_world, 0, 0, 0, 1.0][None], np.r_[v_c, tw[3:]][None]
    )
    inp = make_inputs(link, b, twist_link=tw)
    kt = KinematicTaxel(probe_local_pos=GRID, probe_radius=0.002)
    _, rd = kt.step(kt.init_state(), inp)
    kt0 = KinematicTaxel(probe_local_pos=GRID, probe_radius=0.002)
    b0 = dt.Bodies((dt.Sphere(radius=0.01),), np.r_[c_local, 0, 0, 0, 1.0][None])
    _, r0 = kt0.step(kt0.init_state(), make_inputs(IDENT, b0))
    np.testing.assert_allclose(rd.ground_truth.force, r0.ground_truth.force, atol=1e-12)
    np.testing.assert_allclose(rd.ground_truth.torque, r0.ground_truth.torque, atol=1e-12)


def test_genesis_box_probe_hysteresis_sequence():
    """Genesis test 4: box 0.2 on a floor, probe (0, 0, -0.05) r 0.06: depth = 0.11 - z."""
    probe = dict(probe_local_pos=[[0.0, 0.0, -0.05]], probe_radius=0.06)
    latched = ContactProbe(**probe, contact_threshold=0.03, release_threshold=0.015)
    plain = ContactProbe(**probe, contact_threshold=0.03)
    floor = dt.Bodies((dt.Plane(),), IDENT[None])

    def at(z):
        return make_inputs(np.r_[0, 0, z, 0, 0, 0, 1.0], floor)

    sl, sp = latched.init_state(), plain.init_state()
    expect = [
        (1.0, False, False),
        (0.09, False, False),
        (0.07, True, True),
        (0.09, True, False),
        (0.099, False, False),
        (0.09, False, False),
        (0.07, True, True),
    ]
    step_l, step_p = jax.jit(latched.step), jax.jit(plain.step)
    for z, el, ep in expect:
        sl, rl = step_l(sl, at(z))
        sp, rp = step_p(sp, at(z))
        assert bool(rl.measured[0]) is el and bool(rl.ground_truth[0]) is el, z
        assert bool(rp.measured[0]) is ep, z
    sl = latched.init_state()  # reset clears the latch
    _, rl = step_l(sl, at(0.09))
    assert not bool(rl.measured[0])


def test_fillers_read_zero_and_filter_mask():
    r = np.full(25, 0.002)
    r[[0, 6, 12]] = 0.0
    kt = KinematicTaxel(probe_local_pos=GRID, probe_radius=r)
    cp = ContactProbe(probe_local_pos=GRID, probe_radius=r)
    inp = sphere_inputs(z=0.0085)
    _, rk = kt.step(kt.init_state(), inp)
    _, rc = cp.step(cp.init_state(), inp)
    f = np.asarray(rk.measured.force).reshape(-1, 3)
    assert np.all(f[[0, 6, 12]] == 0) and np.abs(f).sum() > 0
    assert not np.asarray(rc.measured).reshape(-1)[[0, 6, 12]].any()
    kt_f = KinematicTaxel(probe_local_pos=GRID, probe_radius=0.002, filter_link_idx=(0,))
    _, rf = kt_f.step(kt_f.init_state(), inp)
    assert np.all(np.asarray(rf.ground_truth.force) == 0)


def test_gain_and_radius_noise():
    inp = sphere_inputs(z=0.0085)
    base = ContactDepthProbe(probe_local_pos=GRID, probe_radius=0.002)
    gained = ContactDepthProbe(probe_local_pos=GRID, probe_radius=0.002, probe_gain=1.5)
    _, r0 = base.step(base.init_state(), inp)
    _, r1 = gained.step(gained.init_state(), inp)
    np.testing.assert_allclose(r1.measured, 1.5 * np.asarray(r0.measured), atol=1e-16)
    np.testing.assert_array_equal(r1.ground_truth, r0.ground_truth)
    # KinematicTaxel: linear spring, no damping/shear: force scales like gain
    kw = dict(probe_local_pos=GRID, probe_radius=0.002, normal_damping=0.0, shear_scalar=0.0)
    k0, k1 = KinematicTaxel(**kw), KinematicTaxel(**kw, probe_gain=1.5)
    _, f0 = k0.step(k0.init_state(), inp)
    _, f1 = k1.step(k1.init_state(), inp)
    np.testing.assert_allclose(f1.measured.force, 1.5 * np.asarray(f0.measured.force), atol=1e-13)
    # radius noise: measured differs from GT, deterministic per key, bounded by the noise
    noisy = ContactDepthProbe(probe_local_pos=GRID, probe_radius=0.002, probe_radius_noise=5e-4)
    key = jax.random.key(0)
    _, ra = noisy.step(noisy.init_state(), inp, key)
    _, rb = noisy.step(noisy.init_state(), inp, key)
    np.testing.assert_array_equal(ra.measured, rb.measured)
    diff = np.asarray(ra.measured) - np.asarray(ra.ground_truth)
    assert np.abs(diff).max() > 0 and np.abs(diff).max() <= 5e-4 + 1e-15
    # gain resampled per reset from the key
    rs = ContactDepthProbe(
        probe_local_pos=GRID, probe_radius=0.002, probe_gain_resample_range=(0.5, 1.5)
    )
    g1 = rs.init_state(jax.random.key(1)).probe_gain
    g2 = rs.init_state(jax.random.key(2)).probe_gain
    assert np.all((g1 >= 0.5) & (g1 <= 1.5)) and np.std(g1) > 0.01
    assert not np.allclose(g1, g2)


def test_raycast_semantics_depth_collapses():
    cdp = ContactDepthProbe(
        probe_local_pos=[[0.0, 0, 0]], probe_radius=0.002, contact_depth_query="raycast"
    )
    sdf = ContactDepthProbe(probe_local_pos=[[0.0, 0, 0]], probe_radius=0.002)
    for depth_below, want in [(0.001, 0.003), (0.0, 0.002), (0.003, 0.0)]:
        inp = plane_inputs(-depth_below, np.zeros(6))  # probe depth_below inside the plane
        _, r = cdp.step(cdp.init_state(), inp)
        np.testing.assert_allclose(r.ground_truth[0], want, atol=1e-15)
    _, r = sdf.step(sdf.init_state(), plane_inputs(-0.003, np.zeros(6)))
    np.testing.assert_allclose(r.ground_truth[0], 0.005, atol=1e-15)


# ----------------------------------------------------------------------------- transforms


@pytest.fixture(scope="module")
def kt_scene():
    kt = KinematicTaxel(
        probe_local_pos=GRID,
        probe_radius=0.002,
        normal_stiffness=2000.0,
        normal_exponent=1.5,
        normal_damping=30.0,
        shear_scalar=2.0,
        twist_scalar=0.5,
    )
    inp = sphere_inputs(twist=np.array([[0.05, -0.02, -0.01, 0.3, -0.2, 2.0]]))
    return kt, inp


def test_jit_vmap_no_recompile(kt_scene):
    kt, inp = kt_scene
    st = kt.init_state()
    assert_jit_matches_eager(kt.step, st, inp)
    zs = jnp.array([0.0085, 0.009, 0.0095, 0.012])

    def env(z):
        b = inp.bodies.with_state(inp.bodies.poses.at[0, 2].set(z))
        return kt.step(st, inp.replace(bodies=b))[1]

    assert_vmap_matches_loop(env, (zs,))
    f = jax.jit(lambda s, i: kt.step(s, i))
    inp2 = inp.replace(bodies=inp.bodies.with_state(inp.bodies.poses.at[0, 2].add(1e-4)))
    assert_no_recompile(f, (st, inp), (st, inp2))
    # an option given as an array is a leaf: a new value (a calibration step) reuses the program
    h = jax.jit(lambda k, s, i: k.step(s, i))
    ka, kb = (kt.replace(normal_stiffness=jnp.asarray(v)) for v in (2000.0, 10.0))
    assert_no_recompile(h, (ka, st, inp), (kb, st, inp))
    # and the helper sees a retrace: another shape of input
    with pytest.raises(AssertionError, match="no recompilation after the first call"):
        assert_no_recompile(jax.jit(lambda x: 2 * x), (jnp.ones(2),), (jnp.ones(3),))
    with pytest.raises(ValueError, match="calls"):
        assert_no_recompile(h, (ka, st, inp))


def _loss(reading):
    w = jnp.linspace(0.5, 1.5, 3)
    w = w.reshape((1,) * (reading.force.ndim - 1) + (3,))
    return jnp.sum(reading.force * w) + 10.0 * jnp.sum(reading.torque * w[..., ::-1])


def test_gradients_match_finite_differences(kt_scene):
    kt, inp = kt_scene
    st = kt.init_state()
    # probes strictly in or strictly out of contact: move away from onset
    pen = 0.002 - (np.linalg.norm(GRID.reshape(-1, 3) - [0.001, -0.0005, 0.009], axis=-1) - 0.01)
    assert np.min(np.abs(pen)) > 5e-5

    def with_params(obj_pose, link_pose, probes, radius, k, c, e, ks, kw):
        s = kt.replace(
            probe_local_pos=probes,
            probe_radius=radius,
            normal_stiffness=k,
            normal_damping=c,
            normal_exponent=e,
            shear_scalar=ks,
            twist_scalar=kw,
        )
        b = inp.bodies.with_state(obj_pose[None])
        return _loss(s.step(st, inp.replace(bodies=b, T_world_link=link_pose))[1].ground_truth)

    args = dict(
        obj_pose=inp.bodies.poses[0],
        link_pose=inp.T_world_link,
        probes=kt.probe_local_pos,
        radius=kt.probe_radius,
        k=kt.normal_stiffness,
        c=kt.normal_damping,
        e=kt.normal_exponent,
        ks=kt.shear_scalar,
        kw=kt.twist_scalar,
    )
    # poses through the se(3) tangent (keeps quaternions unit)
    for name in ("obj_pose", "link_pose"):
        T0 = args[name]

        def f(xi, name=name, T0=T0):
            return with_params(**{**args, name: P.compose(T0, P.se3_exp(xi))})

        check_grad_fd(f, jnp.zeros(6), step=1e-7, rtol=1e-4, atol=1e-6, jit=True)
    for name in ("probes", "radius", "k", "c", "e", "ks", "kw"):
        x0 = args[name]
        check_grad_fd(
            lambda x, name=name: with_params(**{**args, name: x}),
            x0,
            step=1e-7 if name in ("probes", "radius") else 1e-4,
            rtol=1e-4,
            atol=1e-8,
            coordinates=False,
            n_directions=4,
            jit=True,
        )


def test_gradients_finite_at_onset_zero_velocity_and_far():
    kt = KinematicTaxel(
        probe_local_pos=[[0.0, 0, 0], [0.0, 0.003, 0], [1.0, 0, 0]],
        probe_radius=0.002,
        normal_exponent=1.5,
    )
    st = kt.init_state()
    # sphere bottom exactly at distance r from probe 0 (pen = 0 exactly), zero velocity
    b = dt.Bodies((dt.Sphere(radius=0.01),), np.array([[0.0, 0, 0.012, 0, 0, 0, 1]]))
    inp = make_inputs(IDENT, b)

    def f(pose, e):
        s = kt.replace(normal_exponent=e)
        r = s.step(st, inp.replace(bodies=b.with_state(pose[None])))[1]
        return _loss(r.ground_truth) + _loss(r.measured)

    g = jax.grad(f, argnums=(0, 1))(b.poses[0], kt.normal_exponent)
    assert_finite_tree(g)
    cdp = ContactDepthProbe(probe_local_pos=[[0.0, 0, 0]], probe_radius=0.002)
    g = jax.grad(
        lambda p: cdp.step(cdp.init_state(), inp.replace(bodies=b.with_state(p[None])))[
            1
        ].ground_truth.sum()
    )(b.poses[0])
    assert_finite_tree(g)
    # sphere centre exactly on a probe (zero normal) is finite too
    g = jax.grad(lambda p: f(p, 1.5))(jnp.array([0.0, 0, 0, 0, 0, 0, 1]))
    assert_finite_tree(g)


def test_smoothing_gradient_before_contact_and_convergence():
    def reading(smoothing, z):
        kt = KinematicTaxel(
            probe_local_pos=GRID, probe_radius=0.002, normal_exponent=1.5, smoothing=smoothing
        )
        b = dt.Bodies(
            (dt.Sphere(radius=0.01),),
            np.array([[0.0, 0, z, 0, 0, 0, 1]]),
            np.array([[0.02, 0, 0, 0, 0, 1.0]]),
        )
        return kt, make_inputs(IDENT, b)

    # out of contact by 0.5 mm: exact reading has zero gradient, smoothed (0.2 mm) does not
    for sm, nonzero in ((0.0, False), (2e-4, True)):
        kt, inp = reading(sm, 0.0125)
        st = kt.init_state()

        def f(z, kt=kt, inp=inp, st=st):
            b = inp.bodies.with_state(inp.bodies.poses.at[0, 2].set(z))
            return kt.step(st, inp.replace(bodies=b))[1].ground_truth.force[..., 2].sum()

        g = float(jax.grad(f)(0.0125))
        assert (abs(g) > 1e-3) == nonzero, (sm, g)
    # convergence to the exact readings as the smoothing length shrinks
    kt0, inp = reading(0.0, 0.0092)
    exact = kt0.step(kt0.init_state(), inp)[1].ground_truth.force
    errs = []
    for sm in (1e-4, 1e-5, 1e-6, 1e-7):
        kt, _ = reading(sm, 0.0092)
        errs.append(
            float(jnp.abs(kt.step(kt.init_state(), inp)[1].ground_truth.force - exact).max())
        )
    assert all(b <= a + 1e-15 for a, b in zip(errs, errs[1:], strict=False)), errs
    assert errs[0] > 1e-8  # the smoothing did change the reading at the coarsest scale
    assert errs[-1] < 1e-4 * float(jnp.abs(exact).max())


def test_contact_probe_smooth_latch_is_soft():
    cp = ContactProbe(probe_local_pos=GRID, probe_radius=0.002, smoothing=1e-4)
    st, r = cp.step(cp.init_state(), sphere_inputs(z=0.009))
    m = np.asarray(r.measured)
    assert m.dtype.kind == "f" and np.all((m >= 0) & (m <= 1)) and m.max() > 0.99


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "cls, kw, match",
    [
        (
            KinematicTaxel,
            dict(probe_local_pos=np.zeros((3, 2))),
            r"probe_local_pos: expected shape \(N, 3\)",
        ),
        (
            KinematicTaxel,
            dict(probe_local_pos=np.zeros((2, 3)), probe_radius=-0.1),
            "probe_radius: expected values >= 0",
        ),
        (
            ContactDepthProbe,
            dict(probe_local_pos=np.zeros((2, 3)), probe_radius=[0.1, 0.0]),
            "no fillers",
        ),
        (
            KinematicTaxel,
            dict(probe_local_pos=np.zeros((2, 3)), probe_radius=0.0),
            "every probe is a filler",
        ),
        (KinematicTaxel, dict(normal_exponent=0.5), "KinematicTaxel.normal_exponent"),
        (KinematicTaxel, dict(normal_stiffness=-1.0), "KinematicTaxel.normal_stiffness"),
        (
            ContactProbe,
            dict(contact_threshold=1e-3, release_threshold=2e-3),
            "release_threshold: expected <= contact_threshold",
        ),
        (ContactProbe, dict(probe_gain=0.0), "probe_gain: expected values > 0"),
        (ContactProbe, dict(probe_gain_resample_range=(1.0, 0.5)), "probe_gain_resample_range"),
        (KinematicTaxel, dict(probe_radius=[0.1, 0.1]), "probe_radius: expected a scalar or shape"),
        (KinematicTaxel, dict(contact_depth_query="bvh"), "contact_depth_query"),
        (KinematicTaxel, dict(smoothing=-1.0), "smoothing"),
        (ContactDepthProbe, dict(probe_radius_noise=-1.0), "probe_radius_noise"),
    ],
)
def test_bad_options(cls, kw, match):
    with pytest.raises(ValueError, match=match):
        cls(**kw)


def test_bad_inputs():
    kt = KinematicTaxel(probe_local_pos=GRID, probe_radius=0.002)
    inp = sphere_inputs()
    with pytest.raises(ValueError, match="body_mask: expected shape"):
        make_inputs(IDENT, inp.bodies, body_mask=np.ones(3, bool))
    with pytest.raises(ValueError, match="T_world_link"):
        make_inputs(IDENT[:6], inp.bodies)
    with pytest.raises(ValueError, match="inputs.body_mask"):
        kt.step(kt.init_state(), inp.replace(body_mask=jnp.ones(2, bool)))
    with pytest.raises(ValueError, match="inputs.bodies.twists"):
        kt.step(
            kt.init_state(),
            inp.replace(bodies=inp.bodies.with_state(inp.bodies.poses, jnp.zeros((2, 6)))),
        )
    with pytest.raises(ValueError, match="key: .*PRNG key"):
        ContactProbe(probe_gain_resample_range=(0.5, 1.5)).init_state()
    with pytest.raises(TypeError, match="cannot be traced"):
        jax.jit(lambda k: KinematicTaxel(normal_stiffness=k))(1.0)


def test_float32_runs_and_matches_float64(kt_scene):
    kt, inp = kt_scene
    st = kt.init_state()
    ref = kt.step(st, inp)[1].ground_truth
    f32 = jax.tree.map(
        lambda x: x.astype(jnp.float32) if x.dtype == jnp.float64 else x, (kt, st, inp)
    )
    out = f32[0].step(f32[1], f32[2])[1].ground_truth
    assert out.force.dtype == jnp.float32
    assert_trees_close(out, ref, rtol=2e-3, atol=1e-4 * float(jnp.abs(ref.force).max()))
