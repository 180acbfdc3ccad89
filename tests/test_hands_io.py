"""Default hands and glove, recordings on disk, the stream consumer."""

from __future__ import annotations

import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

from difftaxel import pose as P
from difftaxel.hands import default_glove, default_hand
from difftaxel.io import (
    StreamError,
    TactileStreamReader,
    metadata_from_dict,
    metadata_to_dict,
    read_recording,
    write_recording,
)
from difftaxel.skinning import HandJoint, skin_frames, skin_positions

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
FINGERS = {"index": 6, "middle": 11, "ring": 16, "little": 21}


@pytest.mark.parametrize("side", ["right", "left"])
def test_default_hand_axes(side):
    B = default_hand(side)
    assert B.shape == (26, 7)
    np.testing.assert_allclose(B[HandJoint.WRIST], [0, 0, 0, 0, 0, 0, 1])
    R = np.asarray(P.quat_to_matrix(jnp.asarray(B[:, 3:])))
    # proper right-handed frames: x cross y = z, det +1 (not mirrored)
    np.testing.assert_allclose(np.cross(R[:, :, 0], R[:, :, 1]), R[:, :, 2], atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(R), 1.0, atol=1e-12)
    pos = B[:, :3]
    for first in FINGERS.values():
        chain = list(range(first, first + 5))
        assert pos[chain[-1], 2] < -0.12  # fingers extend along -z (wrist +z toward the forearm)
        for j, k in zip(chain[:-1], chain[1:]):
            bone = pos[j] - pos[k]  # away from the fingertip
            assert R[j, :, 2] @ bone / np.linalg.norm(bone) > 0.99
            assert R[j, :, 1] @ [0, 1, 0] > 0.9  # +y toward the nail side = back of the hand
    thumb_tip = pos[HandJoint.THUMB_TIP]
    assert (thumb_tip[0] < -0.03) if side == "right" else (thumb_tip[0] > 0.03)
    for j in range(2, 5):
        bone = pos[j] - pos[j + 1]
        assert R[j, :, 2] @ bone / np.linalg.norm(bone) > 0.99


def test_left_is_proper_mirror_of_right():
    Rr, Rl = default_hand("right"), default_hand("left")
    np.testing.assert_allclose(Rl[:, :3], Rr[:, :3] * [-1, 1, 1], atol=1e-15)
    S = np.diag([-1.0, 1, 1])
    MR = np.asarray(P.quat_to_matrix(jnp.asarray(Rr[:, 3:])))
    ML = np.asarray(P.quat_to_matrix(jnp.asarray(Rl[:, 3:])))
    np.testing.assert_allclose(ML, S @ MR @ S, atol=1e-12)


@pytest.mark.parametrize("side", ["right", "left"])
def test_default_glove_and_data_files(side):
    meta = default_glove(side)
    lbs = meta.geometry_mapping
    assert meta.n_taxels == 96 and lbs.n_segments == 26
    assert lbs.rigid.sum() == 92  # 80 fingertip + 12 palm rigid, 4 blended
    # bind configuration reproduces the bind positions; fingertip taxels sit on the palmar side
    p = np.asarray(skin_positions(lbs, lbs.segment_bind_poses))
    np.testing.assert_allclose(p, lbs.taxel_bind_poses[:, :3], atol=1e-15)
    fr = np.asarray(skin_frames(lbs, lbs.segment_bind_poses))
    Rz = np.asarray(P.quat_rotate(jnp.asarray(fr[:, 3:]), jnp.array([0.0, 0, 1])))
    assert np.all(Rz[:80, 1] < -0.8)  # taxel +z (outward normal) points palmar (-y)
    saved = metadata_from_dict(json.loads((DATA / f"default_glove_{side}.json").read_text()))
    # data/ is up to date (it is written with JAX's default float32, hence the tolerance)
    for a, b in (("segment_bind_poses",) * 2, ("taxel_bind_poses",) * 2, ("weights",) * 2):
        np.testing.assert_allclose(getattr(saved.geometry_mapping, a), getattr(lbs, b), atol=1e-6)
    np.testing.assert_array_equal(saved.geometry_mapping.indices, lbs.indices)
    assert saved.segment_source.joints == meta.segment_source.joints


def test_recording_round_trip_and_errors(tmp_path):
    meta = default_glove("right")
    T, N = 5, meta.n_taxels
    rng = np.random.default_rng(0)
    frames = rng.standard_normal((T, N, 3)).astype(np.float32)
    jp = np.broadcast_to(np.asarray(meta.geometry_mapping.segment_bind_poses), (T, 26, 7)).copy()
    ts = np.arange(T, dtype=np.int64) * 10_000_000
    path = tmp_path / "rec.npz"
    write_recording(path, meta, frames, jp, ts)
    rec = read_recording(path)
    np.testing.assert_array_equal(rec.frames, frames)
    assert rec.frames.dtype == np.float32
    np.testing.assert_array_equal(rec.joint_poses, jp)
    np.testing.assert_array_equal(rec.timestamps_ns, ts)
    assert metadata_to_dict(rec.metadata) == metadata_to_dict(meta)
    with pytest.raises(ValueError, match=r"frames: expected shape \(T, 96, 3\)"):
        write_recording(path, meta, frames[:, :10], jp, ts)
    bad = frames.copy()
    bad[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match="frames: non-finite"):
        write_recording(path, meta, bad, jp, ts)
    with pytest.raises(ValueError, match="empty time range"):
        write_recording(path, meta, frames[:0], jp[:0], ts[:0])


def test_stream_reader_contract():
    meta = default_glove("right")
    r = TactileStreamReader()
    assert r.on_frame(np.zeros((96, 3))) is None and r.withheld == 1  # data before metadata
    r.on_metadata(metadata_to_dict(meta))
    assert r.on_frame(np.ones((96, 3))).shape == (96, 3)
    r.on_metadata(meta)  # the same metadata again (periodic republish) is fine
    with pytest.raises(StreamError, match="frame: expected shape"):
        r.on_frame(np.zeros((80, 3)))
    with pytest.raises(StreamError, match="changed within the stream"):
        r.on_metadata(default_glove("left"))
    d = metadata_to_dict(meta)
    d["geometry_mapping"]["weights"][0] = [0.5, 0.4, 0.0, 0.0]
    with pytest.raises(StreamError, match="invalid"):
        TactileStreamReader().on_metadata(d)
    with pytest.raises(StreamError, match="maximum sample size"):
        TactileStreamReader(max_taxels=80).on_metadata(meta)
    with pytest.raises(ValueError, match="geometry_mapping.type"):
        metadata_from_dict({"geometry_mapping": {"type": "X"}, "segment_source": {}})
