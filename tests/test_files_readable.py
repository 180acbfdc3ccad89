"""A successful write means a readable file: recordings are checked on write as on read
(quaternions normalised within a stated tolerance or refused, dropped samples refused with the
frame named, sensor options stored complete), and writes name the path they could not write."""

from __future__ import annotations

import json

import numpy as np
import pytest

from difftaxel.io import (
    QUAT_TOLERANCE,
    SENSOR_OPTIONS,
    read_link_recording,
    read_recording,
    write_link_recording,
    write_recording,
)
from difftaxel.skin import LinkLayout
from difftaxel.skinning import LBS, HandSkeletonRef, TactileMetadata

T, N = 5, 3


def _meta():
    rng = np.random.default_rng(0)
    tax = np.concatenate([rng.normal(0, 0.01, (N, 3)), np.tile([0, 0, 0, 1.0], (N, 1))], 1)
    lbs = LBS(
        segment_bind_poses=np.tile([0.0, 0, 0, 0, 0, 0, 1], (2, 1)),
        taxel_bind_poses=tax,
        weights=np.tile([1.0, 0, 0, 0], (N, 1)),
        segment_indices=np.zeros((N, 4), np.int32),
    )
    return TactileMetadata(lbs, HandSkeletonRef((1, 2)))


def _rounded_pose(rng, shape):
    """Poses whose quaternions are rounded to 4 decimals, as from a CSV export."""
    q = rng.normal(size=shape + (4,))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    return np.concatenate([rng.normal(0, 0.01, shape + (3,)), np.round(q, 4)], -1)


def _hand_kw(rng, **over):
    kw = dict(
        root_poses=_rounded_pose(rng, (T,)),
        objects=[{"kind": "sphere", "radius": 0.01}],
        object_poses=_rounded_pose(rng, (T, 1)),
        object_twists=rng.normal(size=(T, 1, 6)),
        sensor={"probe_radius": 0.002},
    )
    kw.update(over)
    return kw


def _write_hand(path, rng=None, frames=None, joint_poses=None, **over):
    rng = rng or np.random.default_rng(1)
    write_recording(
        path,
        _meta(),
        rng.normal(size=(T, N, 3)) if frames is None else frames,
        _rounded_pose(rng, (T, 2)) if joint_poses is None else joint_poses,
        np.arange(T, dtype=np.int64) * 10_000_000,
        **_hand_kw(rng, **over),
    )


def _layout():
    return LinkLayout.make(np.eye(3) * 0.01, np.tile([0.0, 0, 1], (3, 1)))


def _write_link(path, frames=None, channels="xyz", **kw):
    rng = np.random.default_rng(2)
    write_link_recording(
        path,
        _layout(),
        rng.normal(size=(T, N, 3)) if frames is None else frames,
        np.arange(T, dtype=np.int64) * 10_000_000,
        channels=channels,
        **kw,
    )


