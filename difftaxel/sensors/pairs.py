"""ProximityTaxel's sums over (probe, point) pairs: a dense pass and a sparse one.

For probes ``p`` (three ``[N]`` planes, m, in any frame the points share), sensing radii
``radii [B, N]`` (one row per radius branch) and points ``x`` (three ``[K]`` planes), the sums
run over points of ``P = R - d`` for ``0 < d <= R`` (``d = |x - p|``), of ``P (x - p)``
(``with_d``) and of ``P f`` for each per-point feature ``f``.

* :func:`pair_sums`: every point against every probe (a ``scan`` over blocks of points).
* :func:`pair_sums_rigid`: one rigid body's own points. A point farther than the largest
  radius from the probes' bounding box adds exactly 0, and in a press most of a tracked
  cloud is (its far side, the parts beyond the pad). The points come in a spatial order
  (:func:`~difftaxel.sensors.proximity.spatial_order`), so the nearby ones fill few blocks of
  consecutive points: the value visits only the blocks whose body-frame box meets the probes'
  box (a ``while_loop``, as many blocks as the fullest environment needs). No capacity to
  choose and nothing to overflow. Its derivatives (forward and reverse mode) are those of the
  dense pass (the same sums with exact zeros for the other points); a ``while_loop`` has no
  reverse mode, hence the custom JVP.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .pair_blocks import (  # noqa: F401 (the primitives; tests reach them here too)
    FAR,
    _blocks,
    _rigid_dense,
    _rigid_sparse,
    _unpack,
    _zeros,
    block_shape,
    pair_sums_dense,
)
from .pair_windows import windowed_sums

Array = jax.Array


def pair_sums(p, radii, x, mask, block: int, with_d: bool, feats: tuple = ()):
    """Sums over points of ``P = R - d`` for ``0 < d <= R`` (``d = |x - p|``), of
    ``P (x - p)`` if ``with_d``, and of ``P f`` for each per-point feature ``f`` in ``feats``.

    Args:
      p: probe positions, three ``[N]`` planes (world, m).
      radii: ``[B, N]`` sensing radii (m), one row per radius branch.
      x: point positions, three ``[K]`` planes (world, m).
      mask: ``[K]`` bool, points that count.
      block: points per loop iteration (static); the iteration is unrolled.
      with_d: also return ``D = sum P (x - p)``.
      feats: ``[K]`` per-point features (e.g. a point's velocity components).

    Returns:
      ``(S, D, F)``: ``S [B, N]``; ``D`` a tuple of three ``[B, N]`` planes or None; ``F`` a
      tuple of one ``[B, N]`` sum per feature.

    Every point against every probe (the pre-selected candidates of ``max_candidates``);
    one rigid body's own points go through :func:`pair_sums_rigid` instead.
    """
    x = tuple(jnp.where(mask, q, FAR) for q in x)
    return pair_sums_dense(tuple(p), radii, x, tuple(feats), int(block), bool(with_d))


# ---------------------------------------------------------------- one rigid body's points


@functools.partial(jax.custom_jvp, nondiff_argnums=(6, 7, 8))
def _pair_sums_rigid(p, radii, R, t, pb, on, block, with_d, grid):
    if grid is None:
        return _rigid_sparse(p, radii, R, t, pb, on, block, with_d)
    return windowed_sums(block, with_d, grid)(p, radii, R, t, pb, on)


@_pair_sums_rigid.defjvp
def _pair_sums_rigid_jvp(block, with_d, grid, primals, tangents):
    return jax.jvp(lambda *a: _rigid_dense(*a, block, with_d), primals, tangents)


def pair_sums_rigid(p, radii, R, t, pb, on, block: int, with_d: bool, grid: tuple | None = None):
    """:func:`pair_sums` of one rigid body's points ``pb`` (three ``[K]`` planes, body frame,
    m) at rotation ``R [3, 3]`` and position ``t [3]`` in the probes' frame (world or a
    link's: distances do not depend on it), counted when ``on`` (``[]`` bool). The blocks'
    boxes are found in the body frame, once for every environment, and only the blocks near
    the probes are moved to the probes' frame. With ``grid = (ny, nx, wy, wx, sy, sx)``
    (static, the probes a row-major ``[ny, nx]`` grid) each such block takes only a window
    of ``wy x wx`` probes (:mod:`difftaxel.sensors.pair_windows`)."""
    return _pair_sums_rigid(tuple(p), radii, R, t, tuple(pb), on, int(block), bool(with_d), grid)
