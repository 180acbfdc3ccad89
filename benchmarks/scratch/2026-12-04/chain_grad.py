import sys, time, statistics
repo = sys.argv[1]; sys.path.insert(0, repo); sys.path.insert(0, repo + "/benchmarks")
import jax, jax.numpy as jnp, numpy as np
import difftaxel as dt; assert dt.__file__.startswith(repo)
from _common import kinematic_scene
E = 1024
imp = dict(hysteresis_strength=0.5, hysteresis_tau=0.1, crosstalk_strength=0.3, crosstalk_sigma=0.003, bias=5e-4, noise=1e-3, random_walk=1e-4, noise_generator="hash")
s, bodies, inp = kinematic_scene(imperfections=dt.Imperfections(**imp))
rng = np.random.default_rng(0)
poses = np.tile(bodies.poses[0], (E, 1)); poses[:, :2] += rng.uniform(-0.01, 0.01, (E, 2)); poses = jnp.asarray(poses, jnp.float32)
keys = jax.random.split(jax.random.key(0), E)
states = jax.vmap(s.init_state)(keys)
def loss(sen, poses):
    r = jax.vmap(lambda st, p, k: sen.step(st, inp.replace(bodies=inp.bodies.with_state(p[None])), k)[1].measured)(states, poses, keys)
    return jnp.sum(r.force ** 2) + jnp.sum(r.torque)
g = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
jax.block_until_ready(g(s, poses))
ts = []
for _ in range(9):
    t0 = time.perf_counter(); jax.block_until_ready(g(s, poses)); ts.append(time.perf_counter() - t0)
print(repo, f"chain grad {statistics.median(ts)*1e3:.1f} ms")