def test_rounded_quaternions_are_normalised_on_write_and_read_back(tmp_path):
    rng = np.random.default_rng(3)
    jp = _rounded_pose(rng, (T, 2))
    norms = np.linalg.norm(jp[..., 3:], axis=-1)
    assert np.max(np.abs(norms - 1)) > 1e-5  # what the old reader refused
    assert np.max(np.abs(norms - 1)) < QUAT_TOLERANCE
    p = tmp_path / "rec.npz"
    _write_hand(p, rng, joint_poses=jp)
    rec = read_recording(p)
    for a in (rec.joint_poses, rec.root_poses, rec.object_poses):
        np.testing.assert_allclose(np.linalg.norm(a[..., 3:], axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(rec.joint_poses[..., 3:], jp[..., 3:] / norms[..., None])
    np.testing.assert_array_equal(rec.joint_poses[..., :3], jp[..., :3])  # positions as given
    link = tmp_path / "link.npz"
    _write_link(link, link_poses=_rounded_pose(rng, (T,)))
    np.testing.assert_allclose(
        np.linalg.norm(read_link_recording(link).link_poses[..., 3:], axis=-1), 1.0, atol=1e-12
    )


@pytest.mark.parametrize("entry", ["joint_poses", "root_poses", "object_poses"])
def test_hand_writer_refuses_quaternions_beyond_the_tolerance(tmp_path, entry):
    rng = np.random.default_rng(4)
    p = tmp_path / "rec.npz"
    jp = _rounded_pose(rng, (T, 2))
    over = {"root_poses": _rounded_pose(rng, (T,)), "object_poses": _rounded_pose(rng, (T, 1))}
    bad = {"joint_poses": jp, **over}[entry].copy()
    bad[2, ..., 3:] *= 1.05
    kw = {entry: bad} if entry != "joint_poses" else {}
    with pytest.raises(ValueError, match=rf"{entry}: expected unit quaternions.*index \(?2"):
        _write_hand(p, rng, joint_poses=bad if entry == "joint_poses" else jp, **kw)
    assert not p.exists()


@pytest.mark.parametrize(
    "entry, what",
    [("frames", "frame"), ("object_poses", "pose"), ("object_twists", "twist")],
)
def test_dropped_samples_are_refused_on_write_naming_the_frame(tmp_path, entry, what):
    rng = np.random.default_rng(5)
    p = tmp_path / "rec.npz"
    p.write_bytes(b"old")
    arrays = {
        "frames": rng.normal(size=(T, N, 3)),
        "object_poses": _rounded_pose(rng, (T, 1)),
        "object_twists": rng.normal(size=(T, 1, 6)),
    }
    arrays[entry][3, 0, 1] = np.nan if what != "twist" else np.inf
    frames = arrays.pop("frames")
    with pytest.raises(ValueError, match=rf"{entry}: non-finite .*\(3, 0, 1\)"):
        _write_hand(p, rng, frames=frames, **arrays)
    assert p.read_bytes() == b"old"


def test_link_writer_refuses_what_its_reader_refuses(tmp_path):
    p = tmp_path / "link.npz"
    f = np.random.default_rng(6).normal(size=(T, N, 3))
    f[1, 2, 2] = np.nan
    with pytest.raises(ValueError, match=r"frames: non-finite reading .*\(1, 2, 2\)"):
        _write_link(p, f)
    # a NaN outside the recorded channels is what an unrecorded channel holds
    mask = np.ones((N, 3), bool)
    mask[2, 2] = False
    _write_link(p, f, channels=mask)
    assert np.isnan(read_link_recording(p).frames[1, 2, 2])
    with pytest.raises(ValueError, match=r"channels must be 'normal'"):
        _write_link(tmp_path / "xyz.npz", f[..., 2] * 0, channels="xyz")
    with pytest.raises(ValueError, match=r"link_poses: expected unit quaternions"):
        _write_link(tmp_path / "q.npz", link_poses=np.tile([0.0, 0, 0, 0, 0, 0, 1.1], (T, 1)))
    assert sorted(x.name for x in tmp_path.iterdir()) == ["link.npz"]


def test_link_twists_round_trip(tmp_path):
    p = tmp_path / "link.npz"
    tw = np.random.default_rng(7).normal(size=(T, 6))
    _write_link(p, link_twists=tw)
    np.testing.assert_array_equal(read_link_recording(p).link_twists, tw)
    assert read_link_recording(tmp_path / "link.npz").link_poses is None
    _write_link(tmp_path / "static.npz")
    assert read_link_recording(tmp_path / "static.npz").link_twists is None
    with pytest.raises(ValueError, match=r"link_twists: expected shape \(5, 6\)"):
        _write_link(tmp_path / "bad.npz", link_twists=tw[:, :3])


def test_sensor_options_are_stored_complete_or_refused(tmp_path):
    p = tmp_path / "rec.npz"
    _write_hand(p, sensor=None)
    rec = read_recording(p)
    assert set(rec.sensor) == set(SENSOR_OPTIONS)  # the defaults the fit will use, written
    for bad, match in (
        ({"probe_radius": "0.002"}, r"sensor\.probe_radius: expected a number"),
        ({"probe_radius": np.nan}, r"sensor\.probe_radius: expected a finite number"),
        ({"probe_radius": -1.0}, r"probe_radius"),
        ({"stiffness": 1.0}, r"sensor: unknown option"),
    ):
        with pytest.raises(ValueError, match=match):
            _write_hand(tmp_path / "bad.npz", sensor=bad)
    # a file another tool wrote without them reads with sensor=None (calibrate refuses it)
    z = dict(np.load(p))
    h = json.loads(str(z["header"]))
    np.savez(
        tmp_path / "nosensor.npz", **{**z, "header": np.asarray(json.dumps({**h, "sensor": {}}))}
    )
    assert read_recording(tmp_path / "nosensor.npz").sensor is None
    h["sensor"] = {**h["sensor"], "probe_radius": "2 mm"}
    np.savez(tmp_path / "strsensor.npz", **{**z, "header": np.asarray(json.dumps(h))})
    with pytest.raises(ValueError, match=r"strsensor.npz: sensor\.probe_radius"):
        read_recording(tmp_path / "strsensor.npz")


@pytest.mark.parametrize(
    "objects, match",
    [
        ([{"kind": "sphere", "radius": "0.01"}], r"objects\[0\]\.radius: expected a number"),
        ([{"kind": "sphere", "radius": -0.01}], r"objects\[0\]\.radius: expected a finite"),
        ([{"kind": "box", "size": [0.1, 0.1]}], r"objects\[0\]\.size: expected 3 numbers"),
        ([{"kind": "plane", "normal": [0, 0, np.nan]}], r"objects\[0\]\.normal"),
    ],
)
def test_object_fields_are_checked_on_write(tmp_path, objects, match):
    with pytest.raises(ValueError, match=match):
        _write_hand(tmp_path / "rec.npz", objects=objects)


def test_writes_name_the_path_they_cannot_write(tmp_path):
    with pytest.raises(ValueError, match=r"path .*: is a folder"):
        _write_link(tmp_path)
    missing = tmp_path / "nodir" / "x.npz"
    with pytest.raises(ValueError, match=r"path .*nodir.*does not exist"):
        _write_link(missing)
    with pytest.raises(ValueError, match=r"path .*: is a folder"):
        _write_hand(tmp_path)
