"""Layout helpers against Genesis's check values (GENESIS_MODELS.md section 11)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from difftaxel.layout import (
    gaussian_crosstalk_kernel,
    generate_grid_points_on_plane,
    generate_ring_points_on_sphere,
    orthogonals,
)
from difftaxel.testing import check_grad_fd


def test_grid_points_check_values():
    lo, hi = (-0.05, -0.05, -0.05), (0.05, 0.05, -0.05)
    g = generate_grid_points_on_plane(lo, hi, (0, 0, -1), 8, 8)
    assert g.shape == (8, 8, 3)
    np.testing.assert_allclose(g[0, 0], lo, atol=1e-15)
    np.testing.assert_allclose(g[0, 7], (0.05, -0.05, -0.05), atol=1e-15)
    np.testing.assert_allclose(g[7, 0], (-0.05, 0.05, -0.05), atol=1e-15)
    np.testing.assert_allclose(g[7, 7], hi, atol=1e-15)
    g2 = generate_grid_points_on_plane((-1, -2, 0.5), (1, 2, 0.5), (0, 0, 1), 3, 5)
    assert g2.shape == (5, 3, 3)
    np.testing.assert_allclose(g2[:, :, 0][0], [-1, 0, 1])
    np.testing.assert_allclose(g2[:, 0, 1], [-2, -1, 0, 1, 2])


@pytest.mark.parametrize(
    "n, t0, t1",
    [
        ((0, 0, 1), (1, 0, 0), (0, 1, 0)),
        ((0, 0, -1), (-1, 0, 0), (0, 1, 0)),
        ((0, -1, 0), (1, 0, 0), (0, 0, 1)),
        ((1, 0, 0), (0, 0, -1), (0, 1, 0)),
    ],
)
def test_orthogonals_examples(n, t0, t1):
    a, b = orthogonals(np.asarray(n, float))
    np.testing.assert_allclose(a, t0, atol=1e-15)
    np.testing.assert_allclose(b, t1, atol=1e-15)


def test_ring_points_count():
    pts, nrm = generate_ring_points_on_sphere(0.2, (0, 0, -1), 3, 0.04, return_normals=True)
    assert pts.shape == (56, 3)
    np.testing.assert_allclose(np.linalg.norm(pts, axis=-1), 0.2)
    np.testing.assert_allclose(pts[0], [0, 0, -0.2])
    np.testing.assert_allclose(nrm, pts / 0.2)


def test_gaussian_kernel_check_values():
    K = gaussian_crosstalk_kernel(5, 5, 1.0)
    np.testing.assert_allclose(float(K.sum()), 1.0, atol=1e-15)
    np.testing.assert_allclose(K[2, 2], 0.162103, atol=5e-7)
    np.testing.assert_allclose(K[2, 3], 0.098320, atol=5e-7)
    np.testing.assert_allclose(K[0, 0], 0.002969, atol=5e-7)
    np.testing.assert_allclose(K, K.T)
    np.testing.assert_allclose(gaussian_crosstalk_kernel(5, 5, 2.0)[2, 2], 0.063191, atol=5e-7)
    Ka = gaussian_crosstalk_kernel(5, 5, 1.0, spacing=(2.0, 1.0))
    np.testing.assert_allclose(Ka[1, 2], 0.042859, atol=5e-7)
    np.testing.assert_allclose(Ka[2, 1], 0.192082, atol=5e-7)
    # KinematicTaxel test kernel: sigma = s = 0.03 in float32 -> 9x9, lambda 0.6
    s = float(np.float32(0.03))
    r = max(1, int(np.ceil(3 * 0.03 / s)))
    assert 2 * r + 1 == 9
    G = gaussian_crosstalk_kernel(9, 9, 0.03, spacing=(s, s))
    Kc = 0.6 * G + 0.4 * np.eye(9)[4][:, None] * np.eye(9)[4][None, :]
    np.testing.assert_allclose(Kc[4, 4], 0.495494, atol=5e-7)
    np.testing.assert_allclose(Kc[4, 5], 0.057920, atol=5e-7)


def test_gaussian_kernel_differentiable_in_sigma():
    f = lambda s: gaussian_crosstalk_kernel(5, 5, s, spacing=0.5)[2, 3]  # noqa: E731
    check_grad_fd(f, jnp.asarray(0.7))
    assert jax.jit(f)(0.7) == pytest.approx(float(f(0.7)))


def test_bad_input():
    with pytest.raises(ValueError, match="n_rows: expected a positive odd"):
        gaussian_crosstalk_kernel(4, 5, 1.0)
    with pytest.raises(ValueError, match="n_cols"):
        gaussian_crosstalk_kernel(5, 2, 1.0)
    with pytest.raises(ValueError, match="sigma"):
        gaussian_crosstalk_kernel(5, 5, 0.0)
    with pytest.raises(ValueError, match="normal: expected a non-zero"):
        generate_grid_points_on_plane((0, 0, 0), (1, 1, 0), (0, 0, 0), 2, 2)
    with pytest.raises(ValueError, match="nx"):
        generate_grid_points_on_plane((0, 0, 0), (1, 1, 0), (0, 0, 1), 0, 2)
    with pytest.raises(ValueError, match="cap_axis"):
        generate_ring_points_on_sphere(0.1, (0, 0, 0), 2, 0.01)
