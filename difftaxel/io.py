"""Tactile metadata and recordings on disk, and the contract's stream consumer.

A recording is one NPZ file:

* ``header``: a JSON string ``{"format": "difftaxel.recording", "version": 1,
  "metadata": {...}, "units": {...}}`` with the :class:`~difftaxel.skinning.TactileMetadata`
  as plain lists (joint ids, bind poses x y z qx qy qz qw, segment indices, weights);
* ``frames``: ``[T, N, 3]`` float32 taxel forces (N, taxel axes, +z outward), metadata order;
* ``joint_poses``: ``[T, J, 7]`` current joint poses in the wrist root frame (segment order);
* ``timestamps_ns``: ``[T]`` int64 sample times (ns).

A **rigid-link recording** (a skin on one link, :func:`write_link_recording`) has, instead
of ``metadata`` and ``joint_poses``, a header ``"layout"`` (``{"type": "RigidLink",
"positions", "normals", "tangents"}``, m and unit vectors in the link frame; ``tangents``
optional) and ``"channels"`` (``"xyz"``, ``"normal"`` or a bool mask ``[N, 3]``), ``frames``
``[T, N, 3]`` or ``[T, N]`` (normal readings) and optional ``link_poses [T, 7]``
and ``link_twists [T, 6]`` (world).
:func:`recording_kind` tells the two apart.

A successful write means a readable file: writers and readers run the same checks
(:func:`_hand_arrays`, :func:`_link_arrays`, built on :mod:`difftaxel._recording`). The rules:

* **Quaternions** (joint, root, link and object poses) are unit within ``QUAT_TOLERANCE``
  (1e-3 in norm, what a CSV export rounded to 4 decimals gives): such values are normalised on
  write (and on read, for files other tools wrote); a quaternion further off is refused.
* **A dropped sample** (NaN or inf in a recorded channel, in a pose or a twist) is refused, with
  the frame and taxel named: drop the frame, or, on a link recording, leave a taxel's channel
  out of ``channels`` (entries outside the channels may be NaN; they are never read).
* **Sensor options** (the KinematicTaxel force model the fit uses: ``SENSOR_OPTIONS``) are
  stored complete: a writer fills every option it was not given with KinematicTaxel's default
  and stores it, so the file says what a fit will use; a file without them reads with
  ``sensor=None``, and ``difftaxel calibrate`` refuses it.

``frames`` are stored as given (float32 or float64); poses are normalised as above.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from ._recording import (
    FORMAT,
    QUAT_TOLERANCE,
    SENSOR_OPTIONS,
    VERSION,
    _check_objects,
    _finite,
    _first_bad,
    _get,
    _header,
    _load,
    _optional_series,
    _save,
    _scene_arrays,
    _sensor_options,
    _timestamps,
    _unit_poses,
)
from .skinning import LBS, HandSkeletonRef, TactileMetadata

__all__ = [
    "QUAT_TOLERANCE",
    "SENSOR_OPTIONS",
    "metadata_to_dict",
    "metadata_from_dict",
    "Recording",
    "write_recording",
    "read_recording",
    "recording_kind",
    "LinkRecording",
    "layout_to_dict",
    "layout_from_dict",
    "write_link_recording",
    "read_link_recording",
    "StreamError",
    "TactileStreamReader",
]


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
    try:
        idx = np.asarray(g["segment_indices"])
        if idx.dtype.kind not in "iu":
            f = np.asarray(idx, float)
            if not np.all(np.isfinite(f)) or np.any(f != np.round(f)):
                raise ValueError(
                    "metadata.geometry_mapping.segment_indices: expected integer indices, got "
                    f"{f[(f != np.round(f)) | ~np.isfinite(f)][:4].tolist()}"
                )
            idx = f.astype(np.int64)
        lbs = LBS(
            segment_bind_poses=np.asarray(g["segment_bind_poses"], float),
            taxel_bind_poses=np.asarray(g["taxel_bind_poses"], float),
            weights=np.asarray(g["weights"], float),
            segment_indices=idx.astype(np.int32),
        )
        return TactileMetadata(lbs, HandSkeletonRef(tuple(s["joints"])))
    except KeyError as e:
        raise ValueError(f"metadata: missing key {e}") from None


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


def _hand_arrays(meta: TactileMetadata, header: dict, arrays: dict) -> dict:
    """Every array of a hand recording checked (writer and reader alike); quaternions
    normalised. Errors name the entry."""
    N, J = meta.n_taxels, meta.geometry_mapping.n_segments
    f = np.asarray(arrays.get("frames"))
    if f.ndim != 3 or f.shape[1:] != (N, 3):
        raise ValueError(f"frames: expected shape (T, {N}, 3) (N from the metadata), got {f.shape}")
    T = f.shape[0]
    if T == 0:
        raise ValueError("frames: expected at least one frame (empty time range)")
    out = {"frames": _finite(f, "frames", "reading")}
    jp = arrays.get("joint_poses")
    if np.shape(jp) != (T, J, 7):
        raise ValueError(f"joint_poses: expected shape ({T}, {J}, 7), got {np.shape(jp)}")
    out["joint_poses"] = _unit_poses(jp, "joint_poses")
    out["timestamps_ns"] = _timestamps(arrays.get("timestamps_ns"), T)
    out.update(_optional_series(arrays, T, "root_poses", 7, poses=True))
    out.update(_scene_arrays(header, arrays, T))
    return out


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
    """Write a recording (see the module docstring), checked as :func:`read_recording` checks
    it, so that a file written is a file read; atomic (an existing file is replaced whole or
    kept).

    Optional scene data for calibration: ``root_poses [T, 7]`` (wrist root in the world),
    ``objects`` (a list of ``{"kind": "sphere", "radius": r}`` / ``{"kind": "box", "size":
    [x, y, z]}`` / ``{"kind": "plane"}``, one body each; m), ``object_poses [T, B, 7]`` and
    ``object_twists [T, B, 6]`` (world; zeros if None), and ``sensor`` (KinematicTaxel
    options, ``SENSOR_OPTIONS``; those not given are stored with their defaults).
    Quaternions within ``QUAT_TOLERANCE`` of unit norm are stored normalised. Raises
    ``ValueError`` naming the argument (and the frame / taxel of a non-finite reading).
    """
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
        "objects": _check_objects(list(objects or [])),
        "sensor": _sensor_options(sensor, fill=True),
    }
    given = dict(
        frames=frames,
        joint_poses=joint_poses,
        timestamps_ns=timestamps_ns,
        root_poses=root_poses,
        object_poses=object_poses,
        object_twists=object_twists,
    )
    arrays = _hand_arrays(metadata, header, given)
    _save(path, header, arrays)


def recording_kind(path) -> str:
    """``"hand"`` (:func:`read_recording`) or ``"link"`` (:func:`read_link_recording`)."""
    p = os.fspath(path)
    with _load(p, "a difftaxel recording") as z:
        header = _header(z, p, {"frames", "timestamps_ns"})
    return "link" if "layout" in header and "metadata" not in header else "hand"


def read_recording(path) -> Recording:
    """Read and validate a recording written by :func:`write_recording`.

    Every problem raises a ``ValueError`` that starts with the file's name: a missing,
    truncated or corrupted file, a missing entry, another format or version, shapes that do not
    match the metadata, non-unit quaternions, objects without poses, unknown object kinds.
    """
    p = os.fspath(path)
    with _load(p, "a difftaxel recording") as z:
        header = _header(z, p, {"frames", "timestamps_ns"})
        if "layout" in header and "metadata" not in header:
            raise ValueError(f"{p}: a rigid-link recording; read it with read_link_recording")
        if "joint_poses" not in z.files:
            raise ValueError(f"{p}: not a difftaxel recording (missing ['joint_poses'])")
        try:
            meta = metadata_from_dict(header.get("metadata"))
            arrays = _hand_arrays(
                meta, header, {k: _get(z, p, k) for k in z.files if k != "header"}
            )
            sensor = _sensor_options(header.get("sensor"), fill=False)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{p}: {e}") from None
        return Recording(
            meta,
            arrays["frames"],
            arrays["joint_poses"],
            arrays["timestamps_ns"],
            arrays.get("root_poses"),
            header.get("objects") or None,
            arrays.get("object_poses"),
            arrays.get("object_twists"),
            sensor,
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


# ----------------------------------------------------------------------------- rigid links


class LinkRecording(NamedTuple):
    """A recording of a taxel skin on one rigid link: ``layout``
    (:class:`~difftaxel.skin.LinkLayout`, link frame), ``channels`` (``"xyz"``, ``"normal"`` or
    a bool mask ``[N, 3]``), ``frames [T, N, 3]`` (taxel axes; NaN outside the channels) or
    ``[T, N]`` (normal readings), ``timestamps_ns [T]``, and optional ``link_poses [T, 7]``
    (world; identity if absent), ``objects``, ``object_poses [T, B, 7]``, ``object_twists
    [T, B, 6]``, ``sensor`` options, ``link_twists [T, 6]`` (world, linear then angular; the
    link is static if absent)."""

    layout: object
    channels: object
    frames: np.ndarray
    timestamps_ns: np.ndarray
    link_poses: np.ndarray | None = None
    objects: list | None = None
    object_poses: np.ndarray | None = None
    object_twists: np.ndarray | None = None
    sensor: dict | None = None
    link_twists: np.ndarray | None = None


def layout_to_dict(layout) -> dict:
    """JSON-able dict of a :class:`~difftaxel.skin.LinkLayout` (m, unit vectors, link frame)."""
    return {
        "type": "RigidLink",
        "positions": np.asarray(layout.positions, float).tolist(),
        "normals": np.asarray(layout.normals, float).tolist(),
        "tangents": np.asarray(layout.tangents, float).tolist(),
    }


def layout_from_dict(d) -> object:
    """Inverse of :func:`layout_to_dict`; ``tangents`` may be absent (the layout's rule)."""
    from .skin import LinkLayout

    if not isinstance(d, dict) or d.get("type") != "RigidLink":
        got = d.get("type") if isinstance(d, dict) else d
        raise ValueError(f"layout.type: expected 'RigidLink', got {got!r}")
    try:
        return LinkLayout.make(d["positions"], d["normals"], d.get("tangents"))
    except KeyError as e:
        raise ValueError(f"layout: missing key {e}") from None
    except ValueError as e:
        raise ValueError(f"layout.{e}") from None


def _channels_json(channels, N):
    from .skin import channel_mask

    m = channel_mask(channels, N)
    return channels if isinstance(channels, str) else m.tolist()


def _link_arrays(layout, channels, header: dict, arrays: dict) -> dict:
    """Every array of a rigid-link recording checked (writer and reader alike): ``[T, N]``
    frames only with the normal channel, finite readings in the recorded channels, quaternions
    normalised. Errors name the entry."""
    from .skin import channel_mask

    N = layout.n_taxels
    mask = channel_mask(channels, N)
    f = np.asarray(arrays.get("frames"))
    if f.ndim not in (2, 3) or f.shape[1] != N or (f.ndim == 3 and f.shape[2] != 3):
        raise ValueError(
            f"frames: expected (T, {N}, 3) or (T, {N}) (N from the layout), got {f.shape}"
        )
    T = f.shape[0]
    if T == 0:
        raise ValueError("frames: expected at least one frame (empty time range)")
    if f.dtype.kind not in "fiu":
        raise ValueError(f"frames: expected numbers, got dtype {f.dtype}")
    if f.ndim == 2 and mask[:, :2].any():
        raise ValueError("frames: [T, N] readings are normal only; channels must be 'normal'")
    sel = (
        np.broadcast_to(mask[None, :, 2], f.shape)
        if f.ndim == 2
        else np.broadcast_to(mask, f.shape)
    )
    bad = sel & ~np.isfinite(f)
    if bad.any():
        raise ValueError(
            f"frames: non-finite reading at (frame, taxel{', axis' if f.ndim == 3 else ''}) "
            f"{_first_bad(bad)} in a recorded channel (a dropped sample: drop the frame, or "
            "leave that taxel's channel out of channels)"
        )
    out = {"frames": f, "timestamps_ns": _timestamps(arrays.get("timestamps_ns"), T)}
    out.update(_optional_series(arrays, T, "link_poses", 7, poses=True))
    out.update(_optional_series(arrays, T, "link_twists", 6, poses=False))
    out.update(_scene_arrays(header, arrays, T))
    return out


def write_link_recording(
    path,
    layout,
    frames,
    timestamps_ns,
    *,
    channels="xyz",
    link_poses=None,
    link_twists=None,
    objects=None,
    object_poses=None,
    object_twists=None,
    sensor: dict | None = None,
) -> None:
    """Write a rigid-link recording (:class:`LinkRecording`) as an NPZ with a JSON ``header``
    (``"layout"``, ``"channels"``, ``"objects"``, ``"sensor"``) and arrays ``frames``,
    ``timestamps_ns``, ``link_poses [T, 7]`` / ``link_twists [T, 6]`` (world; linear then
    angular velocity, m/s and rad/s: a moving link), ``object_poses``, ``object_twists``.

    Checked as :func:`read_link_recording` checks it (see the module docstring for the rules:
    quaternions, dropped samples, sensor options), so that a file written is a file read;
    atomic. Raises ``ValueError`` naming the argument.
    """
    N = layout.n_taxels
    header = {
        "format": FORMAT,
        "version": VERSION,
        "layout": layout_to_dict(layout),
        "channels": _channels_json(channels, N),
        "units": {
            "frames": "N (or the skin's pressure units), taxel axes",
            "layout": "m, link frame",
            "link_poses": "m + quaternion xyzw, world",
            "link_twists": "m/s then rad/s, world",
            "object_poses": "m + quaternion xyzw, world",
            "object_twists": "m/s then rad/s, world",
        },
        "objects": _check_objects(list(objects or [])),
        "sensor": _sensor_options(sensor, fill=True),
    }
    given = dict(
        frames=frames,
        timestamps_ns=timestamps_ns,
        link_poses=link_poses,
        link_twists=link_twists,
        object_poses=object_poses,
        object_twists=object_twists,
    )
    arrays = _link_arrays(layout, channels, header, given)
    _save(path, header, arrays)


def read_link_recording(path) -> LinkRecording:
    """Read and validate :func:`write_link_recording`'s file; errors start with the file name."""
    from .skin import channel_mask

    p = os.fspath(path)
    with _load(p, "a difftaxel recording") as z:
        header = _header(z, p, {"frames", "timestamps_ns"})
        if "layout" not in header:
            raise ValueError(f"{p}: a hand recording (no 'layout'); read it with read_recording")
        try:
            layout = layout_from_dict(header["layout"])
            ch = header.get("channels", "xyz")
            ch = ch if isinstance(ch, str) else np.asarray(ch)
            mask = channel_mask(ch, layout.n_taxels)
            arrays = _link_arrays(
                layout, ch, header, {k: _get(z, p, k) for k in z.files if k != "header"}
            )
            sensor = _sensor_options(header.get("sensor"), fill=False)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{p}: {e}") from None
        return LinkRecording(
            layout,
            ch if isinstance(ch, str) else mask,
            arrays["frames"],
            arrays["timestamps_ns"],
            arrays.get("link_poses"),
            header.get("objects") or None,
            arrays.get("object_poses"),
            arrays.get("object_twists"),
            sensor,
            arrays.get("link_twists"),
        )
