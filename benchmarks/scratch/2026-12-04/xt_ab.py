import sys, os; sys.path.insert(0, "/work/main/benchmarks")
import jax, jax.numpy as jnp, numpy as np
from _common import kinematic_scene, time_interleaved
import difftaxel as dt
E = 1024
base = dict(hysteresis_strength=0.5, hysteresis_tau=0.1, crosstalk_strength=0.3, crosstalk_sigma=0.003,
    dead_taxel_probability=0.02, dead_taxel_value_range=(0, 0.1), bias=5e-4, resolution=5e-4, delay=0.01, dt=0.005)
cases = {}
for variant, env in [("gemm", {}), ("sep", {"DT_SEP": "1"}), ("sepmm", {"DT_SEP": "1", "DT_SEPMM": "1"})]:
    for name, imp in [("bare", None), ("xt", dict(crosstalk_strength=0.3, crosstalk_sigma=0.003)), ("no_random", base)]:
        if name == "bare" and variant != "gemm": continue
        kw = {} if imp is None else dict(probe_gain_resample_range=(0.8, 1.2), imperfections=dt.Imperfections(**imp))
        s, bodies, inp = kinematic_scene(**kw)
        rng = np.random.default_rng(0)
        poses = np.tile(bodies.poses[0], (E, 1)); poses[:, :2] += rng.uniform(-0.01, 0.01, (E, 2)); poses = jnp.asarray(poses, jnp.float32)
        keys = jax.random.split(jax.random.key(0), E)
        states = jax.vmap(s.init_state)(keys)
        def step(states, poses, keys, s=s, inp=inp):
            return jax.vmap(lambda st, p, k: s.step(st, inp.replace(bodies=inp.bodies.with_state(p[None])), k))(states, poses, keys)
        for k in ("DT_SEP", "DT_SEPMM"): os.environ.pop(k, None)
        os.environ.update(env)
        c = jax.jit(step).lower(states, poses, keys).compile()
        cases[f"{name}/{variant}"] = (c, (states, poses, keys))
comp, t, r = time_interleaved(cases, rounds=15)
for k in cases: print(f"{k:18s} {t[k]*1e3:7.3f} ms  /bare {r[k]:.2f}")
