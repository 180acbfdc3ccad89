"""Why ProximityTaxel keeps coordinates as separate planes: the probe-point pair arithmetic
(distance, hit test, ``R - d``, accumulation by one product) with points stored ``[..., 3]``
(array of structures) vs one ``[E, N, K]`` block per coordinate (structure of arrays).

1024 environments x 121 probes x 96 points, float32, measured side by side in one run.

Usage: python benchmarks/bench_pair_layout.py
Last line: {"aos_ns_per_pair": ..., "soa_ns_per_pair": ..., "aos_over_soa": ...}
"""

from __future__ import annotations

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import emit, time_jitted  # noqa: E402

E, N, K = 1024, 121, 96
R = 0.003


def _accumulate(d2, f):
    dist = jnp.sqrt(d2)
    P = jnp.where((d2 <= R * R) & (dist > 1e-7), R - dist, 0.0)
    return jnp.einsum("enk,ekc->enc", P, f)


def aos(p, q, f):  # p [E, N, 3], q [E, K, 3]
    d = q[:, None] - p[:, :, None]
    return _accumulate(jnp.sum(d * d, -1), f)


def soa(p, q, f):  # the same arrays, one coordinate plane at a time
    d2 = sum((q[:, None, :, i] - p[:, :, None, i]) ** 2 for i in range(3))
    return _accumulate(d2, f)


def main():
    rng = np.random.default_rng(0)
    p = jnp.asarray(rng.uniform(-0.015, 0.015, (E, N, 3)), jnp.float32)
    q = jnp.asarray(rng.uniform(-0.015, 0.015, (E, K, 3)), jnp.float32)
    f = jnp.asarray(rng.normal(size=(E, K, 7)), jnp.float32)
    np.testing.assert_allclose(jax.jit(aos)(p, q, f), jax.jit(soa)(p, q, f), rtol=1e-4, atol=1e-6)
    out = {}
    for name, fn in (("aos", aos), ("soa", soa)):
        _, t = time_jitted(fn, p, q, f, repeats=7)
        out[f"{name}_ns_per_pair"] = t / (E * N * K) * 1e9
        print(f"{name}: {t * 1e3:.2f} ms per call, {out[f'{name}_ns_per_pair']:.2f} ns per pair")
    out["aos_over_soa"] = out["aos_ns_per_pair"] / out["soa_ns_per_pair"]
    emit(out)


if __name__ == "__main__":
    main()
