"""Tactile metadata and recordings on disk, and the contract's stream consumer.

A recording is one NPZ file:

* ``header``: a JSON string ``{"format": "difftaxel.recording", "version": 1,
  "metadata": {...}, "units": {...}}`` with the :class:`~difftaxel.skinning.TactileMetadata`
  as plain lists (joint ids, bind poses x y z qx qy qz qw, segment indices, weights);
* ``frames``: ``[T, N, 3]`` float32 taxel forces (N, taxel axes, +z outward), metadata order;
* ``joint_poses``: ``[T, J, 7]`` current joint poses in the wrist root frame (segment order);
* ``timestamps_ns``: ``[T]`` int64 sample times (ns).

Everything round-trips losslessly (``frames`` are stored as given, float32 or float64).
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

import numpy as np

from .skinning import LBS, HandSkeletonRef, TactileMetadata

__all__ = [
    "metadata_to_dict",
    "metadata_from_dict",
    "Recording",
    "write_recording",
    "read_recording",
    "StreamError",
    "TactileStreamReader",
]

FORMAT = "difftaxel.recording"
VERSION = 1


def metadata_to_dict(meta: TactileMetadata) -> dict:
    """JSON-able dict of a :class:`TactileMetadata` (float64 values, exact round trip)."""
    lbs = meta.geometry_mapping
    return {
        "geometry_mapping": {
            "type": "LBS",
            "segment_bind_poses": np.asarray(lbs.segment_bind_poses, float).tolist(),
            "taxel_bind_poses": np.asarray(lbs.taxel_bind_poses, float).tolist(),
            "segment_indices": lbs.indices.astype(int).tolist(),
            "weights": np.asarray(lbs.weights, float).tolist(),
        },
        "segment_source": {"type": "HandSkeletonRef", "joints": list(meta.segment_source.joints)},
    }


def metadata_from_dict(d: dict) -> TactileMetadata:
    """Inverse of :func:`metadata_to_dict`; validates (errors name the field)."""
    try:
        g, s = d["geometry_mapping"], d["segment_source"]
    except (KeyError, TypeError) as e:
        raise ValueError(
            f"metadata: expected keys 'geometry_mapping' and 'segment_source' ({e})"
        ) from None
    if g.get("type") != "LBS":
        raise ValueError(f"metadata.geometry_mapping.type: expected 'LBS', got {g.get('type')!r}")
    if s.get("type") != "HandSkeletonRef":
        raise ValueError(
            f"metadata.segment_source.type: expected 'HandSkeletonRef', got {s.get('type')!r}"
        )
    lbs = LBS(
        segment_bind_poses=np.asarray(g["segment_bind_poses"], float),
        taxel_bind_poses=np.asarray(g["taxel_bind_poses"], float),
        weights=np.asarray(g["weights"], float),
        segment_indices=np.asarray(g["segment_indices"], dtype=np.int32),
    )
    return TactileMetadata(lbs, HandSkeletonRef(tuple(s["joints"])))


class Recording(NamedTuple):
    """A tactile recording: metadata, ``frames [T, N, 3]``, ``joint_poses [T, J, 7]``,
    ``timestamps_ns [T]``, and optional scene data (``root_poses [T, 7]``, ``objects``,
    ``object_poses [T, B, 7]``, ``object_twists [T, B, 6]``, ``sensor`` options)."""

    metadata: TactileMetadata
    frames: np.ndarray
    joint_poses: np.ndarray
    timestamps_ns: np.ndarray
    root_poses: np.ndarray | None = None
    objects: list | None = None
    object_poses: np.ndarray | None = None
    object_twists: np.ndarray | None = None
    sensor: dict | None = None


def _check_series(meta, frames, joint_poses, timestamps_ns):
    N, J = meta.n_taxels, meta.geometry_mapping.n_segments
    f = np.asarray(frames)
    if f.ndim != 3 or f.shape[1:] != (N, 3):
        raise ValueError(f"frames: expected shape (T, {N}, 3) (N from the metadata), got {f.shape}")
    T = f.shape[0]
    if T == 0:
        raise ValueError("frames: expected at least one frame (empty time range)")
    jp = np.asarray(joint_poses)
    if jp.shape != (T, J, 7):
        raise ValueError(f"joint_poses: expected shape ({T}, {J}, 7), got {jp.shape}")
    ts = np.asarray(timestamps_ns)
    if ts.shape != (T,) or not np.issubdtype(ts.dtype, np.integer):
        raise ValueError(
            f"timestamps_ns: expected int64 of shape ({T},), got {ts.shape} {ts.dtype}"
        )
    if np.any(np.diff(ts) < 0):
        raise ValueError("timestamps_ns: expected non-decreasing times")
    if not np.all(np.isfinite(f)):
        raise ValueError("frames: non-finite readings")
    if not np.all(np.isfinite(jp)):
        raise ValueError("joint_poses: non-finite values")
    return f, jp, ts.astype(np.int64)


def write_recording(
    path,
    metadata: TactileMetadata,
    frames,
    joint_poses,
    timestamps_ns,
    *,
    root_poses=None,
    objects=None,
    object_poses=None,
    object_twists=None,
    sensor: dict | None = None,
) -> None:
    """Write a recording (see the module docstring); validates shapes against the metadata.

    Optional scene data for calibration: ``root_poses [T, 7]`` (wrist root in the world),
    ``objects`` (a list of ``{"kind": "sphere", "radius": r}`` / ``{"kind": "box", "size":
    [x, y, z]}`` / ``{"kind": "plane"}``, one body each), ``object_poses [T, B, 7]`` and
    ``object_twists [T, B, 6]`` (world), and ``sensor`` (KinematicTaxel options, e.g.
    ``{"probe_radius": 0.002, "normal_stiffness": 500.0}``).
    """
    f, jp, ts = _check_series(metadata, frames, joint_poses, timestamps_ns)
    T = f.shape[0]
    header = {
        "format": FORMAT,
        "version": VERSION,
        "metadata": metadata_to_dict(metadata),
        "units": {
            "frames": "N, taxel axes",
            "joint_poses": "m + quaternion xyzw, wrist root",
            "timestamps_ns": "ns",
            "root_poses": "m + quaternion xyzw, world",
            "object_poses": "m + quaternion xyzw, world",
            "object_twists": "m/s then rad/s, world",
        },
        "objects": list(objects or []),
        "sensor": dict(sensor or {}),
    }
    extra = {}
    if root_poses is not None:
        rp = np.asarray(root_poses, float)
        if rp.shape != (T, 7):
            raise ValueError(f"root_poses: expected shape ({T}, 7), got {rp.shape}")
        extra["root_poses"] = rp
    if objects:
        op = np.asarray(object_poses, float)
        if op.shape != (T, len(objects), 7):
            raise ValueError(
                f"object_poses: expected shape ({T}, {len(objects)}, 7), got {op.shape}"
            )
        extra["object_poses"] = op
        tw = (
            np.zeros((T, len(objects), 6))
            if object_twists is None
            else np.asarray(object_twists, float)
        )
        if tw.shape != (T, len(objects), 6):
            raise ValueError(
                f"object_twists: expected shape ({T}, {len(objects)}, 6), got {tw.shape}"
            )
        extra["object_twists"] = tw
    with open(os.fspath(path), "wb") as fh:
        np.savez(
            fh,
            header=np.asarray(json.dumps(header)),
            frames=f,
            joint_poses=jp,
            timestamps_ns=ts,
            **extra,
        )


def read_recording(path) -> Recording:
    """Read and validate a recording written by :func:`write_recording`."""
    with np.load(os.fspath(path), allow_pickle=False) as z:
        missing = {"header", "frames", "joint_poses", "timestamps_ns"} - set(z.files)
        if missing:
            raise ValueError(f"path: not a difftaxel recording (missing {sorted(missing)})")
        header = json.loads(str(z["header"]))
        if header.get("format") != FORMAT:
            raise ValueError(f"path: header format {header.get('format')!r}, expected {FORMAT!r}")
        meta = metadata_from_dict(header["metadata"])
        f, jp, ts = _check_series(meta, z["frames"], z["joint_poses"], z["timestamps_ns"])
        get = lambda k: np.asarray(z[k]) if k in z.files else None  # noqa: E731
        return Recording(
            meta,
            f,
            jp,
            ts,
            get("root_poses"),
            header.get("objects") or None,
            get("object_poses"),
            get("object_twists"),
            header.get("sensor") or None,
        )


class StreamError(ValueError):
    """A tactile stream broke the contract (invalid/changed metadata, wrong frame length)."""


class TactileStreamReader:
    """The contract's consumer: adopts the first valid metadata, withholds force data that
    arrives before it, and errors on a different or invalid metadata or a frame whose length
    differs from the metadata's taxel count.

    ``on_metadata(meta_or_dict)`` and ``on_frame(frame [N, 3], timestamp_ns)`` are called as
    messages arrive; ``on_frame`` returns the frame as a float array once metadata is adopted
    and ``None`` before (``withheld`` counts those).
    """

    def __init__(self, max_taxels: int | None = None):
        self.metadata: TactileMetadata | None = None
        self._meta_dict: dict | None = None
        self.max_taxels = max_taxels
        self.withheld = 0

    def on_metadata(self, meta) -> TactileMetadata:
        try:
            m = meta if isinstance(meta, TactileMetadata) else metadata_from_dict(meta)
        except (ValueError, TypeError) as e:
            raise StreamError(f"metadata: invalid ({e})") from e
        d = metadata_to_dict(m)
        if self._meta_dict is None:
            if self.max_taxels is not None and m.n_taxels > self.max_taxels:
                raise StreamError(
                    f"metadata: {m.n_taxels} taxels exceed the consumer's maximum sample size "
                    f"{self.max_taxels}"
                )
            self.metadata, self._meta_dict = m, d
        elif d != self._meta_dict:
            raise StreamError("metadata: changed within the stream (it must stay static)")
        return self.metadata

    def on_frame(self, frame, timestamp_ns: int | None = None):
        if self.metadata is None:
            self.withheld += 1
            return None
        f = np.asarray(frame, dtype=float)
        N = self.metadata.n_taxels
        if f.shape != (N, 3):
            raise StreamError(
                f"frame: expected shape ({N}, 3) (metadata taxel count), got {f.shape}"
            )
        return f
