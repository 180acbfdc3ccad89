import sys
sys.path.insert(0, "/work/main/benchmarks")
import jax, jax.numpy as jnp, numpy as np
from _common import kinematic_scene
from profile_step import profile
import difftaxel as dt
from difftaxel.rollout import rollout_envs
E = 1024; T = 16
chain = sys.argv[1] == "chain"
kw = {}
if chain:
    kw = dict(probe_gain_resample_range=(0.8, 1.2), imperfections=dt.Imperfections(hysteresis_strength=0.5, hysteresis_tau=0.1, crosstalk_strength=0.3, crosstalk_sigma=0.003,
    dead_taxel_probability=0.02, dead_taxel_value_range=(0, 0.1), bias=5e-4, resolution=5e-4, delay=0.01, dt=0.005))
s, bodies, inp = kinematic_scene(**kw)
rng = np.random.default_rng(0)
poses = np.tile(bodies.poses[0], (E, T, 1)); poses[..., :2] += rng.uniform(-0.01, 0.01, (E, 1, 2))
poses = jnp.asarray(poses, jnp.float32)
keys = jax.random.split(jax.random.key(0), E)
states = jax.vmap(s.init_state)(keys)
def roll(states, poses, keys):
    seq = jax.vmap(jax.vmap(lambda p: inp.replace(bodies=inp.bodies.with_state(p[None]))))(poses)
    return rollout_envs(s, states, seq, keys)
profile(roll, states, poses, keys, calls=2, top=12, hlo="/tmp/exp/roll.hlo")
