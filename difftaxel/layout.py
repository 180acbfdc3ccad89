"""Taxel layouts: planar grids, rings on sphere caps, Gaussian crosstalk kernels.

The grid and kernel helpers reproduce Genesis 1.4.5's semantics and output order exactly
so a layout can move between the two libraries.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ._validate import check_odd

Array = jax.Array

__all__ = [
    "orthogonals",
    "generate_grid_points_on_plane",
    "generate_ring_points_on_sphere",
    "gaussian_crosstalk_kernel",
]


def orthogonals(normal) -> tuple[np.ndarray, np.ndarray]:
    """Tangents ``(t0, t1)`` completing unit ``normal [3]`` to a right-handed basis (t0, t1, n).

    Genesis's rule: if ``|n_y| < 0.5``, ``b = normalise(-n_x n_y, 1 - n_y^2, -n_z n_y)``,
    else ``b = normalise(-n_x n_z, -n_y n_z, 1 - n_z^2)``; ``t1 = b``, ``t0 = b x n``.
    """
    n = np.asarray(normal, dtype=float)
    if abs(n[1]) < 0.5:
        b = np.array([-n[0] * n[1], 1.0 - n[1] ** 2, -n[2] * n[1]])
    else:
        b = np.array([-n[0] * n[2], -n[1] * n[2], 1.0 - n[2] ** 2])
    b = b / np.linalg.norm(b)
    return np.cross(b, n), b


def _unit_normal(normal, name="normal") -> np.ndarray:
    n = np.asarray(normal, dtype=float)
    if n.shape != (3,):
        raise ValueError(f"{name}: expected shape (3,), got {n.shape}")
    norm = float(np.linalg.norm(n))
    if not np.isfinite(norm) or norm < np.finfo(float).eps:
        raise ValueError(f"{name}: expected a non-zero finite vector, got {n}")
    return n / norm


def generate_grid_points_on_plane(lo, hi, normal, nx: int, ny: int) -> np.ndarray:
    """A planar ``(ny, nx, 3)`` probe grid, exactly as Genesis's helper of the same name.

    Args:
      lo, hi: ``[3]`` opposite corners (m, link frame); their projections on the plane's
        tangents bound the grid; the plane offset is the mean of their normal coordinates.
      normal: ``[3]`` plane normal (any non-zero length).
      nx, ny: number of columns (along ``t0``) and rows (along ``t1``), each >= 1.

    Returns:
      ``grid [ny, nx, 3]`` float64 with ``grid[j, i] = u_i t0 + v_j t1 + w n``,
      ``u = linspace(lo_u, hi_u, nx)``, ``v = linspace(lo_v, hi_v, ny)``; ``grid[0, 0]``
      corresponds to ``lo`` and ``grid[-1, -1]`` to ``hi``; row-major flattening ``j * nx + i``.
    """
    n = _unit_normal(normal)
    for name, v in (("nx", nx), ("ny", ny)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    for name, v in (("lo", lo), ("hi", hi)):
        if v.shape != (3,):
            raise ValueError(f"{name}: expected shape (3,), got {v.shape}")
    t0, t1 = orthogonals(n)
    lo_u, lo_v, lo_w = lo @ t0, lo @ t1, lo @ n
    hi_u, hi_v, hi_w = hi @ t0, hi @ t1, hi @ n
    w = 0.5 * (lo_w + hi_w)
    u = np.linspace(lo_u, hi_u, nx)
    v = np.linspace(lo_v, hi_v, ny)
    return u[None, :, None] * t0 + v[:, None, None] * t1 + w * n


def generate_ring_points_on_sphere(
    radius: float, cap_axis, n_rings: int, arc_spacing: float, return_normals: bool = False
):
    """Probe rings on a spherical cap (Genesis's ``generate_ring_points_on_sphere``).

    Ring ``i`` of ``n_rings`` sits at polar angle ``theta = i / max(n_rings - 1, 1) * pi/2``
    from ``cap_axis``; it holds one point if its radius ``R sin theta <= R eps`` else
    ``max(3, ceil(2 pi R sin theta / arc_spacing))`` points at azimuths ``2 pi k / n`` in the
    (t0, t1) basis of :func:`orthogonals`.

    Returns:
      ``points [N, 3]`` (m, sphere-centre frame) and, if ``return_normals``, unit outward
      ``normals [N, 3]``.
    """
    if not radius > 0:
        raise ValueError(f"radius: expected > 0, got {radius}")
    if not arc_spacing > 0:
        raise ValueError(f"arc_spacing: expected > 0, got {arc_spacing}")
    if not isinstance(n_rings, (int, np.integer)) or n_rings < 1:
        raise ValueError(f"n_rings: expected an int >= 1, got {n_rings!r}")
    pole = _unit_normal(cap_axis, "cap_axis")
    t0, t1 = orthogonals(pole)
    pts = []
    for i in range(n_rings):
        th = (i / max(n_rings - 1, 1)) * math.pi / 2
        rho = radius * math.sin(th)
        if rho <= radius * np.finfo(float).eps:
            pts.append(radius * pole)
            continue
        n = max(3, math.ceil(2 * math.pi * rho / arc_spacing))
        for k in range(n):
            psi = 2 * math.pi * k / n
            pts.append(
                radius
                * (math.sin(th) * (math.cos(psi) * t0 + math.sin(psi) * t1) + math.cos(th) * pole)
            )
    P = np.asarray(pts)
    return (P, P / radius) if return_normals else P


def gaussian_crosstalk_kernel(n_rows: int, n_cols: int, sigma, spacing=1.0) -> Array:
    """Separable, L1-normalised Gaussian kernel ``[n_rows, n_cols]`` (Genesis's helper).

    ``K[i, j] ∝ exp(-(row_i^2 + col_j^2) / (2 sigma^2))`` with row offsets
    ``(i - n_rows // 2) * spacing_row`` and column offsets ``(j - n_cols // 2) * spacing_col``;
    ``sum(K) = 1``, peak at the centre.

    Args:
      n_rows, n_cols: odd kernel sizes (static).
      sigma: standard deviation (same length unit as ``spacing``), > 0. May be traced: the
        kernel is differentiable in ``sigma`` and ``spacing``.
      spacing: scalar or ``(row_spacing, col_spacing)``.
    """
    check_odd(n_rows, "n_rows")
    check_odd(n_cols, "n_cols")
    if not isinstance(sigma, jax.core.Tracer):
        s = np.asarray(sigma, dtype=float)
        if s.shape != () or not np.isfinite(s) or s <= 0:
            raise ValueError(f"sigma: expected a finite scalar > 0, got {sigma!r}")
    sp = jnp.asarray(spacing)
    if sp.ndim == 0:
        s_row, s_col = sp, sp
    elif sp.shape == (2,):
        s_row, s_col = sp[0], sp[1]
    else:
        raise ValueError(f"spacing: expected a scalar or (row, col), got shape {sp.shape}")
    dt = jnp.result_type(sigma, s_row, float)
    rows = (jnp.arange(n_rows) - n_rows // 2).astype(dt) * s_row
    cols = (jnp.arange(n_cols) - n_cols // 2).astype(dt) * s_col
    gr = jnp.exp(-(rows**2) / (2.0 * sigma**2))
    gc = jnp.exp(-(cols**2) / (2.0 * sigma**2))
    K = gr[:, None] * gc[None, :]
    return K / jnp.sum(K)
