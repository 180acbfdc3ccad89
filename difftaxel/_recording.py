"""The rules every recording writer and reader share (:mod:`difftaxel.io`): a write accepts
exactly what its reader reads back.

* Quaternions within :data:`QUAT_TOLERANCE` of unit norm are normalised; further off, refused.
* A NaN or inf reading, pose or twist (a dropped sample) is refused with its index named.
* Sensor options (:data:`SENSOR_OPTIONS`) are stored complete (writers fill KinematicTaxel's
  defaults); objects' fields are typed; timestamps are non-decreasing int64.
* Files are written beside their target and renamed over it (:func:`_save`); reading turns
  every failure (missing, truncated, corrupted, another format) into one ``ValueError``
  naming the file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile

import numpy as np

from ._files import atomic_write

FORMAT = "difftaxel.recording"
VERSION = 1


def _timestamps(ts, T: int) -> np.ndarray:
    ts = np.asarray(ts)
    if ts.shape != (T,) or not np.issubdtype(ts.dtype, np.integer):
        raise ValueError(
            f"timestamps_ns: expected int64 of shape ({T},), got {ts.shape} {ts.dtype}"
        )
    if np.any(np.diff(ts) < 0):
        raise ValueError("timestamps_ns: expected non-decreasing times")
    return ts.astype(np.int64)


def _scene_arrays(header: dict, arrays: dict, T: int) -> dict:
    """Validated scene arrays (objects listed in ``header``): ``object_poses [T, B, 7]``
    normalised, ``object_twists [T, B, 6]`` (zeros when absent) and finite."""
    objects = _check_objects(header.get("objects") or [])
    op, tw = arrays.get("object_poses"), arrays.get("object_twists")
    B = len(objects)
    if not B:
        for k in ("object_poses", "object_twists"):
            if arrays.get(k) is not None:
                raise ValueError(f"{k}: present, but no objects are listed")
        return {}
    if op is None:
        raise ValueError(f"object_poses: missing, {B} object(s) listed")
    if np.shape(op) != (T, B, 7):
        raise ValueError(f"object_poses: expected shape ({T}, {B}, 7), got {np.shape(op)}")
    tw = np.zeros((T, B, 6)) if tw is None else tw
    if np.shape(tw) != (T, B, 6):
        raise ValueError(f"object_twists: expected shape ({T}, {B}, 6), got {np.shape(tw)}")
    return {
        "object_poses": _unit_poses(op, "object_poses"),
        "object_twists": _finite(tw, "object_twists"),
    }


def _optional_series(arrays: dict, T: int, name: str, width: int, poses: bool) -> dict:
    a = arrays.get(name)
    if a is None:
        return {}
    if np.shape(a) != (T, width):
        raise ValueError(f"{name}: expected shape ({T}, {width}), got {np.shape(a)}")
    return {name: _unit_poses(a, name) if poses else _finite(a, name)}


def _save(path, header: dict, arrays: dict) -> None:
    """The NPZ written beside ``path`` and renamed over it; the path checked first."""
    from ._files import check_output

    p = check_output(path, "path")
    try:  # serialised before the file is touched: a bad option cannot cost the old file
        text = json.dumps(header, default=_json_default)
    except TypeError as e:
        raise ValueError(f"sensor / objects: not JSON-serialisable ({e})") from None
    atomic_write(p, lambda fh: np.savez(fh, header=np.asarray(text), **arrays))


def _json_default(o):
    """numpy scalars and arrays as plain JSON numbers and lists."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} {o!r} is not JSON-serialisable")


QUAT_TOLERANCE = 1e-3
#: the KinematicTaxel options a recording stores (the force model a fit of it uses)
SENSOR_OPTIONS = (
    "probe_radius",
    "normal_stiffness",
    "normal_damping",
    "normal_exponent",
    "shear_scalar",
    "twist_scalar",
)


def _first_bad(mask: np.ndarray) -> str:
    i = tuple(int(v) for v in np.argwhere(mask)[0])
    return str(i[0]) if len(i) == 1 else str(i)


def _finite(a, name: str, what: str = "value") -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{name}: expected numbers, got dtype {a.dtype}")
    a = np.asarray(a, float) if a.dtype.kind in "iu" else a
    bad = ~np.isfinite(a)
    if bad.any():
        raise ValueError(
            f"{name}: non-finite {what} at index {_first_bad(bad)} (a dropped sample: drop "
            "the frame; recordings hold no NaN or inf where they are read)"
        )
    return a


