"""DEX-01 style taxel patterns, tactile images and the depth-weighted normal-force split.

A pattern (the DEX-01 tactile data contract's layout file) is an NPZ with

* ``poses [N, 3, 4]``: columns 0..2 a proper rotation whose third column is the outward surface
  normal, column 3 the position (sensor frame, m);
* ``taxel2pixel [N, 2]``: integer (row, col) of each taxel in the firmware image (unique,
  non-negative); unoccupied pixels read 0.

Readings per environment (E environments, T taxels): ``normal_forces [E, T]`` (N, >= 0),
``depths [E, T]`` (m, negative in contact, else 0), ``depth_dots [E, T]`` (m/s).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import pose as _pose

Array = jax.Array

__all__ = [
    "TaxelPattern",
    "load_pattern",
    "save_pattern",
    "grid_pattern",
    "tactile_image",
    "split_normal_force",
    "Dex01Reading",
    "dex01_step",
]


class TaxelPattern(NamedTuple):
    """A validated pattern: ``poses [N, 3, 4]``, ``taxel2pixel [N, 2]`` int, ``image_shape``."""

    poses: np.ndarray
    taxel2pixel: np.ndarray
    image_shape: tuple


def validate_pattern(poses, taxel2pixel, image_shape=None, atol: float = 1e-5) -> TaxelPattern:
    """Check a pattern and return it; errors name ``poses`` / ``taxel2pixel``."""
    P = np.asarray(poses, dtype=float)
    if P.ndim != 3 or P.shape[1:] != (3, 4):
        raise ValueError(f"poses: expected shape (N, 3, 4), got {P.shape}")
    if not np.all(np.isfinite(P)):
        raise ValueError("poses: expected finite values")
    R = P[:, :, :3]
    orth = np.abs(np.einsum("nji,njk->nik", R, R) - np.eye(3)).max(axis=(1, 2))
    det = np.linalg.det(R)
    bad = (orth > atol) | (np.abs(det - 1.0) > atol)
    if np.any(bad):
        k = int(np.argmax(bad))
        raise ValueError(
            f"poses: taxel {k} is not a proper rotation (orthonormality error {orth[k]:.2g}, "
            f"det {det[k]:.6g}; expected det 1 within {atol})"
        )
    t2p = np.asarray(taxel2pixel)
    if t2p.shape != (P.shape[0], 2) or not np.issubdtype(t2p.dtype, np.integer):
        raise ValueError(
            f"taxel2pixel: expected an int array of shape ({P.shape[0]}, 2), got {t2p.shape} {t2p.dtype}"
        )
    if np.any(t2p < 0):
        raise ValueError("taxel2pixel: expected non-negative (row, col) cells")
    uniq = np.unique(t2p, axis=0)
    if len(uniq) != len(t2p):
        raise ValueError("taxel2pixel: two taxels map to the same pixel (cells must be unique)")
    shape = tuple(int(v) for v in (t2p.max(0) + 1)) if image_shape is None else tuple(image_shape)
    if np.any(t2p >= np.asarray(shape)):
        raise ValueError(f"taxel2pixel: a cell lies outside the image shape {shape}")
    return TaxelPattern(P, t2p.astype(np.int32), shape)


def load_pattern(path, image_shape=None) -> TaxelPattern:
    """Load and validate an NPZ pattern (``poses``, ``taxel2pixel``; optional ``image_shape``)."""
    with np.load(os.fspath(path), allow_pickle=False) as z:
        for k in ("poses", "taxel2pixel"):
            if k not in z.files:
                raise ValueError(f"path: pattern file lacks '{k}'")
        shp = (
            tuple(z["image_shape"])
            if "image_shape" in z.files and image_shape is None
            else image_shape
        )
        return validate_pattern(z["poses"], z["taxel2pixel"], shp)


def save_pattern(path, pattern: TaxelPattern) -> None:
    """Save a pattern as NPZ (validated first)."""
    p = validate_pattern(*pattern)
    with open(os.fspath(path), "wb") as fh:
        np.savez(
            fh,
            poses=p.poses,
            taxel2pixel=p.taxel2pixel,
            image_shape=np.asarray(p.image_shape, dtype=np.int64),
        )


def grid_pattern(size: tuple, resolution: float, order: str = "xy") -> TaxelPattern:
    """A flat ``rows x cols`` sampling grid in the sensor's xy plane, normal +z, centred.

    ``resolution`` is the pitch (m). ``order="xy"``: taxel ``k = row * cols + col`` (x runs
    fastest); ``order="yx"``: ``k = col * rows + row`` (y runs fastest). Pixel (row, col): row
    along +y, col along +x; image shape ``(rows, cols)``.
    """
    rows, cols = (int(v) for v in size)
    if rows < 1 or cols < 1:
        raise ValueError(f"size: expected (rows, cols) >= 1, got {size}")
    if not resolution > 0:
        raise ValueError(f"resolution: expected > 0 (m), got {resolution}")
    if order not in ("xy", "yx"):
        raise ValueError(f"order: expected 'xy' or 'yx', got {order!r}")
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    if order == "yx":
        r, c = r.T, c.T
    r, c = r.reshape(-1), c.reshape(-1)
    x = (c - (cols - 1) / 2) * resolution
    y = (r - (rows - 1) / 2) * resolution
    P = np.zeros((rows * cols, 3, 4))
    P[:, :, :3] = np.eye(3)
    P[:, 0, 3], P[:, 1, 3] = x, y
    return validate_pattern(P, np.stack([r, c], 1).astype(np.int32), (rows, cols))


def tactile_image(values: Array, taxel2pixel, image_shape: tuple) -> Array:
    """Scatter per-taxel ``values [..., N]`` into images ``[..., H, W]`` (unoccupied pixels 0)."""
    t2p = np.asarray(taxel2pixel)
    values = jnp.asarray(values)
    if values.shape[-1] != t2p.shape[0]:
        raise ValueError(
            f"values: expected a last axis of {t2p.shape[0]} taxels, got {values.shape}"
        )
    H, W = image_shape
    flat = jnp.zeros(values.shape[:-1] + (H * W,), values.dtype)
    flat = flat.at[..., jnp.asarray(t2p[:, 0] * W + t2p[:, 1])].set(values)
    return flat.reshape(values.shape[:-1] + (H, W))


def split_normal_force(net_normal_force: Array, depths: Array) -> Array:
    """Split a net normal force over the penetrating taxels in proportion to their depth.

    Args:
      net_normal_force: ``[...]`` (N, >= 0), the sensor's net normal load.
      depths: ``[..., T]`` (m), negative in contact, 0 otherwise.
    Returns:
      ``normal_forces [..., T]`` (N, >= 0) summing to ``net_normal_force`` where any taxel
      penetrates, all 0 otherwise. Differentiable (finite gradient with no contact).
    """
    pen = jnp.maximum(-depths, 0.0)
    tot = jnp.sum(pen, axis=-1, keepdims=True)
    pos = tot > 0
    share = jnp.where(pos, pen / jnp.where(pos, tot, 1.0), 0.0)
    return jnp.maximum(jnp.asarray(net_normal_force)[..., None], 0.0) * share


class Dex01Reading(NamedTuple):
    """DEX-01 style outputs for one environment (T taxels): ``normal_forces [T]`` (N),
    ``depths [T]`` (m, < 0 in contact), ``depth_dots [T]`` (m/s), ``points_world [T, 3]``,
    ``normals_world [T, 3]``, ``quat_world [T, 4]`` (x, y, z, w)."""

    normal_forces: Array
    depths: Array
    depth_dots: Array
    points_world: Array
    normals_world: Array
    quat_world: Array


def dex01_step(
    pattern: TaxelPattern,
    T_world_sensor: Array,
    bodies,
    net_normal_force: Array,
    prev_depths: Array,
    dt: float,
    body_mask=None,
) -> Dex01Reading:
    """Taxel depths against ``bodies`` and the depth-weighted split of ``net_normal_force``.

    ``depths = min(0, sd)`` at each taxel point (the counter object's signed distance),
    ``depth_dots = (depths - prev_depths) / dt``.
    """
    P = jnp.asarray(pattern.poses)
    q_local = _pose.matrix_to_quat(P[:, :, :3])
    T_local = jnp.concatenate([P[:, :, 3], q_local], -1).astype(T_world_sensor.dtype)
    T_w = _pose.compose(T_world_sensor[None], T_local)
    pts = T_w[:, :3]
    sd, _, _ = bodies.signed_distance(pts, body_mask)
    depths = jnp.minimum(sd, 0.0)
    normals = _pose.quat_rotate(T_w[:, 3:], jnp.array([0.0, 0.0, 1.0], pts.dtype)[None])
    return Dex01Reading(
        normal_forces=split_normal_force(net_normal_force, depths),
        depths=depths,
        depth_dots=(depths - prev_depths) / dt,
        points_world=pts,
        normals_world=normals,
        quat_world=T_w[:, 3:],
    )
