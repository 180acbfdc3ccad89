"""ProximityTaxel's sums over several tracked bodies (``sensors/pair_bodies``): values and
derivatives equal one pass per body (float64, 1e-12) with near, far and masked bodies, an
empty segment, a body in two segments and groups of one and of several bodies; vmap equals a
loop; the sensor's program does not grow with the number of tracked bodies."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from difftaxel.geometry import Bodies, Sphere
from difftaxel.sensors import ProximityTaxel, TrackedPoints, make_inputs
from difftaxel.sensors.pair_bodies import body_groups, pair_sums_bodies
from difftaxel.sensors.pairs import pair_sums_rigid
from difftaxel.sensors.proximity import spatial_order
from difftaxel.sensors.tracked import pose_in_frame
from difftaxel.testing import check_grad_fd, program_size

jax.config.update("jax_enable_x64", True)

SEGS = ((0, 37), (2, 0), (1, 50), (0, 13))  # an empty segment; body 0 twice
BODY = np.array([b for b, _ in SEGS])
G5 = np.linspace(-4e-3, 4e-3, 5)
PROBES = tuple(jnp.asarray(a.ravel()) for a in (*np.meshgrid(G5, G5), np.zeros((5, 5))))
RADII = jnp.asarray(np.stack([np.full(25, 2e-3), np.full(25, 2.5e-3)]))
LINK = jnp.asarray([1e-3, 0, 0, 0, 0, np.sin(0.1), np.cos(0.1)])


def case(far_body=1):
    """Body poses ``[3, 7]`` (world), twists ``[3, 6]`` and points ``[M, 3]`` (body frames,
    in a spatial order): every body near the probes but ``far_body``."""
    rng = np.random.default_rng(0)
    M = sum(c for _, c in SEGS)
    pts = rng.normal(size=(M, 3)) * 3e-3
    pts = pts[np.asarray(spatial_order(pts, SEGS, 8))]
    q = rng.normal(size=(3, 4))
    T = np.c_[rng.normal(size=(3, 3)) * 2e-3 + [0, 0, 3e-3], q / np.linalg.norm(q, axis=1)[:, None]]
    if far_body is not None:
        T[far_body, 0] += 0.5
    return jnp.asarray(T), jnp.asarray(rng.normal(size=(3, 6))), jnp.asarray(pts)


def one_pass(T, tw, pts, on, with_d):
    planes = (pts[:, 0], pts[:, 1], pts[:, 2])
    groups = body_groups(SEGS, 8)
    return pair_sums_bodies(PROBES, RADII, LINK, T[BODY], tw[BODY], planes, on, groups, with_d)


def R_link():
    from difftaxel import pose

    return pose.quat_to_matrix(LINK[3:])


def per_body(T, tw, pts, on, with_d):
    """The reference: one rigid pass per segment, folded as ProximityTaxel did per body."""
    R_l = R_link()
    z = jnp.zeros_like(RADII)
    S, Pw, Pv, start = z, [z] * 3, [z] * 3, 0
    for g, (b, c) in enumerate(SEGS):
        if c:
            R, t = pose_in_frame(LINK, T[b])
            seg = tuple(pts[start : start + c, i] for i in range(3))
            Sb, D, _ = pair_sums_rigid(PROBES, RADII, R, t, seg, on[g], 8, True)
            v, w, xb = tw[b, :3] @ R_l, tw[b, 3:] @ R_l, (T[b, :3] - LINK[:3]) @ R_l
            r = [D[i] + (PROBES[i] - xb[i])[None] * Sb for i in range(3)]
            S = S + Sb
            Pw = [Pw[i] + w[i] * Sb for i in range(3)]
            Pv[0] = Pv[0] + v[0] * Sb + w[1] * r[2] - w[2] * r[1]
            Pv[1] = Pv[1] + v[1] * Sb + w[2] * r[0] - w[0] * r[2]
            Pv[2] = Pv[2] + v[2] * Sb + w[0] * r[1] - w[1] * r[0]
        start += c
    return S, tuple(Pw), tuple(Pv) if with_d else None


ON = jnp.ones(len(SEGS), bool)
fast = jax.jit(one_pass, static_argnums=4)
ref = jax.jit(per_body, static_argnums=4)


def close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-12)


@pytest.mark.parametrize("with_d, masked", [(False, False), (True, True)])
def test_one_pass_equals_one_pass_per_body(with_d, masked):
    T, tw, pts = case()
    on = ON.at[2].set(False) if masked else ON  # the second body's only segment
    a, b = fast(T, tw, pts, on, with_d), ref(T, tw, pts, on, with_d)
    assert float(jnp.max(a[0])) > 1e-3  # the near bodies touch
    close(a, b)
    if masked:  # body 1's sums leave nothing behind: equal to the scene without it
        T_gone = T.at[2, 0].add(1.0)
        close(a, ref(T_gone, tw, pts, ON, with_d))


def test_groups_keep_each_bodys_blocks_whole():
    """Block counts 5, 7 and 2 (37, 50 and 13 points in blocks of at most 8: 8, 8 and 7): two
    groups, padded to 8 and 2 blocks; every point once, in its own segment's blocks, in
    order."""
    groups = body_groups(SEGS, 8)
    assert [(ids, C, index.shape[1] // C) for ids, C, index in groups] == [
        ((3,), 7, 2),
        ((0, 2), 8, 8),
    ]
    M = sum(c for _, c in SEGS)
    seen = []
    for ids, _, index in groups:
        for g, row in zip(ids, index, strict=True):
            start = sum(c for _, c in SEGS[:g])
            real = row[row < M]
            assert real.tolist() == list(range(start, start + SEGS[g][1]))
            seen += real.tolist()
    assert sorted(seen) == list(range(M))


def loss(f):
    return lambda T, tw, pts: sum(
        jnp.sum(jnp.sin(300.0 * x)) for x in jax.tree.leaves(f(T, tw, pts, ON, True))
    )


def test_derivatives_match_finite_differences():
    T, tw, pts = case()
    f = jax.jit(lambda x: loss(one_pass)(T.at[0, :3].set(x), tw, pts))
    g = check_grad_fd(f, T[0, :3], rtol=1e-5, jit=True)
    assert float(jnp.max(jnp.abs(g))) > 0


@pytest.mark.slow  # ~10 s of compilation: CI's slow run
def test_derivatives_equal_one_pass_per_body():
    T, tw, pts = case()
    ga = jax.jit(jax.grad(loss(one_pass), argnums=(0, 1, 2)))(T, tw, pts)
    gb = jax.jit(jax.grad(loss(per_body), argnums=(0, 1, 2)))(T, tw, pts)
    for a, b in zip(ga, gb, strict=True):
        tol = 1e-12 * (1 + float(jnp.max(jnp.abs(b))))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=tol)
    assert float(jnp.max(jnp.abs(ga[0]))) > 0


def test_vmap_over_environments_equals_a_loop():
    T, tw, pts = case()
    Ts = jnp.stack([T, T.at[:, 0].add(2e-3), T.at[:, 0].add(0.3)])  # near, shifted, all far
    batched = jax.jit(jax.vmap(one_pass, (0, None, None, None, None)), static_argnums=4)(
        Ts, tw, pts, ON, True
    )
    for e in range(3):
        one = fast(Ts[e], tw, pts, ON, True)
        close(jax.tree.map(lambda x, e=e: x[e], batched), one)


def tracking(n_bodies: int) -> tuple:
    """A ProximityTaxel tracking ``n_bodies`` bodies of 16 points, and its inputs."""
    pts = np.random.default_rng(2).normal(size=(16 * n_bodies, 3)) * 3e-3
    track = TrackedPoints(pts, segments=tuple((b, 16) for b in range(n_bodies)))
    g = np.stack(np.meshgrid(G5[:2], G5[:2]), -1).reshape(-1, 2)
    s = ProximityTaxel(probe_local_pos=np.c_[g, np.zeros(4)], track_points=track)
    P = np.tile([0.0, 0, 0, 0, 0, 0, 1], (n_bodies, 1))
    bodies = Bodies(tuple(Sphere(radius=0.01, body=b) for b in range(n_bodies)), P)
    return s, make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), bodies)


def test_the_program_does_not_grow_with_the_tracked_bodies():
    """One scan per group of bodies: 2 and 12 tracked bodies of one size make the same
    program, step and gradient (a loop per body made compile time grow from 1.3 s to 26 s
    between 1 and 64 far bodies)."""
    assert program_size(*tracking(2)) == program_size(*tracking(12))


def test_far_bodies_are_skipped_exactly():
    """A body slides away through the bound (its points' sphere against the probes' ball grown
    by the largest radius), across a batch of environments: visiting only the near bodies (a
    ``while_loop``) gives the scan over every body's sums (float64, 1e-12), in environments
    where it is skipped and where it is not."""
    from difftaxel.sensors.pair_bodies import _accumulate, _near

    T, tw, pts = case(far_body=None)
    planes = (pts[:, 0], pts[:, 1], pts[:, 2])
    groups = body_groups(SEGS, 8)
    assert any(len(ids) > 1 for ids, _, _ in groups)  # a group the visit applies to

    def run(dx, sparse):
        T2 = T.at[1, 0].add(dx)
        args = (PROBES, RADII, LINK, T2[BODY], tw[BODY], planes, ON, groups, True, None)
        ids, C, index = next(g for g in groups if 2 in g[0])  # the group holding body 1
        ix = np.asarray(ids)
        cols = tuple(jnp.concatenate([q, jnp.full((1,), 1e6)])[index] for q in planes)
        near = _near(PROBES, RADII, LINK, T2[BODY][ix], cols, index < pts.shape[0])
        return _accumulate(*args, sparse), near

    shifts = jnp.linspace(0.0, 0.04, 9)
    (fast, near), (full, _) = (jax.jit(jax.vmap(lambda d, s=s: run(d, s)))(shifts) for s in (1, 0))
    assert bool(jnp.any(near[:, -1])) and not bool(jnp.all(near[:, -1]))  # near, then skipped
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-18), fast, full)
    assert float(jnp.max(full[0])) > 0
