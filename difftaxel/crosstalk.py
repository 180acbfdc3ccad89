"""Spatial crosstalk between the taxels of a grid (the first stage of the imperfection chain).

A taxel's reading leaks into its neighbours: each channel field ``[ny, nx]`` is
cross-correlated with a small kernel (zero padding, torch's ``conv2d`` semantics, no flip),
in 1, 2 or 3 groups of channels (all; the normal force vs the rest; normal force, shear force,
torque), and filler probes are zeroed again (Genesis World 1.4.5). The Gaussian kernel is
``K = s G + (1 - s) delta`` with ``G`` a normalised Gaussian of width ``sigma`` (m) sampled on
the grid's spacings.

Grid quantities (spacings, tangents, normal) are computed from the probe positions as traced
values, so a kernel built from traced positions or a traced ``sigma`` carries their gradients;
only the kernel's support (an integer radius in taxels) is static, fixed at construction.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ._numerics import compute_once, runtime_one
from .layout import gaussian_crosstalk_kernel

Array = jax.Array

__all__ = [
    "apply_crosstalk",
    "crosstalk_correlate",
    "crosstalk_matrix",
    "crosstalk_support",
    "grid_axes",
    "grid_metadata",
]


def grid_metadata(grid: np.ndarray):
    """Averaged grid spacings and tangents of a ``[ny, nx, 3]`` probe grid (Genesis's rule),
    on the host.

    Spacings are computed from float32 positions (as Genesis does: e.g. a 0.03 m pitch becomes
    0.029999995604157448). Returns ``(s_v, s_u, t_u [3], t_v [3])``: row and column spacings
    (m) and unit column (u) and row (v) directions.
    """
    g = np.asarray(grid, dtype=np.float32).astype(np.float64)
    du = (g[:, 1:] - g[:, :-1]).reshape(-1, 3).mean(0)
    dv = (g[1:] - g[:-1]).reshape(-1, 3).mean(0)
    s_u, s_v = float(np.linalg.norm(du)), float(np.linalg.norm(dv))
    return s_v, s_u, du / max(s_u, 1e-300), dv / max(s_v, 1e-300)


def grid_axes(grid: Array, float32_positions: bool = True):
    """:func:`grid_metadata` on traced positions ``grid [ny, nx, 3]`` (m, link frame).

    Returns ``(s_v, s_u, t_u [3], t_v [3])`` as arrays. With ``float32_positions`` the values
    are those of positions rounded to float32 (Genesis's rule) while the gradient is that of the
    unrounded positions.
    """
    g = grid
    if float32_positions and g.dtype != jnp.float32:
        g = g + jax.lax.stop_gradient(g.astype(jnp.float32).astype(g.dtype) - g)
    du = jnp.mean((g[:, 1:] - g[:, :-1]).reshape(-1, 3), 0)
    dv = jnp.mean((g[1:] - g[:-1]).reshape(-1, 3), 0)
    s_u = jnp.sqrt(jnp.sum(du * du))
    s_v = jnp.sqrt(jnp.sum(dv * dv))
    return s_v, s_u, du / s_u, dv / s_v


def crosstalk_support(sigma: float, spacing: tuple) -> tuple:
    """Static kernel radius ``(r_v, r_u)`` in taxels covering ``3 sigma`` (at least 1)."""
    s_v, s_u = spacing
    return max(1, math.ceil(3 * sigma / s_v)), max(1, math.ceil(3 * sigma / s_u))


def gaussian_mix_kernel(strength: Array, sigma: Array, radius: tuple, spacing) -> Array:
    """``[1, 2 r_v + 1, 2 r_u + 1]``: ``strength G + (1 - strength) delta`` on the grid."""
    r_v, r_u = radius
    G = gaussian_crosstalk_kernel(2 * r_v + 1, 2 * r_u + 1, sigma, spacing=spacing)
    delta = jnp.zeros_like(G).at[r_v, r_u].set(1.0)
    return (strength * G + (1.0 - strength) * delta)[None]


def crosstalk_correlate(field: Array, kernel: Array) -> Array:
    """Same-size cross-correlation with zero padding of ``field [ny, nx, C]`` by ``kernel``.

    ``out[y, x, c] = sum_ij K[i, j] in[y + i - r_v, x + j - r_u, c]`` (torch's conv2d
    semantics; no flip). ``kernel`` is ``[kr, kc]`` (shared by all channels) with odd sizes.

    Grids of up to 1024 taxels use a dense ``[N, N]`` operator built from the kernel by a static
    index map (one matrix product; under ``vmap`` over environments the operator is shared and
    the product is a single GEMM); larger grids sum shifted copies of the padded field.
    Both are differentiable in the kernel and the field.
    """
    ny, nx, C = field.shape
    if ny * nx <= 1024:
        M = crosstalk_matrix(kernel.astype(field.dtype), ny, nx)
        return (M @ field.reshape(ny * nx, C)).reshape(ny, nx, C)
    kr, kc = kernel.shape
    pad = jnp.pad(field, ((kr // 2, kr // 2), (kc // 2, kc // 2), (0, 0)))
    out = jnp.zeros_like(field)
    for i in range(kr):  # static loop over the (small) kernel, not over taxels
        for j in range(kc):
            out = out + kernel[i, j].astype(field.dtype) * pad[i : i + ny, j : j + nx]
    return out


def _crosstalk_index(kr: int, kc: int, ny: int, nx: int):
    y = np.arange(ny)[:, None, None, None]
    x = np.arange(nx)[None, :, None, None]
    yy = np.arange(ny)[None, None, :, None]
    xx = np.arange(nx)[None, None, None, :]
    i = yy - y + kr // 2
    j = xx - x + kc // 2
    ok = (i >= 0) & (i < kr) & (j >= 0) & (j < kc)
    flat = np.where(ok, i * kc + j, 0).reshape(ny * nx, ny * nx)
    return flat, ok.reshape(ny * nx, ny * nx)


def crosstalk_matrix(kernel: Array, ny: int, nx: int) -> Array:
    """Dense ``[ny*nx, ny*nx]`` operator of the zero-padded cross-correlation by ``kernel``."""
    kr, kc = kernel.shape
    idx, ok = _crosstalk_index(kr, kc, ny, nx)
    return jnp.where(jnp.asarray(ok), kernel.reshape(-1)[jnp.asarray(idx)], 0.0)


def _stencil_rows(x: Array, kernel: Array, grid_shape: tuple, active=None) -> Array:
    """:func:`_correlate_rows` as a sum over the kernel's taps of shifted rows: on the
    row-major grid, tap ``(i, j)`` reads taxel ``t + (i - r_v) nx + (j - r_u)``, a contiguous
    slice of the row padded by ``r_v nx + r_u`` zeros, weighted by the kernel value where the
    neighbour lies on the grid (a static mask) and 0 where it wraps to another grid row.
    ``active [N]`` bool, if given, zeroes the outputs of the probes where it is False."""
    ny, nx = grid_shape
    kr, kc = kernel.shape
    rv, ru = kr // 2, kc // 2
    N, P = ny * nx, rv * nx + ru
    # the rows computed once (the taps read them at kr * kc offsets; XLA would copy the
    # rows' producers into the padded copy and into the centre tap), and their sum too. The
    # divisor is the centre weight made 1 and broadcast, not ``runtime_one(x)``: a division
    # that read the rows twice would make XLA store them once more before it
    one = jnp.broadcast_to(runtime_one(kernel[rv, ru].astype(x.dtype)), x.shape)
    x = compute_once(one, x)
    xp = jnp.pad(x, ((0, 0), (P, P)))
    gy, gx = np.divmod(np.arange(N), nx)
    out = None
    for i in range(kr):  # static loops over the (small) kernel, not over taxels
        for j in range(kc):
            ok = (gy + i - rv >= 0) & (gy + i - rv < ny) & (gx + j - ru >= 0) & (gx + j - ru < nx)
            if not ok.any():
                continue
            w = jnp.where(jnp.asarray(ok), kernel[i, j].astype(x.dtype), 0.0)
            off = P + (i - rv) * nx + (j - ru)
            term = w[None] * xp[:, off : off + N]
            out = term if out is None else out + term
    if active is not None:
        # zeroed before the sum is stored: the stored sum is the reading (a select after it
        # would be another pass over every value)
        out = jnp.where(active[None], out, 0.0)
    return compute_once(one, out)


def _correlate_rows(x: Array, kernel: Array, grid_shape: tuple, active=None) -> Array:
    """Cross-correlation of each row of ``x [c, N]`` (a field on the grid) by ``kernel``.

    A small kernel (``6 kr kc <= N`` taps) sums shifted rows (:func:`_stencil_rows`: ``kr kc``
    multiply-adds per value, where the dense product takes ``N``); otherwise, up to 1024 taxels,
    ``x @ M^T`` with the dense operator (one GEMM under ``vmap``, whose throughput beats the
    shifted sums once the kernel has more than about ``N / 6`` taps). ``active [N]`` bool, if
    given, zeroes the outputs of the probes where it is False.
    """
    ny, nx = grid_shape
    kr, kc = kernel.shape
    if ny * nx <= 1024 and 6 * kr * kc > ny * nx:
        out = x @ crosstalk_matrix(kernel.astype(x.dtype), ny, nx).T
        return out if active is None else jnp.where(active[None], out, 0.0)
    return _stencil_rows(x, kernel, grid_shape, active)


def apply_crosstalk(
    value: Array, kernels: Array, grid_shape: tuple, normal: Array, active: Array
) -> Array:
    """Crosstalk on channels-first taxel values ``value [C, N]`` (C = 6: force then torque).

    Args:
      value: ``[C, N]`` readings (sensor link frame), ``N = ny * nx`` in row-major grid order.
      kernels: ``[G, kr, kc]``: one kernel (all channels), two (normal force; the rest) or
        three (normal force; shear force; torque).
      grid_shape: ``(ny, nx)`` (static).
      normal: ``[3]`` unit grid normal (link frame) splitting normal from shear force.
      active: ``[N]`` bool, False for filler probes (re-zeroed).

    Returns:
      ``[C, N]``.
    """
    G = kernels.shape[0]
    if G == 1:
        return _correlate_rows(value, kernels[0], grid_shape, active)
    n = normal.astype(value.dtype)
    F = value[:3]
    fn = jnp.sum(F * n[:, None], 0, keepdims=True)  # [1, N]
    Fs = F - fn * n[:, None]
    fn_o = _correlate_rows(fn, kernels[0], grid_shape)
    if G == 2:
        rest = _correlate_rows(jnp.concatenate([Fs, value[3:]], 0), kernels[1], grid_shape)
        Fs_o, T_o = rest[:3], rest[3:]
    else:
        Fs_o = _correlate_rows(Fs, kernels[1], grid_shape)
        T_o = _correlate_rows(value[3:], kernels[2], grid_shape)
    out = jnp.concatenate([fn_o * n[:, None] + Fs_o, T_o], 0)
    return jnp.where(active[None], out, 0.0)
