import sys; sys.path.insert(0, "/work/main/benchmarks")
import jax, jax.numpy as jnp, numpy as np
from _common import time_interleaved
from difftaxel.imperfections import _lowbias32, _erfinv_f32, hash_normal
E, n = 1024, 1452
keys = jax.random.split(jax.random.key(0), E)
def seeds(k): return jax.random.bits(k, (2,), jnp.uint32)
def bits2(k):
    s = seeds(k); i = jnp.arange(n, dtype=jnp.uint32)
    return _lowbias32(_lowbias32(i ^ s[0]) + s[1])
def bits1(k):
    s = seeds(k); i = jnp.arange(n, dtype=jnp.uint32)
    return _lowbias32(i * (s[0] | 1) + s[1])
def u_from(b): return (b >> 8).astype(jnp.float32) * 2.0**-23 + (2.0**-24 - 1.0)
def full(k): return hash_normal(k, (n,), jnp.float32)
def erf_only(k): return _erfinv_f32(u_from(bits1(k)))
def central_only(k):
    x = u_from(bits1(k)); a = jnp.abs(x); w = -jnp.log((1 - a) * (1 + a)); return jnp.sqrt(w) * x
def bm(k):
    b = bits2(k).reshape(2, -1)
    u1 = (b[0] >> 8).astype(jnp.float32) * 2.0**-24 + 2.0**-25
    u2 = (b[1] >> 8).astype(jnp.float32) * 2.0**-24
    r = jnp.sqrt(-2 * jnp.log(u1)); t = 2 * jnp.pi * u2
    return jnp.concatenate([r * jnp.cos(t), r * jnp.sin(t)])
cases = {name: (jax.vmap(f), (keys,)) for name, f in [("full", full), ("bits2", bits2), ("bits1", bits1), ("erf_1round", erf_only), ("log_sqrt_only", central_only), ("boxmuller", bm)]}
c, t, r = time_interleaved(cases, rounds=7)
for k in cases: print(f"{k:14s} {t[k]*1e3:.3f} ms")
