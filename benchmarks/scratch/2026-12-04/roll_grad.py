import sys, time, statistics
repo = sys.argv[1]; sys.path.insert(0, repo); sys.path.insert(0, repo + "/benchmarks")
import jax, jax.numpy as jnp, numpy as np
import difftaxel as dt; assert dt.__file__.startswith(repo)
from _common import kinematic_scene
from difftaxel.rollout import rollout_envs
E, T = 256, 16
out = []
for chain in (False, True):
    kw = dict(imperfections=dt.Imperfections(hysteresis_strength=0.5, hysteresis_tau=0.1, bias=5e-4, noise=1e-3, dt=0.005, delay=0.005)) if chain else {}
    s, bodies, inp = kinematic_scene(**kw)
    rng = np.random.default_rng(0)
    poses = np.tile(bodies.poses[0], (E, T, 1)); poses[..., :2] += rng.uniform(-0.01, 0.01, (E, 1, 2))
    poses = jnp.asarray(poses, jnp.float32)
    keys = jax.random.split(jax.random.key(0), E)
    states = jax.vmap(s.init_state)(keys)
    def loss(s, poses):
        seq = jax.vmap(jax.vmap(lambda p: inp.replace(bodies=inp.bodies.with_state(p[None]))))(poses)
        r = rollout_envs(s, states, seq, keys)[1].measured
        return jnp.sum(r.force) + jnp.sum(r.torque)
    g = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    jax.block_until_ready(g(s, poses))
    ts = []
    for _ in range(5):
        t0 = time.perf_counter(); jax.block_until_ready(g(s, poses)); ts.append(time.perf_counter() - t0)
    out.append(f"{'chain' if chain else 'bare'} grad {statistics.median(ts)*1e3:.1f} ms")
print(repo, *out)
