"""vmap_envs: jax.vmap over environments with a chunked reverse pass (same values, same
derivatives, less memory traffic)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import difftaxel as dt
from difftaxel._pytree import replace
from difftaxel.rollout import rollout_envs
from difftaxel.sensors import ContactProbe, KinematicTaxel, make_inputs
from difftaxel.testing import assert_trees_close, check_grad_fd

IDENT = np.array([0.0, 0, 0, 0, 0, 0, 1])
GRID = dt.generate_grid_points_on_plane((-0.003, -0.003, 0), (0.003, 0.003, 0), (0, 0, 1), 3, 3)
BODIES = dt.Bodies(
    (dt.Sphere(radius=0.01),),
    np.array([[0, 0, 0.0105, 0, 0, 0, 1.0]]),
    np.array([[0.02, -0.01, 0, 0, 0.3, 1.0]]),
)
INP = make_inputs(IDENT, BODIES, dt=0.01)
KT = KinematicTaxel(
    probe_local_pos=GRID, probe_radius=0.002, normal_exponent=1.5, normal_damping=5.0
)


def _poses(E, seed=0):
    rng = np.random.default_rng(seed)
    p = np.tile(BODIES.poses[0], (E, 1))
    p[:, :2] += rng.uniform(-0.004, 0.004, (E, 2))
    p[:, 2] += rng.uniform(-0.001, 0.0005, E)
    return jnp.asarray(p)


def _one(sensor, state, pose):
    inp = INP.replace(bodies=INP.bodies.with_state(pose[None]))
    return sensor.step(state, inp)


def _loss(fn):
    def loss(sensor, states, poses):
        _, r = fn(sensor, states, poses)
        return jnp.sum(r.measured.force**2) + jnp.sum(jnp.sin(1e3 * r.measured.torque))

    return loss


@pytest.mark.parametrize("E, chunk", [pytest.param(10, 4, marks=pytest.mark.slow), (3, 8)])
def test_values_and_gradients_equal_plain_vmap(E, chunk):
    """Chunks that leave a tail or exceed E: values and the gradients w.r.t. the
    shared sensor and the batched poses equal jax.vmap's (float64)."""
    states = jax.vmap(lambda _: KT.init_state())(jnp.arange(E))
    poses = _poses(E)
    axes = (None, 0, 0)
    plain = jax.vmap(_one, in_axes=axes)
    chunked = dt.vmap_envs(_one, axes, grad_chunk=chunk)
    assert_trees_close(
        jax.jit(chunked)(KT, states, poses), jax.jit(plain)(KT, states, poses), rtol=0, atol=0
    )
    g_ref = jax.jit(jax.grad(_loss(plain), argnums=(0, 2)))(KT, states, poses)
    g = jax.jit(jax.grad(_loss(chunked), argnums=(0, 2)))(KT, states, poses)
    assert_trees_close(g, g_ref, rtol=1e-9, atol=1e-20)
    assert float(jnp.max(jnp.abs(g[1]))) > 0  # some environment is in contact
    # only the poses differentiated (the sensor's cotangents are skipped): same values
    g_p = jax.jit(jax.grad(_loss(chunked), argnums=2))(KT, states, poses)
    np.testing.assert_allclose(g_p, g_ref[1], rtol=1e-9, atol=1e-20)


def test_gradient_matches_finite_differences_and_bool_leaves_pass_through():
    """ContactProbe carries bool latch state and returns bool readings: they pass through;
    the KinematicTaxel loss gradient w.r.t. stiffness, exponent and poses matches float64
    central differences."""
    E = 5
    cp = ContactProbe(probe_local_pos=GRID, probe_radius=0.002)
    cstates = jax.vmap(lambda _: cp.init_state())(jnp.arange(E))
    poses = _poses(E, seed=1)
    out = dt.vmap_envs(_one, (None, 0, 0), grad_chunk=2)(cp, cstates, poses)
    ref = jax.vmap(_one, in_axes=(None, 0, 0))(cp, cstates, poses)
    assert_trees_close(out, ref, rtol=0, atol=0)

    states = jax.vmap(lambda _: KT.init_state())(jnp.arange(E))
    f = dt.vmap_envs(_one, (None, 0, 0), grad_chunk=2)

    def loss(p):
        s = replace(KT, normal_stiffness=p["k"], normal_exponent=p["e"])
        return _loss(f)(s, states, p["poses"])

    check_grad_fd(
        jax.jit(loss),
        {"k": KT.normal_stiffness, "e": KT.normal_exponent, "poses": poses},
        n_directions=4,
    )


