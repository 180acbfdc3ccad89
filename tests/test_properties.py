"""Property tests of every sensor (hypothesis, seeded, few examples): readings in the link
frame do not change under a rigid motion of the whole world, a permutation of the probes
permutes the readings, the normal response grows with depth, and forward-mode derivatives
agree with reverse mode.

Each sensor's step is jitted once (the world enters as arguments) and reused across examples.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import difftaxel as dt
from difftaxel import pose as P
from difftaxel.sensors import (
    ContactDepthProbe,
    ContactProbe,
    ElastomerTaxel,
    KinematicTaxel,
    ProximityTaxel,
    SensorInputs,
    TrackedPoints,
)

SETTINGS = settings(max_examples=8, deadline=None, derandomize=True)
PITCH = 0.004
GRID = np.stack(
    list(np.meshgrid(np.arange(3) * PITCH - PITCH, np.arange(3) * PITCH - PITCH, indexing="xy"))
    + [np.zeros((3, 3))],
    -1,
)
_P = np.random.default_rng(0).normal(size=(80, 3))
TRACK = TrackedPoints(
    points=0.01 * _P / np.linalg.norm(_P, axis=1, keepdims=True), segments=((0, 80),)
)
PAD = dt.Box(size=[0.02, 0.02, 0.004], T_body_shape=[0, 0, -0.002, 0, 0, 0, 1])
SHAPES = (dt.Sphere(radius=0.01),)
SENSORS = {
    "depth": ContactDepthProbe(probe_local_pos=GRID, probe_radius=0.002),
    "contact": ContactProbe(probe_local_pos=GRID, probe_radius=0.002, smoothing=1e-4),
    "kinematic": KinematicTaxel(probe_local_pos=GRID, probe_radius=0.002, normal_exponent=1.5),
    "proximity": ProximityTaxel(
        probe_local_pos=GRID, track_points=TRACK, probe_radius=0.004, shear_coupling=0.5
    ),
    "elastomer": ElastomerTaxel(
        probe_local_pos=GRID.reshape(-1, 3),
        track_points=TRACK,
        elastomer_shapes=(PAD,),
        probe_radius=0.002,
    ),
}
DIFFERENTIABLE = ("depth", "contact", "kinematic", "proximity", "elastomer")


def _inputs(T_link, body_pose, twist_link, body_twist):
    b = dt.Bodies(SHAPES, np.zeros((1, 7)) + np.r_[0, 0, 0, 0, 0, 0, 1.0]).with_state(
        body_pose[None], body_twist[None]
    )
    dtype = T_link.dtype
    return SensorInputs(T_link, twist_link, b, jnp.ones(1, bool), jnp.asarray(0.01, dtype))


@functools.cache
def _reader(name):
    s = SENSORS[name]

    @jax.jit
    def read(sensor, T_link, body_pose, twist_link, body_twist):
        inp = _inputs(T_link, body_pose, twist_link, body_twist)
        st0 = sensor.init_state()
        st1, _ = sensor.step(st0, inp)  # one step so the elastomer's anchors exist
        _, r = sensor.step(st1, inp)
        return jax.tree.map(lambda x: x.astype(T_link.dtype), r.ground_truth)

    return functools.partial(read, s)


def _world(depth, dx, dy, v, w):
    T_link = jnp.array([0.0, 0, 0, 0, 0, 0, 1])
    body = jnp.array([dx, dy, 0.01 - depth, 0, 0, 0, 1])
    tw_link = jnp.zeros(6)
    tw_body = jnp.array([v, 0.3 * v, -0.5 * v, 0.2 * w, -0.1 * w, w])
    return T_link, body, tw_link, tw_body


def _rigid(g, T, tw):
    """World moved by the pose ``g``: poses composed, twist vectors rotated."""
    R = P.quat_to_matrix(g[3:])
    return P.compose(g, T), jnp.concatenate([R @ tw[:3], R @ tw[3:]])


def _unit_quat(a, b, c, d):
    q = jnp.array([a, b, c, d + 1e-3])
    return q / jnp.linalg.norm(q)


coord = st.floats(-1.0, 1.0)
world = st.tuples(
    st.floats(0.0, 0.0015), st.floats(-0.003, 0.003), st.floats(-0.003, 0.003),
    st.floats(-0.05, 0.05), st.floats(-1.0, 1.0),
)  # fmt: skip


@pytest.mark.parametrize("name", list(SENSORS))
@SETTINGS
@given(world=world, g=st.tuples(coord, coord, coord, coord, coord, coord, coord))
def test_rigid_motion_of_the_world_leaves_link_readings_unchanged(name, world, g):
    read = _reader(name)
    T_link, body, tw_l, tw_b = _world(*world)
    gp = jnp.concatenate([0.05 * jnp.array(g[:3]), _unit_quat(*g[3:])])
    T2, tw_l2 = _rigid(gp, T_link, tw_l)
    body2, tw_b2 = _rigid(gp, body, tw_b)
    a = read(T_link, body, tw_l, tw_b)
    b = read(T2, body2, tw_l2, tw_b2)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x, float), np.asarray(y, float)
        scale = max(1e-12, np.abs(x).max())
        np.testing.assert_allclose(y, x, atol=1e-9 * scale + 1e-12)


@pytest.mark.parametrize("name", ["depth", "kinematic", "proximity"])
@SETTINGS
@given(world=world, seed=st.integers(0, 2**16))
def test_permuting_probes_permutes_readings(name, world, seed):
    s = SENSORS[name]
    perm = np.random.default_rng(seed).permutation(9)
    flat = s.replace(probe_local_pos=GRID.reshape(-1, 3))
    shuffled = s.replace(probe_local_pos=GRID.reshape(-1, 3)[perm])
    args = _world(*world)
    a = _reader(name).func(flat, *args)
    b = _reader(name).func(shuffled, *args)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x)[perm], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["depth", "kinematic", "proximity", "elastomer"])
@SETTINGS
@given(dx=st.floats(-0.003, 0.003), dy=st.floats(-0.003, 0.003), d=st.floats(0.0, 1.0))
def test_normal_response_grows_with_depth(name, dx, dy, d):
    """A resting sphere pressed deeper never reads less, taxel by taxel: depth, the force
    magnitude (KinematicTaxel), the force along the probe normal (ProximityTaxel, the sphere
    above the probes) and the normal marker displacement (ElastomerTaxel)."""
    read = _reader(name)
    d = -0.003 + 0.0027 * d if name == "proximity" else 0.0014 * d

    def normal(depth):
        r = read(*_world(depth, dx, dy, 0.0, 0.0))
        if name == "depth":
            return np.asarray(r)
        if name == "elastomer":
            return np.asarray(r)[..., 2]
        if name == "kinematic":
            return np.linalg.norm(np.asarray(r.force), axis=-1)
        return np.asarray(r.force)[..., 2]

    a, b = normal(d), normal(d + 2e-4)
    assert np.all(b >= a - 1e-12 * max(1.0, np.abs(a).max()))


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_forward_mode_equals_reverse_mode(name):
    """``<J t, c>`` from ``jax.jvp`` equals ``<t, J^T c>`` from ``jax.vjp`` for random tangents
    of the link and body poses and twists and random cotangents of every reading."""
    read = _reader(name)
    rng = np.random.default_rng(1)
    x = _world(0.0008, 0.0012, -0.0007, 0.03, 0.7)
    for _ in range(2):
        t = tuple(jnp.asarray(rng.normal(size=a.shape)) * 1e-3 for a in x)
        y, jt = jax.jvp(read, x, t)
        c = jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)), y)
        _, vjp = jax.vjp(read, *x)
        ct = vjp(c)
        lhs = sum(
            float(jnp.vdot(a, b))
            for a, b in zip(jax.tree.leaves(jt), jax.tree.leaves(c), strict=True)
        )
        rhs = sum(float(jnp.vdot(a, b)) for a, b in zip(t, ct, strict=True))
        assert np.isfinite(lhs) and abs(lhs - rhs) <= 1e-9 * max(1.0, abs(lhs)), (lhs, rhs)
