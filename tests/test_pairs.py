"""ProximityTaxel's pair sums of one rigid body: the sparse pass (value: only the blocks near
the probes) equals the dense pass over every point, near, far and masked, per environment under
vmap; derivatives in every argument against central differences; forward mode == reverse mode;
the spatial order is a permutation within each body's points."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from difftaxel import pose as P
from difftaxel.sensors.pairs import _rigid_dense, _rigid_sparse, pair_sums_rigid
from difftaxel.sensors.proximity import spatial_order
from difftaxel.testing import check_grad_fd


def case(seed, offset=0.0, on=True, K=61):
    rng = np.random.default_rng(seed)
    g = np.linspace(-0.006, 0.006, 4)
    p = np.stack(np.meshgrid(g, g, [0.0], indexing="xy"), -1).reshape(-1, 3)  # 16 probes
    v = rng.normal(size=(K, 3))
    pts = 0.008 * v / np.linalg.norm(v, axis=-1, keepdims=True)  # a 8 mm sphere's surface
    pts = pts[np.asarray(spatial_order(pts, ((0, K),)))]
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    R = np.asarray(P.quat_to_matrix(jnp.asarray(q)))
    t = np.array([0.001 + offset, -0.002, 0.009])
    radii = np.stack([np.full(16, 0.004), np.full(16, 0.0045)])
    planes = lambda a: tuple(jnp.asarray(a[:, i]) for i in range(3))  # noqa: E731
    return planes(p), jnp.asarray(radii), jnp.asarray(R), jnp.asarray(t), planes(pts), on


def both(args, with_d):
    s = jax.jit(_rigid_sparse, static_argnums=(6, 7))(*args, 8, with_d)
    d = jax.jit(_rigid_dense, static_argnums=(6, 7))(*args, 8, with_d)
    return s, d


@pytest.mark.parametrize("with_d", [False, True])
@pytest.mark.parametrize("where", ["near", "far", "masked"])
def test_sparse_equals_dense(with_d, where):
    args = case(1, offset=0.05 if where == "far" else 0.0, on=where != "masked")
    (S, D, _), (Sd, Dd, _) = both(args, with_d)
    scale = float(np.abs(Sd).max())
    assert (scale > 0) == (where == "near")
    np.testing.assert_allclose(S, Sd, rtol=1e-12, atol=1e-15)
    if with_d:
        for a, b in zip(D, Dd, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_vmap_over_environments():
    cs = [case(1, offset=o) for o in (0.0, 0.003, 0.05)]
    batched = jax.tree.map(lambda *a: jnp.stack(a), *cs)
    f = jax.jit(jax.vmap(lambda *a: pair_sums_rigid(*a, 8, True)[0]))
    out = np.asarray(f(*batched))
    for k, c in enumerate(cs):
        np.testing.assert_allclose(out[k], pair_sums_rigid(*c, 8, True)[0], rtol=1e-12, atol=0)


def test_derivatives_every_argument():
    p, radii, R, t, pts, on = case(2)
    rng = np.random.default_rng(0)
    c = jnp.asarray(rng.normal(size=(2, 16)))

    def loss(p, radii, R, t, pts):
        S, D, _ = pair_sums_rigid(p, radii, R, t, pts, on, 8, True)
        return jnp.sum(S * c) + sum(jnp.sum(d * c) for d in D) * 100.0

    x = (p, radii, R, t, pts)
    scale = (1e-3, 1e-3, 1.0, 1e-3, 1e-3)
    zero = jax.tree.map(jnp.zeros_like, x)

    def moved(z):  # every argument at once, each on its own scale
        return loss(
            *(
                jax.tree.map(lambda a, v, s=s: a + s * v, xi, zi)
                for xi, zi, s in zip(x, z, scale, strict=True)
            )
        )

    moved = jax.jit(moved)
    check_grad_fd(moved, zero, rtol=1e-5, n_directions=8, jit=True)
    t_ = jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)), x)
    _, jt = jax.jvp(loss, x, t_)
    g = jax.grad(loss, argnums=tuple(range(5)))(*x)
    rhs = sum(float(jnp.vdot(a, b)) for a, b in zip(jax.tree.leaves(t_), jax.tree.leaves(g)))
    assert abs(float(jt) - rhs) <= 1e-9 * max(1.0, abs(rhs))


def test_spatial_order_is_a_permutation_within_segments():
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(50, 3))
    order = np.asarray(spatial_order(pts, ((1, 20), (0, 0), (2, 30))))
    np.testing.assert_array_equal(np.sort(order[:20]), np.arange(20))
    np.testing.assert_array_equal(np.sort(order[20:]), np.arange(20, 50))
    # consecutive points are close: blocks of 8 span far less than the cloud
    q = pts[order[20:]][:24].reshape(3, 8, 3)
    assert np.mean(np.ptp(q, axis=1)) < 0.75 * np.mean(np.ptp(pts[20:], axis=0))


def test_spatial_order_makes_compact_blocks_within_segments():
    """Each segment stays in place as a group, and its blocks are compact: on a 16 x 16 grid
    (1 mm pitch) every block of 8 points spans at most 3 mm (a 2 x 4 patch)."""
    g = np.stack(np.meshgrid(np.arange(16.0), np.arange(16.0), [0.0], indexing="xy"), -1)
    g = 1e-3 * g.reshape(-1, 3)
    rng = np.random.default_rng(0)
    pts = np.concatenate([g[rng.permutation(256)], rng.normal(size=(5, 3))])
    order = np.asarray(spatial_order(pts, ((0, 256), (1, 5)), 8))
    assert sorted(order[:256]) == list(range(256)) and sorted(order[256:]) == list(range(256, 261))
    blocks = pts[order[:256]].reshape(32, 8, 3)
    span = blocks.max(1) - blocks.min(1)
    assert np.max(span) <= 3e-3 + 1e-12
