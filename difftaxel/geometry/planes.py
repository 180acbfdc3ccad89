"""The coordinate-plane layout of many 3-vectors: :class:`Planes`, and maps on it.

A batch of ``P`` points or vectors is usually an array ``[P, 3]``. The sensors' hot paths keep
it as three separate arrays ``x, y, z``, each ``[P]`` (or any common shape): *coordinate
planes*. Why: XLA's CPU backend vectorises a trailing axis of size 3 poorly; every reduction
or write over it is a separate shuffle or interleaving pass, where three planes fuse into the
surrounding elementwise kernel. The layout is an implementation choice of the kernels; public
results are stacked back to ``[..., 3]``.

:meth:`difftaxel.geometry.Bodies.query` takes points in either layout and answers in the same.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array

__all__ = ["Planes", "affine_planes"]


class Planes(NamedTuple):
    """Three coordinate planes ``x, y, z`` of one shape ``[...]``: a batch of 3-vectors.

    A NamedTuple, so a pytree and unpackable (``x, y, z = planes``).
    """

    x: Array
    y: Array
    z: Array

    @classmethod
    def from_array(cls, a: Array) -> Planes:
        """Planes of ``a [..., 3]``."""
        return cls(a[..., 0], a[..., 1], a[..., 2])

    def stack(self, axis: int = -1) -> Array:
        """The vectors as one array ``[..., 3]`` (``axis=-1``)."""
        return jnp.stack(tuple(self), axis=axis)


@jax.custom_jvp
def affine_planes(A: Array, b: Array, x: Array, y: Array, z: Array) -> tuple:
    """Rows of ``A @ (x, y, z) + b`` on coordinate planes: ``out[i] = A[i, 0] x + A[i, 1] y
    + A[i, 2] z + b[i]``.

    Args:
      A: ``[k, 3]``; b: ``[k]``; x, y, z: planes of one shape ``[...]``.

    Returns:
      a tuple of ``k`` planes ``[...]``.

    The value is elementwise (it fuses into the surrounding kernel). The JVP writes the
    ``(A, b)`` part as one contraction with ``[x, y, z, 1]``, so in reverse mode the
    gradient w.r.t. ``A`` and ``b`` is one matrix product ``ct [k, P] @ [x, y, z, 1]^T``
    instead of ``4 k`` separate reductions over the planes. Under ``vmap`` with ``A``, ``b``
    batched and the planes shared (one sensor layout, many environments), that product is a
    single GEMM, where XLA's CPU backend runs the separate reductions one library call each.
    """
    return tuple(A[i, 0] * x + A[i, 1] * y + A[i, 2] * z + b[i] for i in range(A.shape[0]))


def _affine_planes_jvp(primals, tangents):
    A, b, x, y, z = primals
    dA, db, dx, dy, dz = tangents
    out = affine_planes(A, b, x, y, z)
    k = A.shape[0]
    zero = jax.custom_derivatives.SymbolicZero
    d = None
    if isinstance(dA, zero) and not isinstance(db, zero):
        d = [jnp.broadcast_to(db[i], out[i].shape) for i in range(k)]  # k sums in reverse
    elif not isinstance(dA, zero):
        db = jnp.zeros(b.shape, b.dtype) if isinstance(db, zero) else db
        dAb = jnp.concatenate([dA, db[:, None]], axis=1)  # [k, 4]
        X1 = jnp.stack([x, y, z, jnp.ones_like(x)])  # [4, ...]
        dY = jnp.tensordot(dAb, X1, axes=(1, 0), precision=jax.lax.Precision.HIGHEST)
        d = [dY[i] for i in range(k)]
    dps = [(j, t) for j, t in enumerate((dx, dy, dz)) if not isinstance(t, zero)]
    if dps:
        e = [sum(A[i, j] * t for j, t in dps) for i in range(k)]
        d = e if d is None else [u + v for u, v in zip(d, e, strict=True)]
    if d is None:
        d = [jnp.zeros_like(o) for o in out]
    return out, tuple(d)


affine_planes.defjvp(_affine_planes_jvp, symbolic_zeros=True)
