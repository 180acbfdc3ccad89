import sys; sys.path.insert(0, "/work/main/benchmarks")
import jax, jax.numpy as jnp, numpy as np
from _common import time_interleaved
rng = np.random.default_rng(0)
X = jnp.asarray(rng.normal(size=(1024, 6, 121)), jnp.float32)
M = jnp.asarray(rng.normal(size=(121, 121)), jnp.float32)
def g121(X, M): return jax.vmap(lambda x: x @ M.T)(X * 1.0001)
def g128(X, M):
    Mp = jnp.pad(M, ((0, 7), (0, 7)))
    return jax.vmap(lambda x: (jnp.pad(x, ((0, 0), (0, 7))) @ Mp.T)[:, :121])(X * 1.0001)
def ew(X, M): return X * 1.0001 + 1.0
cases = {"ew": (ew, (X, M)), "g121": (g121, (X, M)), "g128": (g128, (X, M))}
c, t, r = time_interleaved(cases, rounds=9)
for k in cases: print(f"{k:8s} {t[k]*1e3:.3f} ms")
