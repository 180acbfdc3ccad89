"""The elastomer's shear sums: the sparse pass (value) equals the dense pass (derivatives) to
the last bit, at every count of weighted points, per environment under vmap; its derivatives
in every argument match central differences and forward mode equals reverse mode."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from difftaxel.sensors.shear import shear_sums, shear_sums_dense, shear_sums_sparse
from difftaxel.testing import check_grad_fd

EPS = float(np.finfo(np.float64).eps)


def case(seed, N=10, M=21, n_active=5, per_probe=False):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.01, 0.01, (N, 3))
    n = rng.normal(size=(N if per_probe else 1, 3)) + np.array([0, 0, 3.0])
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    y = rng.uniform(-0.01, 0.01, (M, 3))
    delta = rng.normal(0, 1e-3, (M, 3))
    w = np.zeros(M)
    on = rng.choice(M, n_active, replace=False)
    w[on] = rng.uniform(1e-4, 2e-3, n_active)
    return tuple(jnp.asarray(a) for a in (x, n, y, delta, w)) + (jnp.asarray(3000.0),)


@pytest.mark.parametrize("per_probe", [False, True], ids=["one_normal", "per_probe_normals"])
@pytest.mark.parametrize("n_active", [0, 1, 8, 9, 21])
def test_sparse_equals_dense_bitwise(per_probe, n_active):
    args = case(n_active, n_active=n_active, per_probe=per_probe)
    d = np.asarray(jax.jit(shear_sums_dense, static_argnums=6)(*args, EPS))
    s = np.asarray(jax.jit(shear_sums_sparse, static_argnums=6)(*args, EPS))
    np.testing.assert_array_equal(s, d)
    assert (np.abs(d).max() > 0) == (n_active > 0)
    # the numpy reference: Genesis's per-pair sum
    x, n, y, delta, w, lam = (np.asarray(a) for a in args)
    nn = np.broadcast_to(n, x.shape)[:, None]
    rho = x[:, None] - y[None]
    rt2 = np.sum(rho**2, -1) - np.sum(rho * nn, -1) ** 2
    dt_ = delta[None] - nn * np.sum(delta[None] * nn, -1, keepdims=True)
    W = w[None] * np.exp(-lam * rt2) * (np.sum(dt_**2, -1) > EPS**2)
    np.testing.assert_allclose(d, np.sum(W[..., None] * dt_, 1), rtol=1e-12, atol=1e-20)


def test_vmap_over_environments_with_different_counts():
    """Each environment counts its own blocks (the loop runs for the fullest one); vmap
    equals the loop over environments (to rounding: XLA compiles the two differently)."""
    cs = [case(10 + k, n_active=a) for k, a in enumerate([0, 3, 17, 21])]
    batched = jax.tree.map(lambda *a: jnp.stack(a), *cs)
    f = jax.jit(jax.vmap(lambda *a: shear_sums(*a, EPS)))
    out = np.asarray(f(*batched))
    for k, c in enumerate(cs):
        np.testing.assert_allclose(out[k], np.asarray(shear_sums(*c, EPS)), rtol=1e-13, atol=0)


@pytest.mark.parametrize("per_probe", [False, True], ids=["one_normal", "per_probe_normals"])
def test_derivatives_every_argument(per_probe):
    args = case(3, n_active=6, per_probe=per_probe)
    c = jnp.asarray(np.random.default_rng(0).normal(size=(10, 3)))

    def loss(*a):
        return jnp.sum(shear_sums(*a, EPS) * c)

    # every argument at once, each on its own scale (m, unit normals, 1/m^2)
    scale = (1e-2, 1.0, 1e-2, 1e-3, 1e-3, 3000.0)
    zero = tuple(jnp.zeros_like(a) for a in args)
    moved = jax.jit(lambda z: loss(*(a + s * v for a, s, v in zip(args, scale, z, strict=True))))
    check_grad_fd(moved, zero, rtol=1e-6, n_directions=8, jit=True)
    # forward mode equals reverse mode
    t = tuple(jnp.asarray(np.random.default_rng(1).normal(size=a.shape)) for a in args)
    _, jt = jax.jvp(loss, args, t)
    g = jax.grad(loss, argnums=tuple(range(6)))(*args)
    rhs = sum(float(jnp.vdot(a, b)) for a, b in zip(t, g, strict=True))
    assert abs(float(jt) - rhs) <= 1e-9 * max(1.0, abs(rhs))
