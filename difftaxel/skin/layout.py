"""Taxel layouts on a rig, the rigs (a rigid link, a skinned hand), readings and press plans."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from ..geometry import Bodies, Sphere
from ..layout import orthogonals
from ..sensors import KinematicTaxel, SensorInputs
from ..skinning import LBS
from .hand import GloveScene, glove_forces

Array = jax.Array

__all__ = [
    "LinkLayout",
    "LinkScene",
    "SkinnedScene",
    "channel_mask",
    "taxel_frames",
    "link_readings",
    "press_plan",
    "layout_errors",
]


def _unit_rows(x, name):
    x = np.asarray(x, float)
    n = np.linalg.norm(x, axis=-1)
    if not np.all(np.isfinite(n)) or np.any(n < 1e-9):
        i = int(np.argmax(~np.isfinite(n) | (n < 1e-9)))
        raise ValueError(f"{name}: row {i} is not a non-zero finite vector")
    return x / n[:, None]


class LinkLayout(NamedTuple):
    """Taxels on one rigid link (link frame, m): ``positions [N, 3]``, unit outward ``normals
    [N, 3]``, ``tangents [N, 3]`` (+X axis, orthogonal to the normal).

    Build it with :meth:`make`, which validates, normalises and applies the tangent rule.
    """

    positions: np.ndarray
    normals: np.ndarray
    tangents: np.ndarray

    @classmethod
    def make(cls, positions, normals, tangents=None) -> LinkLayout:
        """Validated layout. ``tangents=None``: Genesis's rule, ``orthogonals(normal)[0]``;
        given tangents are projected onto each normal's plane (an error if parallel to it)."""
        p = np.asarray(positions, float)
        if p.ndim != 2 or p.shape[1] != 3 or p.shape[0] < 1:
            raise ValueError(f"positions: expected [N, 3] with N >= 1, got {p.shape}")
        if not np.all(np.isfinite(p)):
            raise ValueError("positions: non-finite values")
        n = np.asarray(normals, float)
        if n.shape != p.shape:
            raise ValueError(f"normals: expected {p.shape} like positions, got {n.shape}")
        n = _unit_rows(n, "normals")
        if tangents is None:
            t = np.stack([orthogonals(v)[0] for v in n])  # host-side, once per layout
        else:
            t = np.asarray(tangents, float)
            if t.shape != p.shape:
                raise ValueError(f"tangents: expected {p.shape} like positions, got {t.shape}")
            t = t - np.sum(t * n, 1, keepdims=True) * n
            t = _unit_rows(t, "tangents (projected on the normal's plane)")
        return cls(p, n, t)

    @classmethod
    def from_poses(cls, poses) -> LinkLayout:
        """Layout of taxel poses ``[N, 7]`` (x y z qx qy qz qw; +Z the normal, +X the tangent),
        e.g. an :class:`~difftaxel.skinning.LBS`'s ``taxel_bind_poses``."""
        T = np.asarray(poses, float)
        if T.ndim != 2 or T.shape[1] != 7:
            raise ValueError(f"poses: expected [N, 7], got {T.shape}")
        R = np.asarray(_pose.quat_to_matrix(jnp.asarray(T[:, 3:])), float)
        return cls.make(T[:, :3], R[:, :, 2], R[:, :, 0])

    @property
    def n_taxels(self) -> int:
        return self.positions.shape[0]

    def frames(self) -> np.ndarray:
        """Taxel poses ``[N, 7]`` (x y z qx qy qz qw) in the link frame."""
        return np.asarray(taxel_frames(self.positions, self.normals, self.tangents))


def taxel_frames(positions: Array, normals: Array, tangents_ref: Array) -> Array:
    """Poses ``[N, 7]`` (x y z qx qy qz qw): +Z ``normals`` (normalised), +X ``tangents_ref``
    projected onto the normal's plane. Differentiable in positions and normals."""
    R = _axes(normals, tangents_ref)
    return jnp.concatenate([positions, _pose.matrix_to_quat(R)], -1)


