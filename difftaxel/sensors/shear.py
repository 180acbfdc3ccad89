"""The ElastomerTaxel's shear sums over tracked points: a dense pass and a sparse one.

``shear_sums(x, n, y, delta, w, lam, eps)`` returns ``[N, 3]`` (link frame)::

    u_i = sum_j W_ij (delta_j - n_i (n_i . delta_j)),   W_ij = w_j exp(-lam |rho_t,ij|^2)

with ``rho = x_i - y_j`` projected on probe ``i``'s tangent plane (normal ``n_i``). A point with
``w_j == 0`` contributes nothing. With per-probe normals (``n`` of shape ``[N, 3]``) a pair
also needs ``|delta_t|^2 > eps^2``, Genesis's per-pair test; with one normal (``[1, 3]``) the
caller folds that test into ``w``.

Only the points inside the elastomer carry a weight (a few percent of a tracked cloud in a
press), so the value is computed by the **sparse** pass: each environment's weighted points
are packed to the front (order kept) and a ``while_loop`` runs over blocks of them, as many
blocks as the fullest environment needs. Its derivatives (forward and reverse mode) are those
of the **dense** pass, a ``scan`` over every point that adds exactly 0 for the others: the same
function, summed in the same order (the two agree to the last bit), differentiable in every
argument. A ``while_loop`` itself has no reverse mode, hence the custom JVP.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._numerics import running_count

Array = jax.Array

#: points per loop iteration (unrolled): one fused loop over the probes per block
BLOCK = 8


def _block(acc, blk, x, n, lam, eps):
    """Add one block of points (columns ``y (3), delta (3), w``, each ``[BLOCK]``) to the
    accumulators ``(ux, uy, uz)`` (``[N]`` each)."""
    px, py, pz = x
    nx_, ny_, nz_ = n
    shared = nx_.shape[0] == 1 and px.shape[0] != 1
    yx, yy, yz, dx, dy, dz, wj = blk
    ux, uy, uz = acc
    for k in range(BLOCK):
        rx, ry, rz = px - yx[k], py - yy[k], pz - yz[k]
        rn = nx_ * rx + ny_ * ry + nz_ * rz
        rt2 = rx * rx + ry * ry + rz * rz - rn * rn
        W = wj[k] * jnp.exp(-lam * rt2)  # [N]
        if not shared:
            ddn = nx_ * dx[k] + ny_ * dy[k] + nz_ * dz[k]
            d2 = dx[k] * dx[k] + dy[k] * dy[k] + dz[k] * dz[k]
            W = jnp.where(d2 - ddn * ddn > eps * eps, W, 0.0)
        ux, uy, uz = ux + W * dx[k], uy + W * dy[k], uz + W * dz[k]
    return ux, uy, uz


def _columns(y, delta, w):
    return [y[:, 0], y[:, 1], y[:, 2], delta[:, 0], delta[:, 1], delta[:, 2], w]


def _project(acc, n):
    ux, uy, uz = acc
    nx_, ny_, nz_ = n
    un = nx_ * ux + ny_ * uy + nz_ * uz
    return jnp.stack([ux - nx_ * un, uy - ny_ * un, uz - nz_ * un], -1)


def _planes(x, n):
    return tuple(x[:, k] for k in range(3)), tuple(n[:, k] for k in range(3))


def shear_sums_dense(x, n, y, delta, w, lam, eps):
    """Every point, in a ``scan`` over blocks (see the module docstring)."""
    dtype = y.dtype
    xp, npl = _planes(x, n)
    M = y.shape[0]
    nb = -(-M // BLOCK)
    cols = _columns(y, delta, w)
    pad = nb * BLOCK - M
    if pad:
        cols = [jnp.concatenate([c, jnp.zeros((pad,), dtype)]) for c in cols]
    xs = tuple(c.reshape(nb, BLOCK) for c in cols)
    z = jnp.zeros(xp[0].shape, dtype)

    def body(acc, blk):
        return _block(acc, blk, xp, npl, lam, eps), None

    acc, _ = jax.lax.scan(body, (z, z, z), xs)
    return _project(acc, npl)


def shear_sums_sparse(x, n, y, delta, w, lam, eps):
    """The points with ``w != 0`` only, taken in order by rank, in a ``while_loop`` over
    blocks."""
    dtype = y.dtype
    xp, npl = _planes(x, n)
    M = y.shape[0]
    cum = running_count(w != 0)  # [M] weighted points up to each index
    count = cum[-1] if M else jnp.zeros((), jnp.int32)
    cols = [jnp.concatenate([c, jnp.zeros((1,), dtype)]) for c in _columns(y, delta, w)]
    z = jnp.zeros(xp[0].shape, dtype)

    def cond(carry):
        return carry[0] * BLOCK < count

    def body(carry):
        k, acc = carry
        # the block's weighted points by rank (binary searches; a scatter of every point's
        # slot made XLA recompute the weights per index); M, a zero row, past the count
        rank = k * BLOCK + jnp.arange(1, BLOCK + 1, dtype=jnp.int32)
        ids = jnp.searchsorted(cum, rank, side="left", method="scan_unrolled")
        ids = jnp.where(rank <= count, ids, M)
        blk = tuple(c[ids] for c in cols)
        return k + 1, _block(acc, blk, xp, npl, lam, eps)

    _, acc = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), (z, z, z)))
    return _project(acc, npl)


@functools.partial(jax.custom_jvp, nondiff_argnums=(6,))
def shear_sums(x, n, y, delta, w, lam, eps):
    """``[N, 3]`` shear sums (module docstring): the value from the sparse pass, derivatives
    from the dense one.

    Args:
      x: ``[N, 3]`` probe positions (m, link frame).
      n: ``[N, 3]`` or ``[1, 3]`` unit probe normals.
      y: ``[M, 3]`` tracked points (m, link frame).
      delta: ``[M, 3]`` displacement of each point from its anchor (m).
      w: ``[M]`` weights (m; 0 for points that do not contribute).
      lam: ``lambda_s`` (1/m^2).
      eps: the per-pair threshold (static float).
    """
    return shear_sums_sparse(x, n, y, delta, w, lam, eps)


@shear_sums.defjvp
def _shear_sums_jvp(eps, primals, tangents):
    return jax.jvp(lambda *a: shear_sums_dense(*a, eps), primals, tangents)
