import sys, os; sys.path.insert(0, "/work/main/benchmarks")
import jax, jax.numpy as jnp, numpy as np
from _common import kinematic_scene, time_interleaved
import difftaxel as dt
from difftaxel import imperfections as I
orig = I.Imperfections.apply_crosstalk
MODE = {"m": "gemm"}
def taps(self, dtype):
    sig = self.crosstalk_sigma.astype(dtype)
    def t(r, sp):
        x = (np.arange(-r, r + 1) * sp).astype(np.dtype(dtype))
        w = jnp.exp(-jnp.asarray(x * x) / (2.0 * sig * sig)); return w / jnp.sum(w)
    (r_v, r_u), (s_v, s_u) = self.crosstalk_radius, self.crosstalk_spacing
    return t(r_v, s_v), t(r_u, s_u), r_v, r_u
def band(g, r, n):
    idx, ok = I._crosstalk_index(1, 2 * r + 1, 1, n)
    return jnp.where(jnp.asarray(ok), g[jnp.asarray(idx)], 0.0)  # [out, in]
def patched(self, value, active, channels_first=False):
    if MODE["m"] == "gemm" or not channels_first: return orig(self, value, active, channels_first)
    ny, nx = self.grid_shape
    g_v, g_u, r_v, r_u = taps(self, value.dtype)
    Bu, Bv = band(g_u, r_u, nx), band(g_v, r_v, ny)
    x = value.reshape(-1, ny, nx)
    lam = self.crosstalk_strength.astype(value.dtype)
    if MODE["m"] == "sep2mm":
        y = x @ Bu.T                     # along x
        z = jnp.einsum("vy,cyx->cvx", Bv, y)  # along y
    elif MODE["m"] == "sepmm2":
        W = jnp.concatenate([jnp.eye(nx, dtype=value.dtype), Bu.T], axis=1)  # [nx, 2nx]
        xy = (x.reshape(-1, nx) @ W).reshape(x.shape[0], ny, 2 * nx)
        xc, y = xy[..., :nx], xy[..., nx:]
        yp = jnp.pad(y, ((0, 0), (r_v, r_v), (0, 0)))
        z = sum(g_v[i] * yp[:, i : i + ny, :] for i in range(2 * r_v + 1))
        x = xc
    elif MODE["m"] == "kron":
        z = jnp.einsum("vy,cyx,ux->cvu", Bv, x, Bu)
    out = lam * z + (1 - lam) * x
    return jnp.where(active[None], out.reshape(value.shape), 0.0)
I.Imperfections.apply_crosstalk = patched
E = 1024
base = dict(hysteresis_strength=0.5, hysteresis_tau=0.1, crosstalk_strength=0.3, crosstalk_sigma=0.003,
    dead_taxel_probability=0.02, dead_taxel_value_range=(0, 0.1), bias=5e-4, resolution=5e-4, delay=0.01, dt=0.005)
cases = {}
# the RESULTS runs: `xt2.py gemm sep2mm kron` and `xt2.py gemm sepmm2`
for variant in (sys.argv[1:] or ["gemm", "sep2mm", "kron"]):
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
        MODE["m"] = variant
        c = jax.jit(step).lower(states, poses, keys).compile()
        if name == "xt":
            ref = cases.get("xt/gemm")
            out = c(states, poses, keys)[1].measured.force
            if ref is not None: print(variant, "max diff vs gemm", float(jnp.abs(out - ref[0](*ref[1])[1].measured.force).max()))
        cases[f"{name}/{variant}"] = (c, (states, poses, keys))
comp, t, r = time_interleaved(cases, rounds=15)
for k in cases: print(f"{k:18s} {t[k]*1e3:7.3f} ms  /bare {r[k]:.2f}")
