"""The winning shape per probe: the largest penetration over shapes, selected by a mask."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._numerics import first_argmax, first_argmin

Array = jax.Array


def _select(onehot: Array, x: Array) -> Array:
    """``x[k[n], n]`` for a one-hot ``[S, N]`` selector and ``x [S, N, ...]``.

    A masked sum rather than a gather: it fuses with the elementwise kernel and its transpose
    is a broadcast, not a scatter (cheaper in the backward pass on CPU).
    """
    if x.shape[0] == 1:
        return x[0]
    oh = onehot.reshape(onehot.shape + (1,) * (x.ndim - 2))
    return jnp.sum(jnp.where(oh, x, jnp.zeros((), x.dtype)), axis=0)


def _winner(mode: str, q, radius):
    """Winning shape per probe for one branch of radius ``radius [N]``.

    Returns ``(pen_raw [N], onehot [S, N] bool, valid [N] bool)``: the largest ``r - sd`` over
    shapes (first shape on ties), a one-hot selector of that shape and whether any shape was
    queryable. ``"raycast"`` mode replaces the per-shape penetration by that of the nearest
    surface (smallest ``|sd|``), with the distance capped at ``radius`` (Genesis's query
    radius).
    """
    sd, mask = q.sd, q.mask
    S = sd.shape[0]
    valid = jnp.any(mask, axis=0)
    if mode == "raycast":
        absd = jnp.where(mask, jnp.abs(sd), jnp.inf)
        k = first_argmin(absd, axis=0)
        onehot = jnp.arange(S)[:, None] == k[None]
        sdk = _select(onehot, sd)
        dk = _select(onehot, absd)
        sdk = jnp.where(dk > radius, radius, sdk)
        return radius - sdk, onehot, valid
    pen_s = jnp.where(mask, radius[None] - sd, -jnp.inf)
    if S == 1:
        return jnp.where(valid, pen_s[0], -1.0), jnp.ones((1,) + pen_s.shape[1:], bool), valid
    k = first_argmax(pen_s, axis=0)
    onehot = jnp.arange(S)[:, None] == k[None]
    pen = _select(onehot, jnp.where(mask, pen_s, 0.0))
    return jnp.where(valid, pen, -1.0), onehot, valid
