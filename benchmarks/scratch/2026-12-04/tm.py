import sys, time, statistics
sys.path.insert(0, "/work/main/benchmarks")
import jax, jax.numpy as jnp, numpy as np
from _common import kinematic_scene, time_interleaved
from difftaxel.rollout import rollout_envs
E, T = 1024, 16
s, bodies, inp = kinematic_scene()
rng = np.random.default_rng(0)
poses = np.tile(bodies.poses[0], (E, T, 1)); poses[..., :2] += rng.uniform(-0.01, 0.01, (E, 1, 2))
poses = jnp.asarray(poses, jnp.float32)
keys = jax.random.split(jax.random.key(0), E)
states = jax.vmap(s.init_state)(keys)
def seq_of(poses): return jax.vmap(jax.vmap(lambda p: inp.replace(bodies=inp.bodies.with_state(p[None]))))(poses)
def env_major(states, poses, keys):
    return rollout_envs(s, states, seq_of(poses), keys)
def time_major(states, poses, keys):
    seq = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), seq_of(poses))  # [T, E]
    ks = jax.vmap(lambda k: jax.random.split(k, T))(keys).swapaxes(0, 1)
    step = jax.vmap(s.step)
    def body(st, xs):
        i, k, t = xs
        return jax.lax.cond(t >= 0, step, lambda a, b, c: (a, jax.tree.map(lambda z: jnp.zeros(z.shape, z.dtype), jax.eval_shape(step, a, b, c)[1])), st, i, k)
    return jax.lax.scan(body, states, (seq, ks, jnp.arange(T)))
def single(states, poses, keys):
    return jax.vmap(lambda st, p, k: s.step(st, inp.replace(bodies=inp.bodies.with_state(p[None])), k))(states, poses[:, 0], keys)
cases = {"single_step": (single, (states, poses, keys)), "env_major": (env_major, (states, poses, keys)), "time_major": (time_major, (states, poses, keys))}
c, t, r = time_interleaved(cases, rounds=7)
for k in cases: print(f"{k:12s} {t[k]*1e3/(1 if k=='single_step' else T):.3f} ms per step")
