"""Helper run by test_imperfections.py with 8 simulated CPU devices: sharded == one device."""

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import difftaxel as dt  # noqa: E402
from difftaxel.rollout import rollout_envs, shard_envs  # noqa: E402
from difftaxel.sensors import KinematicTaxel, make_inputs  # noqa: E402

assert len(jax.devices()) == 8, jax.devices()
E, T = 64, 4
grid = dt.generate_grid_points_on_plane((-0.006, -0.006, 0), (0.006, 0.006, 0), (0, 0, 1), 4, 4)
s = KinematicTaxel(
    probe_local_pos=grid,
    probe_radius=0.002,
    normal_exponent=1.5,
    imperfections=dt.Imperfections(hysteresis_strength=0.3, hysteresis_tau=0.05, noise=1e-3),
)
b = dt.Bodies(
    (dt.Sphere(radius=0.01),),
    np.array([[0, 0, 0.0095, 0, 0, 0, 1.0]]),
    np.array([[0.02, 0, 0, 0, 0, 1.0]]),
)
inp = make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), b)
rng = np.random.default_rng(0)
z = 0.0095 + rng.uniform(-5e-4, 5e-4, (E, T))
poses = jnp.broadcast_to(b.poses, (E, T, 1, 7)).at[:, :, 0, 2].set(z)
seq = jax.vmap(jax.vmap(lambda p: inp.replace(bodies=inp.bodies.with_state(p))))(poses)
keys = jax.random.split(jax.random.key(0), E)
states = jax.vmap(s.init_state)(keys)
f = jax.jit(lambda st, sq, k: rollout_envs(s, st, sq, k))
_, ref = f(states, seq, keys)
st_sh, seq_sh, keys_sh = shard_envs((states, seq, keys))
_, out = f(st_sh, seq_sh, keys_sh)
assert len(out.measured.force.sharding.device_set) == 8, out.measured.force.sharding
np.testing.assert_allclose(
    np.asarray(out.measured.force), np.asarray(ref.measured.force), rtol=1e-12, atol=1e-15
)
np.testing.assert_allclose(
    np.asarray(out.ground_truth.torque), np.asarray(ref.ground_truth.torque), rtol=1e-12, atol=1e-15
)
print("SHARDED_OK devices=8")
