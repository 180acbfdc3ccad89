"""Run by test_mjx.py with 4 simulated CPU devices: MJX rollouts with taxels, vmapped over
environments and sharded with difftaxel.rollout.shard_envs, equal the one-device result."""

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from mujoco import mjx  # noqa: E402

from difftaxel.mjx import pad_and_ball, rollout  # noqa: E402
from difftaxel.rollout import shard_envs  # noqa: E402

assert len(jax.devices()) == 4, jax.devices()
with jax.numpy_rank_promotion("allow"):
    m, sensor, scene = pad_and_ball()
    mx = mjx.put_model(m)
    d0 = mjx.make_data(mx)
    E, T = 8, 30
    ds = jax.vmap(lambda z: d0.replace(qpos=d0.qpos.at[2].set(z)))(jnp.linspace(0.0156, 0.016, E))
    u = jnp.zeros((E, T, 0))
    run = jax.jit(jax.vmap(lambda d, uu: rollout(mx, d, sensor, scene, uu, m=m)[2]))
    ref = run(ds, u).ground_truth.force
    ds_sh, u_sh = shard_envs((ds, u))
    out = run(ds_sh, u_sh).ground_truth.force
    assert len(out.sharding.device_set) == 4, out.sharding
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-10, atol=1e-12)
    assert float(jnp.abs(ref).max()) > 0
print("MJX_SHARDED_OK devices=4")
