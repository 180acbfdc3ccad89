"""Guarded numerics helpers: affine_planes (custom JVP whose reverse mode is one product)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from difftaxel._numerics import (
    compute_once,
    first_argmax,
    first_argmin,
    loop_bound,
    matmul3,
    running_count,
    runtime_one,
    skew,
)
from difftaxel.geometry.planes import affine_planes
from difftaxel.testing import check_grad_fd

RNG = np.random.default_rng(3)


def _plain(A, b, x, y, z):
    return tuple(A[i, 0] * x + A[i, 1] * y + A[i, 2] * z + b[i] for i in range(A.shape[0]))


def _args(k=3, shape=(7,)):
    A = jnp.asarray(RNG.normal(size=(k, 3)))
    b = jnp.asarray(RNG.normal(size=(k,)))
    xyz = tuple(jnp.asarray(RNG.normal(size=shape)) for _ in range(3))
    return A, b, xyz


@pytest.mark.parametrize("k, shape", [(3, (7,)), (2, (2, 5))])
def test_affine_planes_value_jvp_and_grad(k, shape):
    A, b, (x, y, z) = _args(k, shape)
    out = affine_planes(A, b, x, y, z)
    assert len(out) == k and all(o.shape == shape for o in out)
    np.testing.assert_allclose(jnp.stack(out), jnp.stack(_plain(A, b, x, y, z)), atol=1e-14)
    # forward mode: the JVP equals the plain form's, for every subset of non-zero tangents
    tA, tb, tx = (jnp.asarray(RNG.normal(size=v.shape)) for v in (A, b, x))
    for tangents in [
        (tA, tb, tx),
        (tA, 0 * tb, 0 * tx),
        (0 * tA, tb, 0 * tx),
        (0 * tA, 0 * tb, tx),
    ]:
        f = lambda A, b, x: jnp.stack(affine_planes(A, b, x, y, z))  # noqa: E731
        g = lambda A, b, x: jnp.stack(_plain(A, b, x, y, z))  # noqa: E731
        _, t1 = jax.jvp(f, (A, b, x), tangents)
        _, t2 = jax.jvp(g, (A, b, x), tangents)
        np.testing.assert_allclose(t1, t2, atol=1e-13)
    # reverse mode against float64 central differences, every argument
    w = jnp.asarray(RNG.normal(size=(k,) + shape))

    def loss(p):
        return jnp.sum(w * jnp.sin(jnp.stack(affine_planes(p["A"], p["b"], *p["xyz"]))))

    check_grad_fd(loss, {"A": A, "b": b, "xyz": (x, y, z)})
    # jit == eager; jacfwd works (a custom JVP, not a custom VJP)
    np.testing.assert_allclose(
        jnp.stack(jax.jit(affine_planes)(A, b, x, y, z)), jnp.stack(out), atol=0
    )
    J = jax.jacfwd(lambda A: jnp.stack(affine_planes(A, b, x, y, z)))(A)
    assert J.shape == (k,) + shape + (k, 3)


def test_affine_planes_vmap_batched_and_shared_planes():
    """Batched (A, b) with shared planes (one layout, many environments) and batched planes:
    values and gradients equal a loop."""
    E = 4
    As = jnp.asarray(RNG.normal(size=(E, 3, 3)))
    bs = jnp.asarray(RNG.normal(size=(E, 3)))
    xs = jnp.asarray(RNG.normal(size=(E, 3, 6)))

    def loss_shared(A, b):
        return jnp.sum(jnp.stack(affine_planes(A, b, *xs[0])) ** 2)

    def loss_batched(A, b, X):
        return jnp.sum(jnp.stack(affine_planes(A, b, *X)) ** 2)

    g = jax.vmap(jax.grad(loss_shared, argnums=(0, 1)))(As, bs)
    gb = jax.vmap(jax.grad(loss_batched, argnums=(0, 1, 2)))(As, bs, xs)
    plain = jax.grad(lambda A, b, X: jnp.sum(jnp.stack(_plain(A, b, *X)) ** 2), argnums=(0, 1, 2))
    for e in range(E):
        ref = plain(As[e], bs[e], xs[0])
        np.testing.assert_allclose(g[0][e], ref[0], rtol=1e-12)
        np.testing.assert_allclose(g[1][e], ref[1], rtol=1e-12)
        ref = plain(As[e], bs[e], xs[e])
        for i in range(3):
            np.testing.assert_allclose(gb[i][e], ref[i], rtol=1e-12)


def test_skew_is_the_cross_product_matrix():
    w, p = (jnp.asarray(RNG.normal(size=3)) for _ in range(2))
    np.testing.assert_allclose(skew(w) @ p, jnp.cross(w, p), atol=1e-15)
    np.testing.assert_allclose(skew(w), -skew(w).T, atol=0)


def test_compute_once_is_an_exact_identity_in_value_and_gradient():
    """``compute_once`` only changes how XLA fuses: values bit-equal (including -0, inf, huge
    and tiny), gradients equal, the runtime 1 carries no gradient, under jit and eagerly."""
    x = jnp.asarray([-0.0, 0.0, 1e-300, -3.5, 1e300, jnp.inf])
    g = jnp.asarray([0.7, 1.3, -2.0, 0.1, 5.0, 1.0])

    def f(x, g):
        one = runtime_one(g)
        a, b = compute_once(one, x, 2 * x)
        return a, b

    for fn in (f, jax.jit(f)):
        a, b = fn(x, g)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(x))
        np.testing.assert_array_equal(np.signbit(np.asarray(a)), np.signbit(np.asarray(x)))
        np.testing.assert_array_equal(np.asarray(b), 2 * np.asarray(x))
    xf = x[:5]
    dx, dg = jax.grad(lambda x, g: jnp.sum(jnp.sin(f(x, g)[0])), argnums=(0, 1))(xf, g[:5])
    np.testing.assert_array_equal(np.asarray(dx), np.cos(np.asarray(xf)))
    np.testing.assert_array_equal(np.asarray(dg), 0.0)
    assert compute_once(runtime_one(g), x).dtype == x.dtype


def test_stack_rows_is_stack_and_puts_the_batch_axis_first_under_vmap():
    from difftaxel._numerics import stack_rows

    p = [jnp.arange(6.0).reshape(2, 3) + i for i in range(4)]
    np.testing.assert_array_equal(stack_rows(p), jnp.stack(p, 0))
    batched = [jnp.arange(30.0).reshape(5, 2, 3) * (i + 1) for i in range(4)]
    out = jax.vmap(stack_rows)(batched)
    np.testing.assert_array_equal(out, jax.vmap(lambda *q: jnp.stack(q, 0))(*batched))
    # no transpose in the lowered program: the rows stack behind the batch axis
    txt = jax.jit(jax.vmap(stack_rows)).lower(batched).as_text()
    assert "transpose" not in txt


def test_channels_last_is_a_transpose_and_reshape_under_every_transform():
    from difftaxel._numerics import _with_layout_constraint, channels_last

    x = jnp.asarray(RNG.normal(size=(2, 4, 3, 6)))  # [E, H, C, N], N = 2 x 3 grid
    shp = (2, 3, 3)
    ref = jnp.moveaxis(x, -2, -1).reshape(2, 4, *shp)
    f = lambda x: channels_last(x, x.shape[:-2] + shp)  # noqa: E731
    np.testing.assert_array_equal(f(x), ref)
    np.testing.assert_array_equal(jax.jit(f)(x), ref)  # jit == eager
    loop = jnp.stack([jnp.stack([channels_last(h, shp) for h in e]) for e in x])
    np.testing.assert_array_equal(jax.vmap(jax.vmap(lambda y: channels_last(y, shp)))(x), loop)
    # linear: the gradient of sum(f^2) is 2x; forward and reverse mode agree
    np.testing.assert_array_equal(jax.grad(lambda x: jnp.sum(f(x) ** 2))(x), 2 * x)
    t = jnp.asarray(RNG.normal(size=x.shape))
    np.testing.assert_array_equal(jax.jvp(f, (x,), (t,))[1], f(t))
    np.testing.assert_array_equal(jax.linear_transpose(f, x)(ref)[0], x)
    if _with_layout_constraint is None:  # pragma: no cover (an older JAX: no layout API)
        return
    # the reshape stays out of the transposing loop: the program's root is a relabelling
    # (bitcast) of a [E, N, C] fusion, not a fusion looping over the [E, ny, nx, C] shape
    hlo = jax.jit(jax.vmap(lambda y: channels_last(y, shp))).lower(x[:, 0]).compile().as_text()
    root = [ln for ln in hlo.split("ENTRY")[1].splitlines() if "ROOT" in ln][0]
    assert "bitcast(" in root, root


def test_safe_pow_exponent_one_branch_keeps_the_derivatives():
    """``p == 1`` returns ``x`` itself (no exp/log), yet the derivative in ``p`` is still
    ``x log x`` (an option's gradient never vanishes on a shortcut); ``p`` batched under vmap
    takes the general form; 0 at ``x == 0`` with zero, finite derivatives."""
    from difftaxel._numerics import safe_pow

    x = jnp.asarray([0.0, 1e-3, 0.5, 2.0])
    np.testing.assert_array_equal(safe_pow(x, jnp.asarray(1.0)), x)
    for p in (1.0, 1.5):
        gp = jax.grad(lambda q, p=p: jnp.sum(safe_pow(x, q)))(jnp.asarray(p))
        ref = np.sum(np.where(x > 0, x**p * np.log(np.where(x > 0, x, 1.0)), 0.0))
        np.testing.assert_allclose(gp, ref, rtol=1e-12)
        gx = jax.grad(lambda y, p=p: jnp.sum(safe_pow(y, jnp.asarray(p))))(x)
        np.testing.assert_allclose(gx, np.where(x > 0, p * x ** (p - 1), 0.0), rtol=1e-12)
        check_grad_fd(lambda q, p=p: jnp.sum(safe_pow(x[1:], q)), jnp.asarray(p))
    ps = jnp.asarray([1.0, 1.5])
    out = jax.vmap(lambda q: safe_pow(x, q))(ps)
    np.testing.assert_allclose(out[1], np.where(x > 0, x**1.5, 0.0), rtol=1e-12)
    np.testing.assert_allclose(out[0], x, rtol=1e-15)


def test_matmul3_is_the_matrix_product_under_vmap_and_grad():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(4, 5, 3)), rng.normal(size=(4, 3, 2))
    np.testing.assert_allclose(matmul3(jnp.asarray(a), jnp.asarray(b)), a @ b, rtol=1e-12)
    shared = rng.normal(size=(3, 2))  # one right factor for a batch of rows
    np.testing.assert_allclose(jax.vmap(matmul3, (0, None))(a, shared), a @ shared, rtol=1e-12)
    ga = jax.grad(lambda x: jnp.sum(matmul3(x, jnp.asarray(b)) ** 2))(jnp.asarray(a))
    np.testing.assert_allclose(ga, 2 * (a @ b) @ np.swapaxes(b, -1, -2), rtol=1e-12)
    with pytest.raises(ValueError, match="matmul3"):
        matmul3(jnp.ones((2, 4)), jnp.ones((4, 2)))


def test_first_argmax_and_argmin_are_jnp_argmax_and_argmin():
    """Ties (the first wins), infinities, NaN (counted as the extreme, the first NaN wins),
    integers, either axis, under jit and vmap."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, size=(6, 9)).astype(float)  # many ties
    x[1, 3] = np.nan
    x[2, :] = np.inf
    x[3, :] = -np.inf
    x[4, [2, 6]] = np.nan
    for a in (jnp.asarray(x), jnp.asarray(rng.integers(-3, 3, size=(6, 9)))):
        for axis in (0, 1, -1):
            np.testing.assert_array_equal(first_argmax(a, axis), jnp.argmax(a, axis))
            np.testing.assert_array_equal(first_argmin(a, axis), jnp.argmin(a, axis))
    jx = jnp.asarray(x)
    np.testing.assert_array_equal(jax.jit(first_argmax)(jx), jnp.argmax(jx, -1))
    np.testing.assert_array_equal(jax.vmap(first_argmin)(jx), jnp.argmin(jx, -1))
    assert first_argmax(jx).dtype == jnp.int32


@pytest.mark.parametrize("n", [1, 16, 17, 128, 129, 300])
def test_running_count_is_the_cumulative_sum(n):
    """Each of its three ways (a cumulative sum, one triangular product, chunks of 16), under
    jit and vmap, for leading axes and none."""
    m = np.random.default_rng(n).uniform(size=(3, 2, n)) > 0.4
    want = np.cumsum(m, -1)
    np.testing.assert_array_equal(running_count(jnp.asarray(m)), want)
    np.testing.assert_array_equal(jax.jit(jax.vmap(running_count))(jnp.asarray(m)), want)
    np.testing.assert_array_equal(running_count(jnp.asarray(m[0, 0])), want[0, 0])
    assert running_count(jnp.asarray(m)).dtype == jnp.int32


def test_loop_bound_is_the_batch_maximum_and_a_masked_loop_equals_each_element():
    """Unbatched: the count itself. Under vmap (nested too): the largest count, unbatched, so
    a while_loop's predicate stays unbatched; a body that masks its update past its own count
    gives each element its own answer."""
    n = jnp.asarray([[1, 5, 0], [7, 2, 3]], jnp.int32)
    assert int(loop_bound(jnp.int32(4))) == 4
    np.testing.assert_array_equal(jax.vmap(loop_bound)(n[0]), [5, 5, 5])
    np.testing.assert_array_equal(jax.jit(jax.vmap(jax.vmap(loop_bound)))(n), np.full((2, 3), 7))

    def triangular(k):  # 0 + 1 + ... + (k - 1), one iteration per term
        body = lambda c: (c[0] + 1, c[1] + jnp.where(c[0] < k, c[0], 0))  # noqa: E731
        return jax.lax.while_loop(lambda c: c[0] < loop_bound(k), body, (0, 0))[1]

    want = np.asarray(n) * (np.asarray(n) - 1) // 2
    np.testing.assert_array_equal(jax.jit(jax.vmap(jax.vmap(triangular)))(n), want)
    assert int(triangular(jnp.int32(5))) == 10
