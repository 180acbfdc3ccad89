"""The in-plane response of a bonded incompressible elastomer layer (ElastomerTaxel's
``compressibility < 1`` with ``elastomer_thickness > 0``), built as Genesis World 1.4.5 builds it.

For a layer of thickness ``h`` bonded to a rigid base, a unit indentation at the origin moves
the surface in-plane by a kernel whose Fourier transform is ``-i (k / |k|) S(|k| h)`` with
``S(q) = 2 q^2 / (sinh 2q - 2q)``. Everything here is traced (spacings and thickness may carry
gradients); the transform is taken on the ``rfft2`` half spectrum.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

Array = jax.Array

__all__ = ["elastomer_layer_kernel", "layer_transfer"]


def layer_transfer(q: Array) -> Array:
    """``S(q) = 2 q^2 / (sinh 2q - 2q)`` with ``q`` clamped to ``[1e-3, 30]``; for ``2q < 1``
    the denominator is its 5-term Taylor series (Genesis), which avoids the cancellation."""
    q = jnp.clip(q, 1e-3, 30.0)
    x = 2.0 * q
    taylor = sum(x ** (2 * m + 1) / math.factorial(2 * m + 1) for m in range(1, 6))
    small = x < 1.0
    xs = jnp.where(small, 1.0, x)  # keeps sinh of the unused branch finite
    den = jnp.where(small, taylor, jnp.sinh(xs) - xs)
    return 2.0 * q * q / den


def _fftfreq(n: int, d: Array) -> Array:
    k = jnp.concatenate([jnp.arange(0, (n - 1) // 2 + 1), jnp.arange(-(n // 2), 0)])
    return k.astype(d.dtype) / (n * d)


def elastomer_layer_kernel(L_y: int, L_x: int, s_v, s_u, h, dtype=None):
    """Real-space in-plane planes ``(G_u, G_v)`` ``[L_y, L_x]`` of the bonded layer.

    Args:
      L_y, L_x: FFT grid size (static).
      s_v, s_u: row and column spacings (m); h: layer thickness (m). Arrays or floats.

    Rows ``k_v = 2 pi fftfreq(L_y, s_v)``, columns ``k_u = 2 pi rfftfreq(L_x, s_u)``,
    ``G^ = -i (k / |k|) S(|k| h)``, zero at ``k = 0``, then ``irfft2``. Offset 0 at index
    ``[0, 0]``.
    """
    dtype = dtype or jnp.result_type(float)
    s_v, s_u, h = (jnp.asarray(v, dtype) for v in (s_v, s_u, h))
    ky = 2 * jnp.pi * _fftfreq(L_y, s_v)[:, None]
    kx = 2 * jnp.pi * (jnp.arange(L_x // 2 + 1).astype(dtype) / (L_x * s_u))[None, :]
    k2 = kx * kx + ky * ky
    pos = k2 > 0
    kmag = jnp.where(pos, jnp.sqrt(jnp.where(pos, k2, 1.0)), 0.0)
    S = layer_transfer(kmag * h)
    inv = jnp.where(pos, 1.0 / jnp.where(pos, kmag, 1.0), 0.0)  # G^ = 0 at k = 0
    Gu = -1j * (kx * inv * S)
    Gv = -1j * (ky * inv * S)
    gu = jnp.fft.irfft2(Gu, s=(L_y, L_x))
    gv = jnp.fft.irfft2(Gv, s=(L_y, L_x))
    return gu.astype(dtype), gv.astype(dtype)
