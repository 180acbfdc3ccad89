"""LBS skinning and the tactile data contract: closed forms, validation rules, gradients."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from difftaxel import pose as P
from difftaxel.skinning import (
    LBS,
    NUM_JOINTS,
    HandJoint,
    HandSkeletonRef,
    TactileMetadata,
    forces_to_root,
    positions_in_base,
    root_from_base,
    skin_frames,
    skin_positions,
)
from difftaxel.testing import assert_jit_matches_eager, assert_vmap_matches_loop, check_grad_fd

I7 = np.array([0.0, 0, 0, 0, 0, 0, 1])


def rot(axis, ang):
    return np.asarray(P.quat_from_axis_angle(jnp.asarray(axis, float), ang))


def two_segment_lbs():
    """WRIST (identity) and INDEX_PROXIMAL 5 cm along -z; taxels rigid on each and blended."""
    B = np.stack([I7, np.r_[0, 0, -0.05, 0, 0, 0, 1]])
    T = np.array(
        [[0.01, 0, 0.0, 0, 0, 0, 1], [0.01, 0, -0.06, 0, 0, 0, 1], [0.0, 0.01, -0.03, 0, 0, 0, 1]]
    )
    idx = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0]])
    w = np.array([[1.0, 0, 0, 0], [1.0, 0, 0, 0], [0.5, 0.5, 0, 0]])
    lbs = LBS(segment_bind_poses=B, taxel_bind_poses=T, weights=w, segment_indices=idx)
    sk = HandSkeletonRef((HandJoint.WRIST, HandJoint.INDEX_PROXIMAL))
    return lbs, sk


def test_identity_returns_bind_and_rigid_motion():
    lbs, sk = two_segment_lbs()
    meta = TactileMetadata(lbs, sk)
    assert meta.n_taxels == 3
    p = skin_positions(lbs, lbs.segment_bind_poses)
    np.testing.assert_allclose(p, lbs.taxel_bind_poses[:, :3], atol=1e-15)
    # rotate the finger segment 90 deg about x at its joint: taxel 1 moves rigidly
    q = rot([1, 0, 0], np.pi / 2)
    C = np.stack([I7, np.r_[0, 0, -0.05, q]])
    p = np.asarray(skin_positions(lbs, jnp.asarray(C)))
    np.testing.assert_allclose(p[0], [0.01, 0, 0], atol=1e-15)
    # bind offset of taxel 1 from the joint: (0.01, 0, -0.01) -> rotated about x by 90 deg
    np.testing.assert_allclose(p[1], np.array([0, 0, -0.05]) + [0.01, 0.01, 0], atol=1e-15)
    # blended (0.5, 0.5): midpoint of the two rigid results
    rig0 = np.asarray(lbs.taxel_bind_poses[2, :3])
    off = np.array([0.0, 0.01, 0.02])  # taxel 2 relative to segment 1's joint in bind
    rig1 = np.array([0, 0, -0.05]) + np.asarray(P.quat_rotate(jnp.asarray(q), jnp.asarray(off)))
    np.testing.assert_allclose(p[2], 0.5 * (rig0 + rig1), atol=1e-15)
    # frames: the rigid taxel's frame rotates with its segment; forces rotate only
    F = skin_frames(lbs, jnp.asarray(C))
    np.testing.assert_allclose(np.abs(np.asarray(F[1, 3:]) @ q), 1.0, atol=1e-12)
    f = forces_to_root(F, jnp.array([[0.0, 0, 1.0]] * 3))
    np.testing.assert_allclose(f[1], [0, -1, 0], atol=1e-12)
    np.testing.assert_allclose(f[0], [0, 0, 1], atol=1e-12)
    assert list(lbs.rigid) == [True, True, False]


def test_rebasing_uses_rotation_not_subtraction():
    lbs, _ = two_segment_lbs()
    q = rot([0, 0, 1], np.pi / 2)
    T_base_wrist = np.r_[1.0, 2.0, 0.5, q]
    # tracker reports joints in base space for the bind configuration
    T_base_joints = np.asarray(P.compose(jnp.asarray(T_base_wrist)[None], lbs.segment_bind_poses))
    T_root = root_from_base(jnp.asarray(T_base_wrist), jnp.asarray(T_base_joints))
    np.testing.assert_allclose(T_root[1, :3], [0, 0, -0.05], atol=1e-14)
    p_root = skin_positions(lbs, T_root)
    np.testing.assert_allclose(p_root, lbs.taxel_bind_poses[:, :3], atol=1e-14)
    p_base = positions_in_base(jnp.asarray(T_base_wrist), p_root)
    np.testing.assert_allclose(p_base[0], T_base_wrist[:3] + [0, 0.01, 0], atol=1e-14)
    # with the wrist rotated, subtracting positions gives the wrong joint offset
    q2 = rot([1, 0, 0], 0.7)
    Tw = np.r_[0.3, -0.1, 0.2, q2]
    Tj = np.asarray(P.compose(jnp.asarray(Tw)[None], lbs.segment_bind_poses))
    naive = Tj[1, :3] - Tw[:3]
    assert np.abs(naive - [0, 0, -0.05]).max() > 0.01
    np.testing.assert_allclose(
        root_from_base(jnp.asarray(Tw), jnp.asarray(Tj))[1, :3], [0, 0, -0.05], atol=1e-14
    )


def test_jit_vmap_and_gradients():
    lbs, _ = two_segment_lbs()
    rng = np.random.default_rng(0)
    Cs = []
    for _ in range(4):
        q = rng.standard_normal(4)
        Cs.append(np.stack([I7, np.r_[0, 0, -0.05, q / np.linalg.norm(q)]]))
    Cs = jnp.asarray(np.stack(Cs))
    assert_jit_matches_eager(lambda C: skin_frames(lbs, C), Cs[0])
    assert_vmap_matches_loop(lambda C: skin_positions(lbs, C), (Cs,))
    w = jnp.arange(1.0, 10.0).reshape(3, 3)

    def f_joint(xi):
        C = P.compose(Cs[0], P.se3_exp(xi.reshape(2, 6)))
        fr = skin_frames(lbs, C)
        return jnp.sum(fr[:, :3] * w) + jnp.sum(fr[:, 3:] * jnp.arange(1.0, 5.0)[None])

    check_grad_fd(f_joint, jnp.zeros(12), step=1e-7, rtol=1e-5, atol=1e-9, jit=True)

    def f_bind(xi):
        tb = P.compose(lbs.taxel_bind_poses, P.se3_exp(xi.reshape(3, 6)))
        return jnp.sum(skin_positions(lbs, Cs[1], tb) * w)

    check_grad_fd(f_bind, jnp.zeros(18), step=1e-7, rtol=1e-5, atol=1e-9, jit=True)

    def f_segbind(xi):
        B = P.compose(lbs.segment_bind_poses, P.se3_exp(xi.reshape(2, 6)))
        return jnp.sum(skin_positions(lbs.replace(segment_bind_poses=B), Cs[2]) * w)

    check_grad_fd(f_segbind, jnp.zeros(12), step=1e-7, rtol=1e-5, atol=1e-9, jit=True)


# ------------------------------------------------------------------------- validation


def test_skeleton_validation():
    with pytest.raises(ValueError, match="duplicate joint id 1"):
        HandSkeletonRef((1, 6, 1))
    with pytest.raises(ValueError, match="NUM_JOINTS .* is a count"):
        HandSkeletonRef((1, NUM_JOINTS))
    with pytest.raises(ValueError, match=r"expected an id in \[0, 26\)"):
        HandSkeletonRef((1, -1))
    assert HandJoint.LITTLE_TIP == 25 and len(HandJoint) == NUM_JOINTS


def lbs_kw():
    lbs, _ = two_segment_lbs()
    return dict(
        segment_bind_poses=np.array(lbs.segment_bind_poses),
        taxel_bind_poses=np.array(lbs.taxel_bind_poses),
        weights=np.array(lbs.weights),
        segment_indices=lbs.indices.copy(),
    )


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda k: k["weights"].__setitem__((0, 0), -0.1), "non-negative"),
        (lambda k: k["weights"].__setitem__((0, 1), np.nan), "finite"),
        (lambda k: k["weights"].__setitem__((2, 0), 0.5 + 2e-5), "sum to 1 within 1e-5"),
        (lambda k: k["segment_indices"].__setitem__((0, 3), 2), "zero-weight slots included"),
        (lambda k: k["taxel_bind_poses"].__setitem__((1, 6), 1.01), "unit quaternions"),
        (lambda k: k.__setitem__("weights", k["weights"][:2]), r"weights: expected shape \(3, 4\)"),
    ],
)
def test_lbs_validation(change, match):
    kw = lbs_kw()
    change(kw)
    with pytest.raises(ValueError, match=match):
        LBS(**kw)


def test_reflection_and_wrist_identity():
    kw = lbs_kw()
    M = np.tile(np.eye(4), (2, 1, 1))
    M[1, :3, 3] = [0, 0, -0.05]
    LBS(**{**kw, "segment_bind_poses": M})  # proper matrices are accepted
    M[1, 0, 0] = -1.0  # a mirror
    with pytest.raises(ValueError, match="reflection"):
        LBS(**{**kw, "segment_bind_poses": M})
    B = kw["segment_bind_poses"].copy()
    B[0, :3] = [0.01, 0, 0]
    lbs = LBS(**{**kw, "segment_bind_poses": B})
    with pytest.raises(ValueError, match="WRIST is the skeleton root"):
        TactileMetadata(lbs, HandSkeletonRef((HandJoint.WRIST, HandJoint.INDEX_PROXIMAL)))
    TactileMetadata(lbs, HandSkeletonRef((HandJoint.PALM, HandJoint.INDEX_PROXIMAL)))
    with pytest.raises(ValueError, match="segment_source: 3 joints"):
        TactileMetadata(lbs, HandSkeletonRef((0, 6, 7)))