def _unit_poses(a, name: str) -> np.ndarray:
    """Finite poses ``[..., 7]`` with their quaternions (x, y, z, w) normalised; a norm more
    than ``QUAT_TOLERANCE`` from 1 is refused."""
    a = np.array(_finite(a, name), float)
    n = np.linalg.norm(a[..., 3:], axis=-1)
    bad = ~(np.abs(n - 1.0) <= QUAT_TOLERANCE)
    if bad.any():
        raise ValueError(
            f"{name}: expected unit quaternions (x, y, z, w; norm within {QUAT_TOLERANCE} of 1), "
            f"got norm {float(n[bad].flat[0]):.6g} at index {_first_bad(bad)}"
        )
    off = np.abs(n - 1.0) > 16 * np.finfo(float).eps  # unit ones stay bit for bit
    a[..., 3:] /= np.where(off, n, 1.0)[..., None]
    return a


def _sensor_options(sensor, *, fill: bool) -> dict | None:
    """The stored force-model options: numbers for every name in ``SENSOR_OPTIONS``, checked
    by KinematicTaxel's own rules. ``fill``: options not given take KinematicTaxel's default (a
    writer); otherwise every option must be present (a reader; an absent or empty entry is
    ``None``)."""
    from .sensors import KinematicTaxel

    if sensor is None or (not fill and sensor == {}):
        if not fill:
            return None
        sensor = {}
    if not isinstance(sensor, dict):
        raise ValueError(f"sensor: expected a dict of options, got {type(sensor).__name__}")
    unknown = sorted(set(sensor) - set(SENSOR_OPTIONS))
    if unknown:
        raise ValueError(
            f"sensor: unknown option(s) {unknown}; a recording stores {SENSOR_OPTIONS}"
        )
    defaults = {f.name: f.default for f in dataclasses.fields(KinematicTaxel)}
    for k, v in sensor.items():
        if isinstance(v, (bool, np.bool_)) or not isinstance(
            v, (int, float, np.integer, np.floating)
        ):
            raise ValueError(f"sensor.{k}: expected a number, got {v!r}")
        if not np.isfinite(v):
            raise ValueError(f"sensor.{k}: expected a finite number, got {v!r}")
    missing = [k for k in SENSOR_OPTIONS if k not in sensor]
    if missing and not fill:
        raise ValueError(f"sensor: missing option(s) {missing} (a recording stores them all)")
    out = {k: float(sensor.get(k, defaults[k])) for k in SENSOR_OPTIONS}
    try:
        KinematicTaxel(probe_local_pos=np.zeros((1, 3)), **out)
    except (ValueError, TypeError) as e:
        raise ValueError(f"sensor: {e}") from None
    return out


_OBJECT_KINDS = {"sphere": ("radius",), "box": ("size",), "plane": ()}


def _positive_numbers(v, name: str, n: int | None) -> None:
    vals = v if n is not None else [v]
    if n is not None and (not isinstance(v, (list, tuple, np.ndarray)) or len(v) != n):
        raise ValueError(f"{name}: expected {n} numbers (m), got {v!r}")
    for x in vals:
        if isinstance(x, (bool, np.bool_)) or not isinstance(
            x, (int, float, np.integer, np.floating)
        ):
            raise ValueError(f"{name}: expected a number (m), got {x!r}")
        if not (np.isfinite(x) and x > 0):
            raise ValueError(f"{name}: expected a finite number > 0 (m), got {x!r}")


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
        if o["kind"] == "sphere":
            _positive_numbers(o["radius"], f"objects[{i}].radius", None)
        elif o["kind"] == "box":
            _positive_numbers(o["size"], f"objects[{i}].size", 3)
        elif "normal" in o:
            nrm = np.asarray(o["normal"])
            if nrm.shape != (3,) or nrm.dtype.kind not in "fiu" or not np.all(np.isfinite(nrm)):
                raise ValueError(
                    f"objects[{i}].normal: expected 3 finite numbers, got {o['normal']!r}"
                )
            if not np.linalg.norm(nrm) > 0:
                raise ValueError(f"objects[{i}].normal: expected a non-zero vector")
    return objects


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
