"""Guarded numerics: norms, divisions and powers whose gradients stay finite at zero.

Every helper here uses the "double where" pattern: the unsafe branch is evaluated on a
substituted safe input, so neither the value nor the gradient of the discarded branch can
produce NaN or inf (see the JAX FAQ on ``where`` and NaN gradients).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

try:  # an experimental JAX API: without it, the same values (the reshape fuses in)
    from jax.experimental.layout import Layout as _Layout
    from jax.experimental.layout import with_layout_constraint as _with_layout_constraint
except ImportError:  # pragma: no cover
    _Layout = _with_layout_constraint = None


def eps(dtype) -> float:
    """Machine epsilon of ``dtype``, floored at 1e-15 (Genesis's ``gs.EPS``)."""
    return max(1e-15, float(jnp.finfo(jnp.dtype(dtype)).eps))


def tiny(dtype) -> float:
    """A squared-norm floor below which vectors count as zero for ``dtype``."""
    return float(jnp.finfo(jnp.dtype(dtype)).tiny) ** 0.5 * 1e3


def float_dtype(*xs) -> jnp.dtype:
    """Result floating dtype of ``xs`` (at least the default float of JAX)."""
    dt = jnp.result_type(*xs)
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.result_type(float)
    return jnp.dtype(dt)


def safe_norm(x: Array, axis: int = -1, keepdims: bool = False) -> Array:
    """Euclidean norm with gradient 0 (not NaN) at the zero vector."""
    sq = (
        _sum_last3(x * x, keepdims)
        if _is_last3(x, axis)
        else jnp.sum(x * x, axis, keepdims=keepdims)
    )
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def safe_normalize(x: Array, axis: int = -1, floor: float | None = None) -> Array:
    """``x / max(|x|, floor)``: unit vector, the zero vector stays zero with finite gradient.

    ``floor`` defaults to the dtype's epsilon, as Genesis's ``v / max(|v|, eps)``.
    """
    f = eps(x.dtype) if floor is None else floor
    n = safe_norm(x, axis=axis, keepdims=True)
    return x / jnp.maximum(n, f)


def _pow_value(x: Array, p: Array) -> Array:
    def general(x, p):
        pos = x > 0
        return jnp.where(pos, jnp.exp(p * jnp.log(jnp.where(pos, x, 1.0))), 0.0)

    if jnp.ndim(p) == 0:  # the common exponent 1 costs no exp and log (a scalar branch)
        # x is the branches' only array operand (why: each array a branch closes over is
        # stored before the branch runs; masks made inside fuse with their use)
        return jax.lax.cond(p == 1, lambda x, p: jnp.where(x > 0, x, 0.0), general, x, p)
    return general(x, p)


@jax.custom_jvp
def safe_pow(x: Array, p: Array) -> Array:
    """``x ** p`` for ``x >= 0``, ``p >= 1``: 0 at ``x == 0`` with finite derivatives in x and p.

    The derivative in ``p`` is ``x**p log x`` which tends to 0 at ``x -> 0``; the naive form
    gives ``0 * -inf = NaN`` there. At ``x == 0`` both derivatives are 0.

    Written as ``exp(p log x)``: XLA's CPU backend vectorises ``exp`` and ``log`` but lowers a
    ``pow`` with a traced exponent to a scalar call per element. A scalar ``p`` equal to 1 (a
    KinematicTaxel's default) takes a branch that returns ``x`` itself; the derivatives are
    the same on both branches (a custom JVP).
    """
    return _pow_value(x, p)


@safe_pow.defjvp
def _safe_pow_jvp(primals, tangents):
    x, p = primals
    tx, tp = tangents
    out = safe_pow(x, p)
    pos = x > 0
    xs = jnp.where(pos, x, 1.0)
    lx = jnp.log(xs)
    t = out * (p * tx / xs + tp * lx)
    return out, jnp.where(pos, t, 0.0)


def runtime_one(x: Array) -> Array:
    """Ones shaped like the runtime array ``x``: ``1 + 0 * x``, which XLA cannot fold (for
    :func:`compute_once`). No gradient flows through it (a stop_gradient: its derivative is 0,
    and the backward pass need not compute the zero); where ``x`` is NaN or inf it is NaN."""
    return jax.lax.stop_gradient(1.0 + 0.0 * jnp.asarray(x))


@jax.custom_jvp
def _divide_by_one(x: Array, one: Array) -> Array:
    return x / one


@_divide_by_one.defjvp
def _divide_by_one_jvp(primals, tangents):
    x, one = primals
    return x / one, tangents[0]  # one == 1: the tangent passes through (no division)


def compute_once(one: Array, *xs: Array):
    """``x / one`` for each ``x``, with ``one`` from :func:`runtime_one` of an array shaped
    like ``x``: the same values and gradients (dividing by 1 is exact, and the derivative is
    the identity), but each ``x`` is computed once.

    Why: XLA's CPU fusion copies a cheap producer into every consumer, so a plane read by six
    output components is recomputed six times; a division is an expensive op, which it never
    copies. The divisor is a full array because XLA rewrites a division by a broadcast scalar
    as a (cheap) product. If ``one`` is a compile-time constant XLA folds the division away.
    """
    out = tuple(_divide_by_one(x, one.astype(x.dtype)) for x in xs)
    return out[0] if len(out) == 1 else out


def stack_rows(planes) -> Array:
    """``jnp.stack(planes, 0)``: planes of one shape ``[...]`` as rows ``[C, ...]``.

    Why: under ``vmap``, ``jnp.stack`` puts its new axis ahead of the batch axis
    (``[C, E, ...]``), so a product over the rows and every state laid out ``[E, C, ...]`` pay
    a transpose; a reshape puts the batch axis first.
    """
    return jnp.concatenate([jnp.reshape(p, (1,) + jnp.shape(p)) for p in planes], 0)


def channels_last(x: Array, shape: tuple) -> Array:
    """``jnp.moveaxis(x, -2, -1).reshape(shape)``: channels-first ``x [..., C, N]`` as
    ``[..., N, C]``, reshaped to ``shape`` (e.g. a grid layout ``[..., ny, nx, C]``).

    Why: XLA's CPU loops over an output's own shape. Interleaving the channels into a
    ``[..., ny, nx, C]`` output runs a loop of ``nx`` over ``C`` unrolled values, too short to
    vectorise; a ``[..., N, C]`` transpose vectorises along ``N``. Pinning the transposed
    array's (default) layout keeps the reshape out of its loop: a free relabelling of the
    same buffer.
    """
    return pinned_reshape(jnp.swapaxes(x, -1, -2), shape)


def pinned_reshape(x: Array, shape: tuple) -> Array:
    """``x.reshape(shape)`` with ``x``'s default (row-major) layout pinned first.

    Why: XLA's CPU loops over an output's own shape, so a flat ``[..., N]`` reading reshaped to
    a grid ``[..., ny, nx]`` inside the fusion that computes it runs loops of ``nx``, too short
    to vectorise; pinned, the fusion loops over ``N`` and the reshape relabels its buffer.
    """
    if _with_layout_constraint is not None:
        x = _with_layout_constraint(x, _Layout(tuple(range(x.ndim))))
    return x.reshape(shape)


def safe_div(a: Array, b: Array) -> Array:
    """``a / b`` where ``b != 0`` and 0 elsewhere, with finite gradients in both."""
    nz = b != 0
    return jnp.where(nz, a / jnp.where(nz, b, 1.0), 0.0)


def smooth_relu(x: Array, width) -> Array:
    """``width * softplus(x / width)``: a smooth ``max(0, x)`` with length scale ``width`` > 0.

    Converges to ``max(0, x)`` uniformly as ``width -> 0`` (the largest gap, ``width * log 2``,
    is at ``x = 0``) and is positive with a non-zero gradient for every ``x``.
    """
    return width * jax.nn.softplus(x / width)


def lead(x: Array, ndim: int) -> Array:
    """Prepend unit axes to ``x`` until it has ``ndim`` dimensions (explicit rank promotion)."""
    x = jnp.asarray(x)
    return x.reshape((1,) * (ndim - x.ndim) + x.shape) if x.ndim < ndim else x


def align(*xs):
    """Give every array the same rank by prepending unit axes (explicit broadcasting)."""
    n = max(jnp.ndim(x) for x in xs)
    return tuple(lead(x, n) for x in xs)


def cross(a: Array, b: Array) -> Array:
    """Cross product on the last axis, written out (cheaper than ``jnp.cross`` under XLA)."""
    a, b = align(a, b)
    ax, ay, az = a[..., 0], a[..., 1], a[..., 2]
    bx, by, bz = b[..., 0], b[..., 1], b[..., 2]
    return jnp.stack([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx], axis=-1)


def skew(w: Array) -> Array:
    """``[3, 3]`` cross-product matrix of ``w [3]``: ``skew(w) @ p == w x p``."""
    z = jnp.zeros((), w.dtype)
    return jnp.stack(
        [
            jnp.stack([z, -w[2], w[1]]),
            jnp.stack([w[2], z, -w[0]]),
            jnp.stack([-w[1], w[0], z]),
        ]
    )


def matmul3(a: Array, b: Array) -> Array:
    """``a @ b`` for a contraction of length 3 (``a [..., m, 3]``, ``b [..., 3, n]`` or
    ``b [3, n]``), written out as three broadcast products. Why: under ``vmap`` XLA's CPU
    backend hands a batched product this small to a library kernel per call, costing many
    times its nine multiplies; written out, it fuses with its neighbours."""
    if a.shape[-1] != 3 or b.ndim < 2 or b.shape[-2] != 3:
        raise ValueError(f"matmul3: expected [..., m, 3] @ [..., 3, n], got {a.shape} @ {b.shape}")
    return sum(a[..., :, k : k + 1] * b[..., k : k + 1, :] for k in range(3))


@jax.custom_batching.custom_vmap
def loop_bound(n: Array) -> Array:
    """``n`` (a scalar count); under ``vmap``, the largest ``n`` of the batch, unbatched.

    For a ``while_loop`` of ``n`` iterations whose body masks its own update where the
    iteration index reaches the element's ``n``: with the bound unbatched the predicate is too,
    and ``vmap`` runs the loop as it is. Why: a batched predicate makes ``vmap`` select
    between the new and the old carry of every element at every iteration."""
    return n


@loop_bound.def_vmap
def _loop_bound_vmap(axis_size, in_batched, n):
    del axis_size
    return loop_bound(jnp.max(n, axis=0) if in_batched[0] else n), False


def running_count(mask: Array) -> Array:
    """Inclusive running count (int32) of the True entries of ``mask [..., n]`` along its last
    axis: ``jnp.cumsum(mask, -1)``. Why: XLA's CPU backend lowers a cumulative sum to a
    windowed reduction whose cost grows with the square of ``n``; beyond 16 entries a product
    with a triangular matrix of ones is cheaper (over chunks of 16 beyond 128 entries; exact
    in float32 below 2^24 entries)."""
    *lead, n = mask.shape
    if n <= 16:  # a kernel call costs more than the windowed sum here
        return jnp.cumsum(mask.astype(jnp.int32), -1)
    if n <= 128:  # one product, nothing padded
        tri = jnp.asarray(np.triu(np.ones((n, n), np.float32)))
        return (mask.astype(jnp.float32) @ tri).astype(jnp.int32)
    k = -(-n // 16)
    pad = [(0, 0)] * len(lead) + [(0, 16 * k - n)]
    m = jnp.pad(mask.astype(jnp.float32), pad).reshape(*lead, k, 16)
    inner = m @ jnp.asarray(np.triu(np.ones((16, 16), np.float32)))  # within each chunk
    before = inner[..., -1] @ jnp.asarray(np.triu(np.ones((k, k), np.float32), 1))
    return (inner + before[..., None]).reshape(*lead, 16 * k)[..., :n].astype(jnp.int32)


def first_argmax(x: Array, axis: int = -1) -> Array:
    """Index (int32) of the first largest entry of ``x`` along ``axis``, ``jnp.argmax``'s
    answer (a NaN counts as the largest). Why: XLA's CPU backend lowers an arg-reduction to
    a two-operand reduce, several times slower than a max followed by the smallest index
    attaining it."""
    top = jnp.max(x, axis=axis, keepdims=True)
    return _first_index((x >= top) | jnp.isnan(x), axis)


def first_argmin(x: Array, axis: int = -1) -> Array:
    """Index (int32) of the first smallest entry of ``x`` along ``axis``, ``jnp.argmin``'s
    answer (a NaN counts as the smallest); see :func:`first_argmax`."""
    low = jnp.min(x, axis=axis, keepdims=True)
    return _first_index((x <= low) | jnp.isnan(x), axis)


def _first_index(hit: Array, axis: int) -> Array:
    """The first True along ``axis`` of ``hit`` (int32; one is always True), reduced in
    place (no transpose)."""
    n = hit.shape[axis]
    i = jax.lax.broadcasted_iota(jnp.int32, hit.shape, axis % hit.ndim)
    return jnp.min(jnp.where(hit, i, n), axis=axis)


def dot(a: Array, b: Array, keepdims: bool = False) -> Array:
    """Dot product on the last axis."""
    a, b = align(a, b)
    ab = a * b
    if _is_last3(ab, -1):
        return _sum_last3(ab, keepdims)
    return jnp.sum(ab, axis=-1, keepdims=keepdims)


def _is_last3(x: Array, axis: int) -> bool:
    return x.ndim >= 1 and axis in (-1, x.ndim - 1) and x.shape[-1] == 3


def _sum_last3(x: Array, keepdims: bool) -> Array:
    """Sum over a trailing axis of size 3, written out: XLA's CPU backend hands a reduce over
    a size-3 minor axis to a library reduction, where the two adds fuse into the surrounding
    kernel."""
    s = x[..., 0] + x[..., 1] + x[..., 2]
    return s[..., None] if keepdims else s