def test_rollout_envs_grad_chunk():
    E, T = 4, 6
    zs = 0.0108 - 0.001 * np.sin(np.linspace(0, np.pi, T))
    seq = jax.tree.map(
        lambda *x: jnp.stack(x),
        *[make_inputs(IDENT, BODIES.with_state(BODIES.poses.at[0, 2].set(z)), dt=0.01) for z in zs],
    )
    seqs = jax.tree.map(lambda x: jnp.broadcast_to(x, (E,) + x.shape), seq)
    offs = jnp.linspace(-0.002, 0.002, E)
    seqs = seqs.replace(
        bodies=seqs.bodies.with_state(seqs.bodies.poses.at[:, :, 0, 0].add(offs[:, None]))
    )
    states = jax.vmap(lambda _: KT.init_state())(jnp.arange(E))

    def loss(sensor, chunk):
        _, r = rollout_envs(sensor, states, seqs, grad_chunk=chunk)
        return jnp.sum(r.measured.force[..., 2] ** 2)

    g_ref = jax.jit(jax.grad(loss), static_argnums=1)(KT, None)
    g = jax.jit(jax.grad(loss), static_argnums=1)(KT, 3)
    assert_trees_close(g, g_ref, rtol=1e-9, atol=1e-20)
    assert float(jnp.abs(g.normal_stiffness)) > 0


@pytest.mark.slow  # 20 s; CI runs it with the slow cases
def test_rollout_envs_time_major_equals_env_major():
    """``time_major=True`` (a scan of a vmapped step) gives the env-major readings transposed,
    the same final states and the same gradient, with and without keys (noise, hysteresis,
    delay and per-reset gains draw from them) and with a chunked reverse pass."""
    E, T = 3, 5
    noisy = KinematicTaxel(
        probe_local_pos=GRID,
        probe_radius=0.002,
        normal_exponent=1.5,
        probe_gain_resample_range=(0.8, 1.2),
        imperfections=dt.Imperfections(
            hysteresis_strength=0.4, hysteresis_tau=0.03, noise=1e-3, delay=0.01, dt=0.01
        ),
    )
    zs = 0.0108 - 0.001 * np.sin(np.linspace(0, np.pi, T))
    seq = jax.tree.map(
        lambda *x: jnp.stack(x),
        *[make_inputs(IDENT, BODIES.with_state(BODIES.poses.at[0, 2].set(z)), dt=0.01) for z in zs],
    )
    seqs = jax.tree.map(lambda x: jnp.broadcast_to(x, (E,) + x.shape), seq)  # [E, T, ...]
    offs = jnp.linspace(-0.002, 0.002, E)
    seqs = seqs.replace(
        bodies=seqs.bodies.with_state(seqs.bodies.poses.at[:, :, 0, 0].add(offs[:, None]))
    )
    seqs_t = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), seqs)  # [T, E, ...]
    keys = jax.random.split(jax.random.key(7), E)
    states = jax.vmap(noisy.init_state)(keys)
    for k in (None, keys):
        f_env, r_env = rollout_envs(noisy, states, seqs, k)
        f_t, r_t = jax.jit(lambda st, sq, kk: rollout_envs(noisy, st, sq, kk, time_major=True))(
            states, seqs_t, k
        )
        assert r_t.measured.force.shape == (T, E, 3, 3, 3)
        assert_trees_close(jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), r_t), r_env, rtol=1e-12)
        assert_trees_close(f_t, f_env, rtol=1e-12)
    assert float(jnp.max(jnp.abs(r_env.measured.force))) > 0

    def loss(sensor, time_major, chunk):
        sq = seqs_t if time_major else seqs
        _, r = rollout_envs(sensor, states, sq, keys, time_major=time_major, grad_chunk=chunk)
        return jnp.sum(r.measured.force[..., 2] ** 2)

    g_env = jax.grad(loss)(noisy, False, None)
    for chunk in (None, 2):
        assert_trees_close(jax.grad(loss)(noisy, True, chunk), g_env, rtol=1e-9, atol=1e-20)
    assert float(jnp.abs(g_env.imperfections.hysteresis_strength)) > 0


def test_bad_input_and_documented_limits():
    poses = _poses(4)
    st = jax.vmap(lambda _: KT.init_state())(jnp.arange(4))
    for bad in (0, -1, True, 2.5, "4"):
        with pytest.raises(ValueError, match="grad_chunk"):
            dt.vmap_envs(_one, (None, 0, 0), grad_chunk=bad)
    with pytest.raises(ValueError, match="in_axes"):
        dt.vmap_envs(_one, (None, 0), grad_chunk=2)(KT, st, poses)
    with pytest.raises(ValueError, match="in_axes"):
        dt.vmap_envs(_one, (None, 1, 0), grad_chunk=2)(KT, st, poses)
    with pytest.raises(ValueError, match="in_axes"):
        dt.vmap_envs(_one, (None, None, None), grad_chunk=2)(KT, st.probe_gain[0], poses[0])
    # forward mode is not available through the chunked reverse pass (custom_vjp)
    f = dt.vmap_envs(_one, (None, 0, 0), grad_chunk=2)
    with pytest.raises(TypeError):
        jax.jvp(lambda p: f(KT, st, p)[1].measured.force, (poses,), (poses,))
