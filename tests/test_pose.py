"""Pose and quaternion algebra: axioms, round trips, closed forms, gradients at 0 and pi."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftaxel import pose as P
from difftaxel.testing import assert_jit_matches_eager, assert_vmap_matches_loop, check_grad_fd


def rand_quat(rng, n=None):
    q = rng.standard_normal((4,) if n is None else (n, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def rand_pose(rng, n=None):
    t = rng.standard_normal((3,) if n is None else (n, 3))
    return np.concatenate([t, rand_quat(rng, n)], -1)


seeds = st.integers(0, 2**31 - 1)
SET = settings(max_examples=25, deadline=None, derandomize=True)


@SET
@given(seeds)
def test_compose_associative_and_inverse(seed):
    rng = np.random.default_rng(seed)
    a, b, c = (jnp.asarray(rand_pose(rng)) for _ in range(3))
    lhs = P.compose(P.compose(a, b), c)
    rhs = P.compose(a, P.compose(b, c))
    p = jnp.asarray(rng.standard_normal(3))
    np.testing.assert_allclose(P.apply(lhs, p), P.apply(rhs, p), atol=1e-12)
    ident = P.compose(a, P.inverse(a))
    np.testing.assert_allclose(ident[:3], 0, atol=1e-12)
    np.testing.assert_allclose(abs(ident[6]), 1, atol=1e-12)
    np.testing.assert_allclose(P.inverse_apply(a, P.apply(a, p)), p, atol=1e-12)
    np.testing.assert_allclose(
        P.apply(P.relative(a, b), p), P.inverse_apply(a, P.apply(b, p)), atol=1e-12
    )


@SET
@given(seeds)
def test_matrix_round_trip_and_rotate(seed):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rand_quat(rng))
    R = P.quat_to_matrix(q)
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(R), 1.0, atol=1e-12)
    q2 = P.matrix_to_quat(R)
    np.testing.assert_allclose(np.abs(np.dot(q, q2)), 1.0, atol=1e-12)
    v = jnp.asarray(rng.standard_normal(3))
    np.testing.assert_allclose(P.quat_rotate(q, v), R @ v, atol=1e-12)
    M = P.pose_to_matrix(jnp.concatenate([v, q]))
    np.testing.assert_allclose(np.abs(P.pose_from_matrix(M)[3:] @ q), 1, atol=1e-12)


@SET
@given(seeds, st.floats(1e-9, np.pi))
def test_exp_log_round_trip(seed, angle):
    rng = np.random.default_rng(seed)
    axis = rng.standard_normal(3)
    axis /= np.linalg.norm(axis)
    w = jnp.asarray(axis * angle)
    np.testing.assert_allclose(P.quat_log(P.quat_exp(w)), w, atol=1e-10)
    xi = jnp.concatenate([jnp.asarray(rng.standard_normal(3)), w])
    np.testing.assert_allclose(P.se3_log(P.se3_exp(xi)), xi, atol=1e-9)


def test_closed_form_values():
    q = P.quat_from_axis_angle(jnp.array([0.0, 0.0, 1.0]), jnp.pi / 2)
    np.testing.assert_allclose(q, [0, 0, np.sqrt(0.5), np.sqrt(0.5)], atol=1e-15)
    np.testing.assert_allclose(P.quat_rotate(q, jnp.array([1.0, 0, 0])), [0, 1, 0], atol=1e-15)
    T = P.make_pose(jnp.array([1.0, 2.0, 3.0]), q)
    np.testing.assert_allclose(P.apply(T, jnp.array([1.0, 0, 0])), [1, 3, 3], atol=1e-15)
    # wxyz converters
    np.testing.assert_array_equal(P.quat_xyzw_to_wxyz(q), [q[3], q[0], q[1], q[2]])
    np.testing.assert_array_equal(P.quat_wxyz_to_xyzw(P.quat_xyzw_to_wxyz(q)), q)
    # se3 exp of pure translation
    np.testing.assert_allclose(
        P.se3_exp(jnp.array([1.0, 2, 3, 0, 0, 0])), [1, 2, 3, 0, 0, 0, 1], atol=1e-15
    )
    # screw motion: rotate pi/2 about z with rho=(1,0,0): t = V rho = (sin/th, (1-cos)/th, 0)
    th = np.pi / 2
    T = P.se3_exp(jnp.array([1.0, 0, 0, 0, 0, th]))
    np.testing.assert_allclose(T[:3], [np.sin(th) / th, (1 - np.cos(th)) / th, 0], atol=1e-14)
    # slerp halfway between identity and 90 deg about x = 45 deg
    q0 = P.quat_identity(jnp.float64)
    q1 = P.quat_from_axis_angle(jnp.array([1.0, 0, 0]), np.pi / 2)
    np.testing.assert_allclose(
        P.quat_slerp(q0, q1, 0.5),
        P.quat_from_axis_angle(jnp.array([1.0, 0, 0]), np.pi / 4),
        atol=1e-14,
    )
    axis, ang = P.quat_to_axis_angle(q1)
    np.testing.assert_allclose(axis, [1, 0, 0], atol=1e-14)
    np.testing.assert_allclose(ang, np.pi / 2, atol=1e-14)


def test_matrix_to_quat_at_pi():
    for axis in np.eye(3):
        R = P.quat_to_matrix(P.quat_from_axis_angle(jnp.asarray(axis), np.pi))
        q = P.matrix_to_quat(R)
        np.testing.assert_allclose(np.abs(q[:3]), axis, atol=1e-14)


@pytest.mark.parametrize("angle", [0.0, 1e-7, 0.3, np.pi - 1e-7, np.pi])
def test_gradients_finite_and_match_fd(angle):
    axis = np.array([0.3, -0.5, 0.8])
    axis /= np.linalg.norm(axis)
    w0 = jnp.asarray(axis * angle)
    rng = np.random.default_rng(1)
    c = jnp.asarray(rng.standard_normal(4))
    v = jnp.asarray(rng.standard_normal(3))

    check_grad_fd(lambda w: jnp.dot(c, P.quat_exp(w)), w0, step=1e-6)
    check_grad_fd(lambda w: jnp.dot(P.se3_exp(jnp.concatenate([v, w]))[:3], v), w0)
    check_grad_fd(lambda w: jnp.dot(P.quat_rotate(P.quat_exp(w), v), c[:3]), w0)
    if angle < 3.0:  # log jumps at the antipodal flip (w = 0): no finite difference across it
        q0 = P.quat_exp(w0)
        check_grad_fd(lambda q: jnp.dot(P.quat_log(q), v), q0, step=1e-7)
        check_grad_fd(
            lambda q: jnp.dot(P.se3_log(jnp.concatenate([v, q])), c[:3].repeat(2)), q0, step=1e-7
        )
    # finite gradient exactly at pi for log and matrix_to_quat
    g = jax.grad(lambda w: jnp.sum(P.quat_log(P.quat_exp(w))))(w0)
    assert np.all(np.isfinite(g))
    g = jax.grad(lambda w: jnp.sum(P.matrix_to_quat(P.quat_to_matrix(P.quat_exp(w)))))(w0)
    assert np.all(np.isfinite(g))


def test_jit_vmap():
    rng = np.random.default_rng(0)
    a, b = jnp.asarray(rand_pose(rng, 5)), jnp.asarray(rand_pose(rng, 5))
    assert_jit_matches_eager(P.compose, a, b)
    assert_vmap_matches_loop(P.compose, (a, b))
    assert_vmap_matches_loop(P.se3_log, (a,))
    assert_vmap_matches_loop(P.matrix_to_quat, (P.quat_to_matrix(a[:, 3:]),))


def test_check_pose_errors():
    with pytest.raises(ValueError, match="T_test.*unit quaternion"):
        P.check_pose(np.array([0, 0, 0, 0, 0, 0, 1.01]), "T_test")
    with pytest.raises(ValueError, match=r"T_test: expected shape \(\.\.\., 7\)"):
        P.check_pose(np.zeros(6), "T_test")
    P.check_pose(np.array([0, 0, 0, 0, 0, 0, 1 + 5e-7]), "T_test")  # within 1e-6


def test_quat_rotate_planes_is_quat_rotate_on_planes():
    """``quat_rotate_planes`` equals ``quat_rotate`` (and, with ``conjugate``, rotation by the
    conjugate) on broadcasting planes; a quarter turn about z maps x to y by hand."""
    rng = np.random.default_rng(0)
    q = rng.normal(size=(5, 1, 4))
    q = jnp.asarray(q / np.linalg.norm(q, axis=-1, keepdims=True))  # [5, 1, 4]
    v = jnp.asarray(rng.normal(size=(1, 7, 3)))  # planes [1, 7]: broadcast to [5, 7]
    qp = tuple(q[..., i] for i in range(4))
    vp = tuple(v[..., i] for i in range(3))
    for conj, qq in ((False, q), (True, P.quat_conjugate(q))):
        got = jnp.stack(P.quat_rotate_planes(qp, vp, conjugate=conj), -1)
        np.testing.assert_allclose(got, P.quat_rotate(qq, v), rtol=0, atol=1e-14)
    s = np.sqrt(0.5)
    x, y, z = P.quat_rotate_planes((0.0, 0.0, s, s), (1.0, 0.0, 0.0))
    np.testing.assert_allclose([x, y, z], [0.0, 1.0, 0.0], atol=1e-15)
    f = jax.jit(lambda q, v: P.quat_rotate_planes(q, v))
    for a, b in zip(f(qp, vp), P.quat_rotate_planes(qp, vp), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-15)


def test_quat_mul_and_matrix_planes_match_the_stacked_forms():
    """On broadcasting planes: the product equals ``quat_mul`` and the matrix rows equal
    ``quat_to_matrix``; two quarter turns about z make a half turn, whose matrix is
    ``diag(-1, -1, 1)`` by hand."""
    rng = np.random.default_rng(1)
    q1 = rng.normal(size=(5, 1, 4))
    q2 = rng.normal(size=(1, 7, 4))
    q1, q2 = (jnp.asarray(q / np.linalg.norm(q, axis=-1, keepdims=True)) for q in (q1, q2))
    planes = lambda q: tuple(q[..., i] for i in range(4))  # noqa: E731
    got = jnp.stack(P.quat_mul_planes(planes(q1), planes(q2)), -1)
    np.testing.assert_allclose(got, P.quat_mul(q1, q2), rtol=0, atol=1e-15)
    rows = P.quat_to_matrix_planes(planes(q1))
    R = jnp.stack([jnp.stack(r, -1) for r in rows], -2)
    np.testing.assert_allclose(R, P.quat_to_matrix(q1), rtol=0, atol=1e-15)
    s = np.sqrt(0.5)
    half = P.quat_mul_planes((0.0, 0.0, s, s), (0.0, 0.0, s, s))
    np.testing.assert_allclose(half, [0.0, 0.0, 1.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(
        np.array(P.quat_to_matrix_planes(half), float), np.diag([-1.0, -1.0, 1.0]), atol=1e-15
    )


@pytest.mark.parametrize("jit", [True, False])
def test_the_vmap_helper_catches_a_wrong_batching_rule(jit):
    """``assert_vmap_matches_loop`` fails on a batching rule that computes something else,
    compiled (the default) or run eagerly."""

    @jax.custom_batching.custom_vmap
    def twice(x):
        return 2.0 * x

    @twice.def_vmap
    def _rule(axis_size, in_batched, x):
        return 3.0 * x, in_batched[0]

    x = jnp.arange(3.0)
    with pytest.raises(AssertionError, match="vmap vs loop"):
        assert_vmap_matches_loop(twice, (x,), jit=jit)
    assert_vmap_matches_loop(lambda y: 2.0 * y, (x,), jit=jit)