def _axes(normals, tangents_ref):
    """Rotation matrices ``[N, 3, 3]`` whose columns are the taxel axes (t, n x t, n)."""
    n = normals / jnp.linalg.norm(normals, axis=-1, keepdims=True)
    t = tangents_ref - jnp.sum(tangents_ref * n, -1, keepdims=True) * n
    t = t / jnp.linalg.norm(t, axis=-1, keepdims=True)
    return jnp.stack([t, jnp.cross(n, t), n], axis=-1)


def channel_mask(channels, n_taxels: int) -> np.ndarray:
    """Bool ``[N, 3]`` of reported taxel-axis channels from ``"xyz"``, ``"normal"`` or a mask
    ``[3]`` / ``[N, 3]`` (at least one channel)."""
    if isinstance(channels, str):
        if channels == "xyz":
            m = np.ones(3, bool)
        elif channels == "normal":
            m = np.array([False, False, True])
        else:
            raise ValueError(f"channels: expected 'xyz', 'normal' or a bool mask, got {channels!r}")
    else:
        m = np.asarray(channels)
        if m.dtype != bool:
            raise ValueError(f"channels: a mask must be bool, got {m.dtype}")
    try:
        m = np.broadcast_to(m, (n_taxels, 3)).copy()
    except ValueError:
        raise ValueError(f"channels: expected [3] or [{n_taxels}, 3], got {np.shape(m)}") from None
    if not m.any():
        raise ValueError("channels: the mask selects no channel")
    return m


class LinkScene(NamedTuple):
    """What a recording on a rigid link holds besides the readings (``T`` frames).

    Attributes:
      T_world_link: ``[T, 7]`` link pose in the world (x y z qx qy qz qw).
      bodies: :class:`~difftaxel.geometry.Bodies` with ``[T]``-leading ``poses`` / ``twists``.
      dt: frame period (s).
      twist_link: ``[T, 6]`` link twist (world frame, linear then angular), or None (static).

    Layouts on it are in the link frame.
    """

    T_world_link: Array
    bodies: Bodies
    dt: float
    twist_link: Array | None = None

    @property
    def n_frames(self) -> int:
        return self.T_world_link.shape[0]

    def subset(self, idx) -> LinkScene:
        """The scene restricted to frames ``idx`` (host int array)."""
        b = self.bodies
        return LinkScene(
            self.T_world_link[idx],
            b.with_state(b.poses[idx], b.twists[idx]),
            self.dt,
            None if self.twist_link is None else self.twist_link[idx],
        )

    def readings(self, sensor, positions, normals, tangents_ref, gains=None) -> Array:
        """:func:`link_readings` on this scene."""
        return link_readings(sensor, self, positions, normals, tangents_ref, gains)


class SkinnedScene(NamedTuple):
    """A skinned hand as a rig for :func:`calibrate_layout`: ``lbs`` (its ``taxel_bind_poses``
    are replaced by the layout) and a :class:`~difftaxel.skin.hand.GloveScene`. Layouts on it are
    bind poses in the wrist root frame (``LinkLayout.from_poses(lbs.taxel_bind_poses)``)."""

    lbs: LBS
    scene: GloveScene

    @property
    def n_frames(self) -> int:
        return self.scene.T_root_joints.shape[0]

    def subset(self, idx) -> SkinnedScene:
        g = self.scene
        b = g.bodies
        return SkinnedScene(
            self.lbs,
            GloveScene(
                g.T_world_root[idx],
                g.T_root_joints[idx],
                b.with_state(b.poses[idx], b.twists[idx]),
                g.dt,
            ),
        )

    def readings(self, sensor, positions, normals, tangents_ref, gains=None) -> Array:
        """:func:`~difftaxel.skin.hand.glove_forces` with bind poses from the layout."""
        bind = jnp.concatenate([positions, _pose.matrix_to_quat(_axes(normals, tangents_ref))], -1)
        return glove_forces(sensor, self.lbs, self.scene, bind, gains)


