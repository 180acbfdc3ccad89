"""The per-link broad phase (``broad_phase="links"``): readings and derivatives equal the
exhaustive pass's (``"off"``) to 1e-12 in float64, over a scene of every shape kind, while a
shape enters and leaves the probes' reach; its lower bounds are lower bounds."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import trimesh

from difftaxel._pytree import replace
from difftaxel.geometry import (
    Bodies,
    Box,
    Capsule,
    ConvexHull,
    Cylinder,
    GridSDF,
    Plane,
    Sphere,
    TriangleMesh,
)
from difftaxel.geometry.bodies import shape_kinds
from difftaxel.geometry.broadphase import grid_patches, kind_lower_bounds, nearest_surface
from difftaxel.geometry.planes import Planes
from difftaxel.sensors import ContactDepthProbe, ContactProbe, KinematicTaxel, make_inputs

jax.config.update("jax_enable_x64", True)

G = np.stack(np.meshgrid(np.linspace(-4e-3, 4e-3, 4), np.linspace(-4e-3, 4e-3, 4)), -1)
PROBES = np.c_[G.reshape(-1, 2), np.zeros(16)]
R = 5e-4
ICO = trimesh.creation.icosphere(subdivisions=1, radius=0.006)


def scene_shapes():
    """Every kind, near and far: body k carries shape k."""
    hull_pts = np.random.default_rng(3).normal(size=(20, 3)) * 0.005
    return (
        Sphere(radius=0.006, body=0),  # the mover: enters and leaves reach
        Box(size=(0.01, 0.01, 0.004), body=1),
        Capsule(radius=0.002, length=0.008, body=2),
        Cylinder(radius=0.003, height=0.006, body=3),
        ConvexHull.from_points(hull_pts, body=4),
        Plane(normal=(0.0, 0.0, 1.0), body=5),
        GridSDF.from_shape(Sphere(radius=0.004), n=12, body=6),
        TriangleMesh.from_trimesh(ICO, body=7),
        Sphere(radius=0.004, body=8),  # far
        ConvexHull.from_points(hull_pts * 1.3, body=9),  # far
        Box(size=(0.01, 0.02, 0.01), body=10),  # far
    )


SHAPES = scene_shapes()


def scene_poses(t):
    """Poses at time ``t`` in [0, 1]: the mover sphere crosses reach twice."""
    z = 0.006 + R - 0.0015 * np.sin(2 * np.pi * t)  # ~1.5 mm in, ~1.5 mm out
    far = [[0.3, 0, 0], [0, 0.4, 0], [-0.2, -0.2, 0.1]]
    pos = [
        [0.0, 0.0, z],
        [0.004, 0.0, -0.0015],
        [-0.004, 0.003, -0.0018],
        [0.0, -0.004, -0.0028],
        [0.002, 0.002, -0.0046],
        [0.0, 0.0, -0.0003],
        [-0.003, -0.003, -0.0038],
        [0.003, -0.003, -0.0058],
        *far,
    ]
    q = np.tile([0.0, 0.0, np.sin(0.15), np.cos(0.15)], (len(pos), 1))
    return np.concatenate([np.asarray(pos, float), q], 1)


TWISTS = np.random.default_rng(1).normal(size=(11, 6)) * 0.05
LINK = np.array([0.0, 0, 0, 0, 0, 0, 1.0])


def inputs(t):
    b = Bodies(SHAPES, scene_poses(t), TWISTS)
    return make_inputs(LINK, b, twist_link=np.r_[0.01, 0, 0, 0, 0.1, 0])


def read(sensor, P, probes, inp=None):
    inp = inputs(0.0) if inp is None else inp
    inp = replace(inp, bodies=replace(inp.bodies, poses=P))
    s = replace(sensor, probe_local_pos=probes)
    key = jax.random.PRNGKey(0)
    out = s.step(s.init_state(key), inp, key)[1]
    return jax.tree.leaves(out)


@jax.jit
def both(P, probes, opts):
    """Readings of every configuration, broad and exhaustive, at poses ``P``."""
    return {
        name: [read(replace(s, broad_phase=bp), P, probes) for bp in ("links", "off")]
        for name, s in opts.items()
    }


SENSORS = {
    "kinematic": KinematicTaxel(probe_local_pos=PROBES, probe_radius=R),
    "smooth": KinematicTaxel(probe_local_pos=PROBES, probe_radius=R, smoothing=2e-4),
    "raycast": KinematicTaxel(
        probe_local_pos=PROBES, probe_radius=R, contact_depth_query="raycast"
    ),
    "noise": KinematicTaxel(probe_local_pos=PROBES, probe_radius=R, probe_radius_noise=2e-4),
    "depth": ContactDepthProbe(probe_local_pos=PROBES, probe_radius=R),
    "contact": ContactProbe(probe_local_pos=PROBES, probe_radius=R, contact_threshold=1e-4),
}


SLOW = pytest.mark.slow  # more of the same: CI's slow run
FAST_SET = ("kinematic",)  # the default run's budget (smoothing: the gradients' test)
SLOW_SET = ("smooth", "raycast", "noise", "contact", "depth")


@pytest.mark.parametrize(
    "names, t, grid",
    [(FAST_SET, 0.0, True), (FAST_SET, 0.5, True)]
    + [pytest.param(SLOW_SET, t, grid, marks=SLOW) for t in (0.0, 0.5) for grid in (0, 1)]
    + [pytest.param(FAST_SET + SLOW_SET, t, False, marks=SLOW) for t in (0.2, 0.75, 0.9)],
)
def test_readings_equal_the_exhaustive_pass_as_a_shape_enters_and_leaves(names, t, grid):
    """``grid``: the probes as a 4 x 4 layout, whose broad phase bounds 2 x 2 patches by a
    ball each (:func:`grid_patches`); flat, one ball around them all."""
    probes = PROBES.reshape(4, 4, 3) if grid else PROBES
    opts = {n: replace(SENSORS[n], probe_local_pos=probes) for n in names}
    out = both(jnp.asarray(scene_poses(t)), jnp.asarray(probes), opts)
    touching = 0
    for name, (a, b) in out.items():
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(
                np.asarray(x), np.asarray(y), rtol=0, atol=1e-12, err_msg=name
            )
        touching += int(np.any(np.abs(np.asarray(b[0])) > 0))
    assert touching > 0  # the scene touches


def loss_fn(sensor):
    def loss(P, probes):
        force, torque = read(sensor, P, probes)[:2]
        return jnp.sum(force**2) + jnp.sum(torque * 1e3)

    return loss


@functools.partial(jax.jit, static_argnums=2)
def grads(P, probes, names):
    """Gradients with respect to every body pose and every probe position, both passes."""
    return {
        name: [
            jax.grad(loss_fn(replace(SENSORS[name], broad_phase=bp)), argnums=(0, 1))(P, probes)
            for bp in ("links", "off")
        ]
        for name in names
    }


@pytest.mark.parametrize(
    "names, t",
    # all in CI's slow run (~15 s each, the default run's budget); the default run checks the
    # broad phase's derivatives against finite differences at contact onset (below)
    [pytest.param(("smooth",), 0.25, marks=SLOW)]
    + [pytest.param(("kinematic", "smooth"), 0.75, marks=SLOW)]
    + [pytest.param(("kinematic",), 0.25, marks=SLOW)],
)
def test_gradients_equal_the_exhaustive_pass(names, t):
    """In contact (t = 0.25) and with the mover out of reach (t = 0.75)."""
    out = grads(jnp.asarray(scene_poses(t)), jnp.asarray(PROBES), names)
    for name, (ga, gb) in out.items():
        for a, b in zip(ga, gb, strict=True):
            assert np.all(np.isfinite(np.asarray(a))), name
            tol = 1e-12 * (1 + np.abs(np.asarray(b)).max())
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=tol, err_msg=name)


def test_gradient_at_contact_onset_matches_finite_differences():
    """A sphere exactly at the centre probes' radius (zero depth) among eight far ones,
    smoothing on: finite, equal to central differences; forward mode equals reverse mode."""
    s = replace(SENSORS["smooth"], broad_phase="links")
    n = 9
    P = np.tile([0.0, 0, 0, 0, 0, 0, 1], (n, 1))
    P[1:, 0] = 0.1 * np.arange(1, n)
    P[0, 2] = 0.006 + R
    inp = make_inputs(LINK, Bodies(tuple(Sphere(radius=0.006, body=i) for i in range(n)), P))
    probes = jnp.asarray(PROBES)

    def f(z):
        force, torque = read(s, jnp.asarray(P).at[0, 2].set(z), probes, inp)[:2]
        return jnp.sum(force**2) + jnp.sum(torque * 1e3)

    f = jax.jit(f)
    g = jax.jit(jax.grad(f))(P[0, 2])
    _, jt = jax.jit(lambda z: jax.jvp(f, (z,), (jnp.ones_like(z),)))(P[0, 2])
    h = 1e-8
    fd = (float(f(P[0, 2] + h)) - float(f(P[0, 2] - h))) / (2 * h)
    assert np.isfinite(g) and g != 0
    np.testing.assert_allclose(float(g), fd, rtol=1e-5)
    np.testing.assert_allclose(float(jt), float(g), rtol=1e-12)


@SLOW  # ~9 s: CI's slow run (the default run is at its 10-minute budget)
def test_vmap_over_environments_equals_a_loop():
    """Environments with different numbers of near shapes in one batch."""
    s = replace(SENSORS["kinematic"], broad_phase="links")
    Ps = jnp.asarray(np.stack([scene_poses(t) for t in (0.0, 0.25, 0.6)]))
    Ps = Ps.at[2, 1:8, :3].add(1.0)  # the third environment: only the mover is near
    probes = jnp.asarray(PROBES)
    batched = jax.jit(jax.vmap(lambda P: read(s, P, probes)))(Ps)
    one = jax.jit(lambda P: read(replace(s, broad_phase="off"), P, probes))
    for e in range(3):
        eager = one(Ps[e])
        for x, y in zip(batched, eager, strict=True):
            np.testing.assert_allclose(np.asarray(x[e]), np.asarray(y), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "kind", [k if k not in (6, 7) else pytest.param(k, marks=SLOW) for k in range(11)]
)
def test_lower_bounds_hold_over_the_ball(kind):
    """For every kind, the shape offset from its body: the bound never exceeds the signed
    distance at points in the ball."""
    rng = np.random.default_rng(kind)
    q = rng.normal(size=4)
    offset = np.r_[rng.normal(size=3) * 0.002, q / np.linalg.norm(q)]  # T_body_shape
    shape = replace(SHAPES[kind], body=0, T_body_shape=jnp.asarray(offset))
    ((idx, td, leaves, _),) = shape_kinds((shape,))
    T = jnp.asarray([[0.001, -0.002, 0.003, 0.0, np.sin(0.3), 0.0, np.cos(0.3)]])
    b = Bodies((shape,), np.asarray(T))
    for _ in range(6):
        c = rng.normal(size=3) * 0.01
        rho = jnp.asarray(abs(rng.normal()) * 0.004)
        lb = kind_lower_bounds(
            td, leaves, T, jnp.asarray(LINK), tuple(jnp.asarray(c)[:, None]), rho[None]
        )[0, 0]
        u = rng.normal(size=(300, 3))
        pts = c + u / np.linalg.norm(u, axis=1, keepdims=True) * float(rho) * rng.uniform(
            size=(300, 1)
        ) ** (1 / 3)
        sd = np.asarray(b.query(pts).sd[0])
        assert float(lb) <= sd.min() + 1e-12, (float(lb), sd.min())


def test_patch_balls_skip_what_one_ball_visits():
    """A small sphere 2 mm over the middle of a 4 x 4 grid of probes (8 mm wide), 2.2 mm from
    the nearest: inside the reach of the ball around every probe, beyond each 2 x 2 patch's.
    One ball visits it (its true distances); the patches skip it (``FAR``). Over a probe,
    0.7 mm from it (in reach), both equal the exhaustive pass."""
    groups = grid_patches((4, 4))
    assert groups == ((0, 1, 4, 5), (2, 3, 6, 7), (8, 9, 12, 13), (10, 11, 14, 15))
    assert grid_patches((16,)) is None and grid_patches((1, 16)) is None
    pts = Planes(*(jnp.asarray(PROBES[:, i]) for i in range(3)))
    kw = dict(shape_on=jnp.ones(1, bool), reach=1e-3)
    b = Bodies((Sphere(radius=5e-4, body=0),), np.array([[0.0, 0, 0, 0, 0, 0, 1]]))

    @jax.jit
    def three(P):  # one ball, patches, every shape at every probe
        b_at = replace(b, poses=P)
        return [
            nearest_surface(b_at, pts, jnp.asarray(LINK), **kw, **opt)
            for opt in ({}, {"groups": groups}, {"broad_phase": False})
        ]

    for c, beyond in (((0.0, 0.0, 2e-3), True), ((*PROBES[5, :2], 1.2e-3), False)):
        one, patches, every = three(jnp.asarray([[*c, 0, 0, 0, 1]]))
        exact = np.linalg.norm(PROBES - np.asarray(c), axis=1) - 5e-4
        np.testing.assert_allclose(np.asarray(one[0]), exact, rtol=0, atol=1e-15)
        np.testing.assert_allclose(np.asarray(every[0]), exact, rtol=0, atol=1e-15)
        if beyond:
            assert exact.min() > 2e-3 and np.all(np.asarray(patches[0]) == 1e6)
        else:
            assert exact.min() < 1e-3
            for a, e in zip(jax.tree.leaves(patches), jax.tree.leaves(every), strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(e))
    for bad in (groups[:3], ((0, 1), ()) + groups, groups + ((0,),)):
        with pytest.raises(ValueError, match="groups"):
            nearest_surface(b, pts, jnp.asarray(LINK), groups=bad, **kw)


def test_nothing_in_reach_reports_far():
    b = Bodies((Sphere(radius=0.01, body=0),), np.array([[1.0, 0, 0, 0, 0, 0, 1]]))
    pts = Planes(*(jnp.asarray(PROBES[:, i]) for i in range(3)))
    sd, _, _ = nearest_surface(b, pts, jnp.asarray(LINK), shape_on=jnp.ones(1, bool), reach=1e-3)
    assert np.all(np.asarray(sd) == 1e6)
    sd, _, k = nearest_surface(
        b, pts, jnp.asarray(LINK), shape_on=jnp.ones(1, bool), reach=1e-3, broad_phase=False
    )
    np.testing.assert_allclose(np.asarray(sd), 0.99 - 0.0, atol=0.01)


def test_program_does_not_grow_with_the_shapes():
    def size(n):
        rng = np.random.default_rng(0)
        poses = np.concatenate([rng.normal(size=(n, 3)), np.tile([0, 0, 0, 1.0], (n, 1))], 1)
        b = Bodies(tuple(Sphere(radius=0.01, body=i) for i in range(n)), poses)
        s = KinematicTaxel(probe_local_pos=PROBES, probe_radius=R, broad_phase="links")
        inp = make_inputs(LINK, b)
        return len(jax.make_jaxpr(lambda i: s.step(s.init_state(), i))(inp).jaxpr.eqns)

    assert size(12) == size(60)


def test_the_option_is_checked_and_auto_follows_the_scene():
    with pytest.raises(ValueError, match="broad_phase"):
        KinematicTaxel(probe_local_pos=PROBES, probe_radius=R, broad_phase="fast")
    s = KinematicTaxel(probe_local_pos=PROBES, probe_radius=R)
    assert s.broad_phase == "auto"
    assert s.uses_broad_phase(inputs(0.0).bodies)  # 11 shapes
    one = Bodies((Sphere(radius=0.01),), LINK[None])
    assert not s.uses_broad_phase(one)
    assert replace(s, broad_phase="links").uses_broad_phase(one)
