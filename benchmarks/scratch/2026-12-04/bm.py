import sys; sys.path.insert(0, "/work/main/benchmarks")
import jax, jax.numpy as jnp, numpy as np
from _common import time_interleaved
from difftaxel.imperfections import _lowbias32, hash_normal, standard_normal
E, n = 1024, 1452
keys = jax.random.split(jax.random.key(0), E)
def bits2(k, m):
    s = jax.random.bits(k, (2,), jnp.uint32); i = jnp.arange(m, dtype=jnp.uint32)
    return _lowbias32(_lowbias32(i ^ s[0]) + s[1])
S = [1.0, -1/6, 1/120, -1/5040, 1/362880]
C = [1.0, -1/2, 1/24, -1/720, 1/40320, -1/3628800]
def bm_words(b1, b2, dtype=jnp.float32):
    # radius from b1: u in (0, 1], 24 bits
    u = ((b1 >> 8).astype(dtype) + 1.0) * 2.0**-24
    r = jnp.sqrt(-2.0 * jnp.log(u))
    q = b2 >> 30
    f = ((b2 >> 8) & 0x3FFFFF).astype(dtype) * 2.0**-22 + (2.0**-23 - 0.5)  # (-0.5, 0.5)
    phi = f * (np.pi / 2)
    p2 = phi * phi
    s = S[-1]
    for c in S[-2::-1]: s = c + s * p2
    s = s * phi
    c_ = C[-1]
    for c in C[-2::-1]: c_ = c + c_ * p2
    odd = (q & 1) == 1
    c1 = jnp.where(odd, s, c_); s1 = jnp.where(odd, c_, s)
    negx = (q == 1) | (q == 2); negy = q >= 2
    X = jnp.where(negx, -c1, c1); Y = jnp.where(negy, -s1, s1)
    return r * X, r * Y
def bm_fast(k):
    b = bits2(k, n).reshape(2, -1)
    x, y = bm_words(b[0], b[1])
    return jnp.concatenate([x, y])
def full(k): return hash_normal(k, (n,), jnp.float32)
def thr(k): return standard_normal(k, (n,), jnp.float32)
def thr_bits(k): return jax.random.bits(k, (n,), jnp.uint32)
def thr_fast(k):
    b = jax.random.bits(k, (2, n // 2), jnp.uint32); x, y = bm_words(b[0], b[1]); return jnp.concatenate([x, y])
cases = {name: (jax.vmap(f), (keys,)) for name, f in [("hash_erfinv", full), ("hash_bm_fast", bm_fast), ("threefry_bm", thr), ("threefry_bits", thr_bits), ("threefry_bm_fast", thr_fast)]}
c, t, r = time_interleaved(cases, rounds=7)
for k in cases: print(f"{k:18s} {t[k]*1e3:.3f} ms")
z = np.asarray(jax.vmap(bm_fast)(keys)).ravel().astype(np.float64)
print("mean", z.mean(), "var", z.var(), "skew", (z**3).mean(), "kurt", (z**4).mean(), "max", np.abs(z).max())