@jax.jit
def link_readings(
    sensor: KinematicTaxel,
    scene: LinkScene,
    positions: Array,
    normals: Array,
    tangents_ref: Array,
    gains: Array | None = None,
) -> Array:
    """Readings ``[T, N, 3]`` (N, taxel axes: +z the normal) of taxels at ``positions [N, 3]``
    (m, link frame) with ``normals [N, 3]`` over ``scene``.

    ``sensor`` supplies the force model (its positions are replaced); ``gains [N]`` scale the
    penetration (per-taxel sensitivity, or area for a pressure). Differentiable in positions,
    normals, gains, the scene and the sensor's options.
    """
    R = _axes(normals, tangents_ref)
    s = sensor.replace(probe_local_pos=positions)
    T = scene.T_world_link.shape[0]
    tw = scene.twist_link
    if tw is None:
        tw = jnp.zeros((T, 6), scene.T_world_link.dtype)

    def frame(T_wl, tw_l, poses, twists):
        inp = SensorInputs(
            T_world_link=T_wl,
            twist_link=tw_l,
            bodies=scene.bodies.with_state(poses, twists),
            body_mask=jnp.ones(poses.shape[0], bool),
            dt=jnp.asarray(scene.dt, T_wl.dtype),
        )
        st = s.init_state()
        if gains is None:
            F = s.forces(st, inp)[1].force
        else:
            F = s.forces(st.replace(probe_gain=gains), inp)[0].force
        return jnp.einsum("nij,ni->nj", R, F)  # R^T F: force in taxel axes

    return jax.vmap(frame)(scene.T_world_link, tw, scene.bodies.poses, scene.bodies.twists)


def press_plan(
    layout: LinkLayout,
    radius: float = 6e-3,
    depths=(1e-3, 2e-3),
    offset: float = 3.5e-3,
    dt: float = 0.01,
) -> LinkScene:
    """An excitation that identifies positions and normals from normal readings.

    A sphere of ``radius`` (m) presses each taxel's nominal site ``p_i`` along its nominal
    normal ``n_i`` to each of ``depths`` (m, below the nominal surface point), centred and
    offset by ``offset`` (m) along ``+-t0`` and ``+-t1``: ``5 * len(depths) * N`` frames, one
    sphere each, the link static at the identity. At an offset press the contact direction at
    the taxel leans ``~asin(offset / radius)`` (36 deg by default) from its normal; the depths
    vary the reading's magnitude along the normal. The defaults suit a pitch of a few mm and
    an initial layout a few mm off (the contact patch, ~5 mm across at 2 mm, still reaches a
    taxel that far from its nominal site). The offset must stay below the radius.
    """
    if not (np.isfinite(radius) and radius > 0):
        raise ValueError(f"radius: expected a finite sphere radius > 0 (m), got {radius}")
    if not 0 < offset < radius:
        raise ValueError(f"offset: expected 0 < offset < radius ({radius}), got {offset}")
    if not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt: expected a frame period > 0 (s), got {dt}")
    d = np.asarray(depths, float).reshape(-1)
    if d.size < 1 or np.any(d <= 0) or np.any(d >= radius):
        raise ValueError(f"depths: expected values in (0, radius), got {d}")
    p, n, t0 = layout.positions, layout.normals, layout.tangents
    t1 = np.cross(n, t0)
    shifts = np.stack([np.zeros_like(t0), t0, -t0, t1, -t1], 1) * offset  # [N, 5, 3]
    # depth measured along the normal below the nominal point, on the offset line
    centres = []
    for di in d:  # host-side, a handful of depths
        h = np.sqrt(np.maximum(radius**2 - offset**2 * (np.abs(shifts).sum(-1) > 0), 0.0))
        c = p[:, None] + shifts + n[:, None] * (h[..., None] - di)
        centres.append(c)
    c = np.stack(centres, 1).reshape(-1, 3)  # [N * D * 5, 3], taxel-major
    T = c.shape[0]
    poses = np.concatenate([c, np.tile([0.0, 0.0, 0.0, 1.0], (T, 1))], 1)[:, None]
    sph = Sphere(radius=radius, body=0)
    bodies = Bodies((sph,), poses[0]).with_state(
        jnp.asarray(poses), jnp.zeros((T, 1, 6), jnp.asarray(poses).dtype)
    )
    link = jnp.asarray(np.tile([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], (T, 1)))
    return LinkScene(link, bodies, dt)


def layout_errors(est: LinkLayout, true: LinkLayout):
    """Position error (m) and normal angle error (deg) per taxel ``[N]``."""
    d = np.linalg.norm(est.positions - true.positions, axis=1)
    c = np.clip(np.sum(est.normals * true.normals, 1), -1.0, 1.0)
    return d, np.degrees(np.arccos(c))
