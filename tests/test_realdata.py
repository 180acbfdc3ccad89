"""Real public data (read from ../shared/data; skipped when absent): the WebXR skinned hand rig
as an LBS taxel skin, posed with real MRTK hand poses converted to OpenXR frames."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from difftaxel import pose as P
from difftaxel.realdata import gltf_lbs, load_gltf_skin, load_mrtk_pose
from difftaxel.skinning import HandJoint, root_from_base, skin_positions


@pytest.fixture(scope="module")
def hand_dir(shared_dir):
    d = shared_dir / "data" / "hands"
    if not (d / "webxr-generic-hand" / "right.glb").exists():
        pytest.skip("hand data absent")
    return d


@pytest.mark.parametrize("side", ["right", "left"])
def test_gltf_rig_reads_and_frames_follow_openxr(hand_dir, side):
    skin = load_gltf_skin(hand_dir / "webxr-generic-hand" / f"{side}.glb")
    assert skin.vertices.shape == (1360, 3) and len(skin.joint_names) == 25
    np.testing.assert_allclose(skin.weights.sum(1), 1.0, atol=1e-6)
    # inverse bind matrices invert the rest poses (as the manifest states, ~4e-7)
    err = np.abs(skin.inverse_bind @ skin.joint_rest - np.eye(4)).max()
    assert err < 1e-5
    meta = gltf_lbs(skin, np.arange(0, 1360, 17))
    lbs = meta.geometry_mapping
    assert meta.segment_source.joints == tuple(range(1, 26))  # OpenXR order, no PALM
    B = np.asarray(lbs.segment_bind_poses)
    # wrist +Z toward the forearm: fingertips lie along -Z
    tips = [meta.segment_source.index(j) for j in (10, 15, 20, 25)]
    assert np.all(B[tips, 2] < -0.08)
    # thumb side: -X for the right hand, +X for the left (proper frames, not mirrored)
    thumb = B[meta.segment_source.index(HandJoint.THUMB_TIP), 0]
    assert thumb < -0.02 if side == "right" else thumb > 0.02
    R = np.asarray(P.quat_to_matrix(jnp.asarray(B[:, 3:])))
    np.testing.assert_allclose(np.linalg.det(R), 1.0, atol=1e-6)
    # rest configuration returns the bind positions
    p = skin_positions(lbs, lbs.segment_bind_poses)
    np.testing.assert_allclose(p, lbs.taxel_bind_poses[:, :3], atol=1e-6)


def test_mrtk_poses_convert_and_pose_the_rig(hand_dir):
    skin = load_gltf_skin(hand_dir / "webxr-generic-hand" / "right.glb")
    verts = np.arange(1360)
    meta = gltf_lbs(skin, verts)
    lbs = meta.geometry_mapping
    for name in ("Open", "Pinch", "PinchSteadyWrist", "ThumbsUp"):
        poses = load_mrtk_pose(hand_dir / "mrtk-poses" / f"ArticulatedHandPose_{name}.json")
        R = np.asarray(P.quat_to_matrix(jnp.asarray(poses[:, 3:])))
        np.testing.assert_allclose(np.linalg.det(R), 1.0, atol=1e-6)
        wrist = poses[HandJoint.WRIST]
        # wrist +Z points from the middle knuckle toward the wrist
        v = wrist[:3] - poses[HandJoint.MIDDLE_PROXIMAL, :3]
        assert R[HandJoint.WRIST, :, 2] @ v / np.linalg.norm(v) > 0.99
        # thumb side at -X of the wrist (right hand)
        d = poses[HandJoint.INDEX_PROXIMAL, :3] - poses[HandJoint.LITTLE_PROXIMAL, :3]
        assert R[HandJoint.WRIST, :, 0] @ d / np.linalg.norm(d) < -0.9
        T_root = root_from_base(jnp.asarray(wrist), jnp.asarray(poses))
        segs = jnp.asarray(np.asarray(T_root)[list(meta.segment_source.joints)])
        p = np.asarray(skin_positions(lbs, segs))
        assert np.all(np.isfinite(p))
        # the skinned fingertip vertices land near the recorded fingertips (a different hand:
        # within 1.5 cm)
        for tip in (HandJoint.INDEX_TIP, HandJoint.MIDDLE_TIP, HandJoint.THUMB_TIP):
            k = meta.segment_source.index(tip - 1)  # the DISTAL segment carries the tip skin
            owned = np.asarray(lbs.weights)[:, 0] > 0.9
            on = owned & (lbs.indices[:, 0] == k)
            assert on.sum() > 10
            target = np.asarray(T_root)[tip, :3]
            # measured: 3-6 mm in all four poses
            assert np.min(np.linalg.norm(p[on] - target, axis=1)) < 0.015, (name, tip)
