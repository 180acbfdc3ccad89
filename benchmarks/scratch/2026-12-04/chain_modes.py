import sys, time, statistics
sys.path.insert(0, "/work/main/benchmarks")
import jax, jax.numpy as jnp, numpy as np
from _common import kinematic_scene
import difftaxel as dt
from difftaxel.rollout import rollout_envs
E = 1024; T = int(sys.argv[1]) if len(sys.argv) > 1 else 16
base = dict(hysteresis_strength=0.5, hysteresis_tau=0.1, crosstalk_strength=0.3, crosstalk_sigma=0.003,
    dead_taxel_probability=0.02, dead_taxel_value_range=(0, 0.1), bias=5e-4, resolution=5e-4, delay=0.01, dt=0.005)
variants = {"bare": None, "no_random": dict(base),
  "full_hash": dict(base, noise=1e-3, random_walk=1e-4, jitter=0.001, noise_generator="hash"),
  "full": dict(base, noise=1e-3, random_walk=1e-4, jitter=0.001)}
fns = {}
for name, imp in variants.items():
    kw = {} if imp is None else dict(probe_radius_noise=1e-4 if name.startswith("full") else 0.0, probe_gain_resample_range=(0.8, 1.2), imperfections=dt.Imperfections(**imp))
    s, bodies, inp = kinematic_scene(**kw)
    rng = np.random.default_rng(0)
    poses = np.tile(bodies.poses[0], (E, T, 1)); poses[..., :2] += rng.uniform(-0.01, 0.01, (E, 1, 2)) + np.linspace(0, 0.004, T)[None, :, None]
    poses = jnp.asarray(poses, jnp.float32)
    keys = jax.random.split(jax.random.key(0), E)
    states = jax.vmap(s.init_state)(keys)
    def one_step(states, poses, keys, s=s, inp=inp):
        return jax.vmap(lambda st, p, k: s.step(st, inp.replace(bodies=inp.bodies.with_state(p[None])), k))(states, poses, keys)
    def roll(states, poses, keys, s=s, inp=inp):
        seq = jax.vmap(jax.vmap(lambda p: inp.replace(bodies=inp.bodies.with_state(p[None]))))(poses)
        return rollout_envs(s, states, seq, keys)
    f1 = jax.jit(one_step).lower(states, poses[:, 0], keys).compile()
    fd = jax.jit(one_step, donate_argnums=0).lower(states, poses[:, 0], keys).compile()
    fr = jax.jit(roll).lower(states, poses, keys).compile()
    fns[name] = (f1, fd, fr, states, poses, keys)
res = {n: {"step": [], "donated": [], "rollout": []} for n in fns}
for rnd in range(7):
    for n, (f1, fd, fr, st, po, ke) in fns.items():
        t0 = time.perf_counter()
        for _ in range(20): out = f1(st, po[:, 0], ke)
        jax.block_until_ready(out); res[n]["step"].append((time.perf_counter() - t0) / 20)
        s2 = jax.tree.map(jnp.copy, st); jax.block_until_ready(s2)
        t0 = time.perf_counter()
        for _ in range(20): s2, r = fd(s2, po[:, 0], ke)
        jax.block_until_ready(r); res[n]["donated"].append((time.perf_counter() - t0) / 20)
        t0 = time.perf_counter()
        for _ in range(3): out = fr(st, po, ke)
        jax.block_until_ready(out); res[n]["rollout"].append((time.perf_counter() - t0) / 3 / T)
for mode in ("step", "donated", "rollout"):
    b = res["bare"][mode]
    print(mode, "  ".join(f"{n} {statistics.median(res[n][mode])*1e3:.3f}ms x{statistics.median([a/c for a, c in zip(res[n][mode], b)]):.2f}" for n in fns))
