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
``[T, N, 3]`` or ``[T, N]`` (normal readings) and optional ``link_poses [T, 7]`` (world).
:func:`recording_kind` tells the two apart.

Everything round-trips losslessly (``frames`` are stored as given, float32 or float64).
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import NamedTuple

import numpy as np

from ._files import atomic_write
from .skinning import LBS, HandSkeletonRef, TactileMetadata

__all__ = [
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


def _object_arrays(objects, object_poses, object_twists, T) -> dict:
    if not objects:
        return {}
    _check_objects(list(objects))
    op = np.asarray(object_poses, float)
    if op.shape != (T, len(objects), 7):
        raise ValueError(f"object_poses: expected shape ({T}, {len(objects)}, 7), got {op.shape}")
    tw = (
        np.zeros((T, len(objects), 6))
        if object_twists is None
        else np.asarray(object_twists, float)
    )
    if tw.shape != (T, len(objects), 6):
        raise ValueError(f"object_twists: expected shape ({T}, {len(objects)}, 6), got {tw.shape}")
    return {"object_poses": op, "object_twists": tw}


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
    extra.update(_object_arrays(objects, object_poses, object_twists, T))
    try:  # serialised before the file is touched: a bad option cannot cost the old file
        text = json.dumps(header, default=_json_default)
    except TypeError as e:
        raise ValueError(f"sensor / objects: not JSON-serialisable ({e})") from None
    arrays = dict(header=np.asarray(text), frames=f, joint_poses=jp, timestamps_ns=ts, **extra)
    atomic_write(path, lambda fh: np.savez(fh, **arrays))


def _json_default(o):
    """numpy scalars and arrays as plain JSON numbers and lists."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} {o!r} is not JSON-serialisable")


def _check_quats(a: np.ndarray, name: str) -> None:
    n = np.linalg.norm(a[..., 3:], axis=-1)
    if not np.all(np.abs(n - 1.0) <= 1e-5):
        raise ValueError(
            f"{name}: expected unit quaternions (x, y, z, w), got norms off by up to "
            f"{float(np.max(np.abs(n - 1.0))):.3g}"
        )


_OBJECT_KINDS = {"sphere": ("radius",), "box": ("size",), "plane": ()}


def _check_objects(objects) -> list:
    if not isinstance(objects, list):
        raise ValueError(f"objects: expected a list, got {type(objects).__name__}")
    for i, o in enumerate(objects):
        if not isinstance(o, dict) or o.get("kind") not in _OBJECT_KINDS:
            raise ValueError(
                f"objects[{i}]: expected {{'kind': 'sphere' | 'box' | 'plane', ...}}, got {o!r}"
            )
        for k in _OBJECT_KINDS[o["kind"]]:
            if k not in o:
                raise ValueError(f"objects[{i}]: a {o['kind']} needs {k!r}")
    return objects


def _scene_objects(header: dict, arrays: dict, T: int):
    """Validated ``(objects, object_poses [T, B, 7] | None, object_twists [T, B, 6] | None)``."""
    objects = _check_objects(header.get("objects") or [])
    op, tw = arrays.get("object_poses"), arrays.get("object_twists")
    B = len(objects)
    if B:
        if op is None:
            raise ValueError(f"object_poses: missing, {B} object(s) listed in the header")
        if op.shape != (T, B, 7) or not np.all(np.isfinite(op)):
            raise ValueError(f"object_poses: expected finite shape ({T}, {B}, 7), got {op.shape}")
        _check_quats(op, "object_poses")
        if tw is not None and (tw.shape != (T, B, 6) or not np.all(np.isfinite(tw))):
            raise ValueError(f"object_twists: expected finite shape ({T}, {B}, 6), got {tw.shape}")
    elif op is not None:
        raise ValueError("object_poses: present, but the header lists no objects")
    return objects, op, (tw if B else None)


def _load(path, keys_hint: str):
    """``np.load`` with every failure (missing, not a zip, truncated) as one ValueError."""
    p = os.fspath(path)
    if not os.path.exists(p):
        raise ValueError(f"{p}: no such file")
    if os.path.isdir(p):
        raise ValueError(f"{p}: is a folder, expected an NPZ file")
    try:
        z = np.load(p, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"{p}: not a readable NPZ file ({keys_hint}): {e}") from None
    if not hasattr(z, "files"):
        raise ValueError(f"{p}: a single array, expected an NPZ file ({keys_hint})")
    return z


def _get(z, p, k):
    try:
        return np.asarray(z[k])
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise ValueError(f"{p}: entry {k!r} is corrupted or unreadable ({e})") from None


def _header(z, p, needs: set) -> dict:
    missing = ({"header"} | needs) - set(z.files)
    if missing:
        raise ValueError(f"{p}: not a difftaxel recording (missing {sorted(missing)})")
    try:
        header = json.loads(str(_get(z, p, "header")))
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: header is not valid JSON ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        fmt = header.get("format") if isinstance(header, dict) else None
        raise ValueError(f"{p}: header format {fmt!r}, expected {FORMAT!r}")
    if header.get("version") != VERSION:
        raise ValueError(
            f"{p}: recording version {header.get('version')!r}, this reader knows {VERSION}"
        )
    return header


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
            arrays = {k: _get(z, p, k) for k in z.files if k != "header"}
            f, jp, ts = _check_series(
                meta, arrays["frames"], arrays["joint_poses"], arrays["timestamps_ns"]
            )
            _check_quats(jp, "joint_poses")
            T = f.shape[0]
            root = arrays.get("root_poses")
            if root is not None:
                if root.shape != (T, 7) or not np.all(np.isfinite(root)):
                    raise ValueError(
                        f"root_poses: expected finite shape ({T}, 7), got {root.shape}"
                    )
                _check_quats(root, "root_poses")
            objects, op, tw = _scene_objects(header, arrays, T)
            B = len(objects)
            sensor = header.get("sensor") or None
            if sensor is not None and not isinstance(sensor, dict):
                raise ValueError(f"sensor: expected a dict of options, got {type(sensor).__name__}")
        except (ValueError, TypeError) as e:
            raise ValueError(f"{p}: {e}") from None
        return Recording(
            meta,
            f,
            jp,
            ts,
            root,
            objects or None,
            op,
            tw if B else None,
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
    [T, B, 6]``, ``sensor`` options."""

    layout: object
    channels: object
    frames: np.ndarray
    timestamps_ns: np.ndarray
    link_poses: np.ndarray | None = None
    objects: list | None = None
    object_poses: np.ndarray | None = None
    object_twists: np.ndarray | None = None
    sensor: dict | None = None


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


def _check_link_frames(frames, N, T=None):
    f = np.asarray(frames)
    if f.ndim not in (2, 3) or f.shape[1] != N or (f.ndim == 3 and f.shape[2] != 3):
        raise ValueError(
            f"frames: expected (T, {N}, 3) or (T, {N}) (N from the layout), got {f.shape}"
        )
    if f.shape[0] == 0:
        raise ValueError("frames: expected at least one frame (empty time range)")
    return f


def write_link_recording(
    path,
    layout,
    frames,
    timestamps_ns,
    *,
    channels="xyz",
    link_poses=None,
    objects=None,
    object_poses=None,
    object_twists=None,
    sensor: dict | None = None,
) -> None:
    """Write a rigid-link recording (:class:`LinkRecording`) as an NPZ with a JSON ``header``
    (``"layout"``, ``"channels"``, ``"objects"``, ``"sensor"``) and arrays ``frames``,
    ``timestamps_ns``, ``link_poses``, ``object_poses``, ``object_twists``. Atomic."""
    N = layout.n_taxels
    f = _check_link_frames(frames, N)
    T = f.shape[0]
    ts = np.asarray(timestamps_ns)
    if ts.shape != (T,) or not np.issubdtype(ts.dtype, np.integer) or np.any(np.diff(ts) < 0):
        raise ValueError(f"timestamps_ns: expected non-decreasing int64 of shape ({T},)")
    header = {
        "format": FORMAT,
        "version": VERSION,
        "layout": layout_to_dict(layout),
        "channels": _channels_json(channels, N),
        "units": {
            "frames": "N (or the skin's pressure units), taxel axes",
            "layout": "m, link frame",
            "link_poses": "m + quaternion xyzw, world",
            "object_poses": "m + quaternion xyzw, world",
            "object_twists": "m/s then rad/s, world",
        },
        "objects": list(objects or []),
        "sensor": dict(sensor or {}),
    }
    extra = _object_arrays(objects, object_poses, object_twists, T)
    if link_poses is not None:
        lp = np.asarray(link_poses, float)
        if lp.shape != (T, 7):
            raise ValueError(f"link_poses: expected shape ({T}, 7), got {lp.shape}")
        _check_quats(lp, "link_poses")
        extra["link_poses"] = lp
    try:
        text = json.dumps(header, default=_json_default)
    except TypeError as e:
        raise ValueError(f"sensor / objects: not JSON-serialisable ({e})") from None
    arrays = dict(header=np.asarray(text), frames=f, timestamps_ns=ts.astype(np.int64), **extra)
    atomic_write(path, lambda fh: np.savez(fh, **arrays))


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
            N = layout.n_taxels
            arrays = {k: _get(z, p, k) for k in z.files if k != "header"}
            f = _check_link_frames(arrays["frames"], N)
            T = f.shape[0]
            ch = header.get("channels", "xyz")
            mask = channel_mask(ch if isinstance(ch, str) else np.asarray(ch, bool), N)
            if f.ndim == 2 and mask[:, :2].any():
                raise ValueError(
                    "frames: [T, N] readings are normal only; channels must be 'normal'"
                )
            sel = f if f.ndim == 2 else f[:, mask]
            if not np.all(np.isfinite(sel)):
                raise ValueError("frames: non-finite readings in the recorded channels")
            ts = arrays["timestamps_ns"]
            if ts.shape != (T,) or not np.issubdtype(ts.dtype, np.integer):
                raise ValueError(f"timestamps_ns: expected int64 of shape ({T},), got {ts.shape}")
            lp = arrays.get("link_poses")
            if lp is not None:
                if lp.shape != (T, 7) or not np.all(np.isfinite(lp)):
                    raise ValueError(f"link_poses: expected finite shape ({T}, 7), got {lp.shape}")
                _check_quats(lp, "link_poses")
            objects, op, tw = _scene_objects(header, arrays, T)
            sensor = header.get("sensor") or None
            if sensor is not None and not isinstance(sensor, dict):
                raise ValueError(f"sensor: expected a dict of options, got {type(sensor).__name__}")
        except (ValueError, TypeError) as e:
            raise ValueError(f"{p}: {e}") from None
        return LinkRecording(
            layout, ch if isinstance(ch, str) else mask, f, ts, lp, objects or None, op, tw, sensor
        )
