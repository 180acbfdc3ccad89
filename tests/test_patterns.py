"""DEX-01 style patterns: file round trip and validation, grid orders, tactile images, the
depth-weighted normal-force split."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import difftaxel as dt
from difftaxel.patterns import (
    dex01_step,
    grid_pattern,
    load_pattern,
    save_pattern,
    split_normal_force,
    tactile_image,
    validate_pattern,
)
from difftaxel.testing import assert_finite_tree, check_grad_fd


def test_grid_orders_and_image():
    g = grid_pattern((2, 3), 0.002, "xy")
    np.testing.assert_array_equal(g.taxel2pixel, [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]])
    np.testing.assert_allclose(g.poses[:3, 0, 3], [-0.002, 0, 0.002])
    h = grid_pattern((2, 3), 0.002, "yx")
    np.testing.assert_array_equal(h.taxel2pixel[:2], [[0, 0], [1, 0]])
    img = tactile_image(jnp.arange(1.0, 7.0), g.taxel2pixel, g.image_shape)
    np.testing.assert_array_equal(img, [[1, 2, 3], [4, 5, 6]])
    img_h = tactile_image(jnp.arange(1.0, 7.0), h.taxel2pixel, h.image_shape)
    np.testing.assert_array_equal(img_h, [[1, 3, 5], [2, 4, 6]])
    sparse = validate_pattern(g.poses[:2], g.taxel2pixel[:2], (32, 32))
    im = tactile_image(jnp.ones((4, 2)), sparse.taxel2pixel, sparse.image_shape)
    assert im.shape == (4, 32, 32) and float(im.sum()) == 8.0


def test_file_round_trip_and_validation(tmp_path):
    g = grid_pattern((4, 4), 0.003)
    save_pattern(tmp_path / "p.npz", g)
    h = load_pattern(tmp_path / "p.npz")
    np.testing.assert_array_equal(h.poses, g.poses)
    np.testing.assert_array_equal(h.taxel2pixel, g.taxel2pixel)
    assert h.image_shape == (4, 4)
    bad = g.poses.copy()
    bad[3, :, 0] *= -1  # a reflection
    with pytest.raises(ValueError, match="poses: taxel 3 is not a proper rotation"):
        validate_pattern(bad, g.taxel2pixel)
    t2p = g.taxel2pixel.copy()
    t2p[1] = t2p[0]
    with pytest.raises(ValueError, match="same pixel"):
        validate_pattern(g.poses, t2p)
    with pytest.raises(ValueError, match="non-negative"):
        validate_pattern(g.poses, g.taxel2pixel - 1)
    with pytest.raises(ValueError, match=r"poses: expected shape \(N, 3, 4\)"):
        validate_pattern(g.poses[:, :, :3], g.taxel2pixel)


def test_split_normal_force():
    d = jnp.array([[-0.001, -0.003, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    f = split_normal_force(jnp.array([4.0, 2.0]), d)
    np.testing.assert_allclose(f, [[1.0, 3.0, 0, 0], [0, 0, 0, 0]])
    g = jax.grad(lambda d: jnp.sum(split_normal_force(3.0, d) * jnp.arange(4.0)))(d[1])
    assert_finite_tree(g)
    d_in = jnp.array([-0.001, -0.003, -0.002, -0.0005])  # away from the kink at depth 0
    check_grad_fd(lambda d: jnp.sum(split_normal_force(3.0, d) * jnp.arange(4.0)), d_in, step=1e-8)


def test_dex01_step_sphere():
    g = grid_pattern((5, 5), 0.002)
    b = dt.Bodies((dt.Sphere(radius=0.01),), np.array([[0, 0, 0.0095, 0, 0, 0, 1.0]]))
    T = jnp.array([0.0, 0, 0, 0, 0, 0, 1])
    r = dex01_step(g, T, b, jnp.asarray(2.0), jnp.zeros(25), 0.01)
    assert np.all(np.asarray(r.depths) <= 0) and np.asarray(r.depths).min() < -4e-4
    np.testing.assert_allclose(float(r.normal_forces.sum()), 2.0, rtol=1e-12)
    np.testing.assert_allclose(r.depth_dots, np.asarray(r.depths) / 0.01)
    np.testing.assert_allclose(r.normals_world, np.tile([0, 0, 1.0], (25, 1)), atol=1e-15)
    j = jax.jit(lambda T: dex01_step(g, T, b, 2.0, jnp.zeros(25), 0.01).depths)(T)
    np.testing.assert_allclose(j, r.depths)
