"""Point-cloud tactile sensors: ProximityTaxel and ElastomerTaxel (HydroShear-style).

Formulas, defaults and quirks follow Genesis World 1.4.5 (``GENESIS_MODELS.md`` sections 7-8).
Neither sensor is contact-gated: every body of ``inputs.bodies`` with ``inputs.body_mask``
True is tracked (Genesis: the ``track_link_idx`` links).

Tracked point clouds are sampled once (:func:`difftaxel.sample_surface_points`, Genesis's
area-weighted + farthest-point procedure) and passed as a :class:`TrackedPoints`: positions in
each body's frame, grouped by body.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import affine_planes, cross, dot, safe_norm, safe_pow
from .._numerics import eps as _eps
from .._pytree import pytree_dataclass, replace, static_field
from ..imperfections import ChainState, Imperfections, grid_metadata
from .base import (
    Reading,
    SensorInputs,
    TaxelReading,
    check_inputs_trace,
    noised_radius,
    prep_layout,
    reset_gain_and_chain,
    split3,
)

Array = jax.Array

__all__ = [
    "TrackedPoints",
    "ProximityTaxel",
    "ElastomerTaxel",
    "PointCloudState",
    "elastomer_layer_kernel",
]


@pytree_dataclass
class TrackedPoints:
    """Surface points of the tracked bodies, in each body's frame.

    Attributes:
      points: ``[M, 3]`` positions (m), body frames, grouped by body in ``segments`` order.
      segments: static tuple of ``(body_index, count)``: the first ``count`` points belong to
        ``body_index``, the next group to the next entry, ...
    """

    points: Array
    segments: tuple = static_field(())

    def __post_init__(self):
        p = np.asarray(self.points, dtype=float)
        if p.ndim != 2 or p.shape[1] != 3 or p.shape[0] == 0:
            raise ValueError(f"TrackedPoints.points: expected shape (M, 3), M > 0, got {p.shape}")
        if not np.all(np.isfinite(p)):
            raise ValueError("TrackedPoints.points: expected finite values")
        seg = tuple((int(b), int(c)) for b, c in self.segments)
        if sum(c for _, c in seg) != p.shape[0] or any(c < 0 or b < 0 for b, c in seg):
            raise ValueError(
                f"TrackedPoints.segments: counts must be >= 0 and sum to {p.shape[0]} points, "
                f"got {seg}"
            )
        object.__setattr__(self, "points", jnp.asarray(p, jnp.result_type(float)))
        object.__setattr__(self, "segments", seg)

    @classmethod
    def from_body_index(cls, points, body_index):
        """Build from ``points [M, 3]`` and an integer ``body_index [M]`` (points regrouped)."""
        p = np.asarray(points, dtype=float)
        b = np.asarray(body_index).astype(int)
        if b.shape != (p.shape[0],):
            raise ValueError(f"body_index: expected shape ({p.shape[0]},), got {b.shape}")
        order = np.argsort(b, kind="stable")
        bodies, counts = np.unique(b[order], return_counts=True)
        return cls(points=p[order], segments=tuple(zip(bodies.tolist(), counts.tolist())))

    @property
    def n_points(self) -> int:
        return self.points.shape[0]

    def world_planes(self, inputs: SensorInputs, dtype):
        """World positions, velocities and angular velocities (each a tuple of three ``[M]``
        planes; m, m/s, rad/s) and the per-point body mask ``[M]`` (static slices per
        segment)."""
        bodies = inputs.bodies
        pts = self.points.astype(dtype)
        parts, msk, start = [], [], 0
        for b, c in self.segments:
            if b >= bodies.num_bodies:
                raise ValueError(
                    f"TrackedPoints.segments: body {b} but inputs.bodies has "
                    f"{bodies.num_bodies} bodies"
                )
            seg = [pts[start : start + c, i] for i in range(3)]
            T, tw = bodies.poses[b].astype(dtype), bodies.twists[b].astype(dtype)
            parts.append(_motion_planes(T, tw, *seg))
            msk.append(jnp.broadcast_to(jnp.asarray(inputs.body_mask)[b], (c,)))
            start += c
        pos, vel, ang = (
            tuple(jnp.concatenate([p[k][i] for p in parts]) for i in range(3)) for k in range(3)
        )
        return pos, vel, ang, jnp.concatenate(msk)

    def world(self, inputs: SensorInputs, dtype):
        """:meth:`world_planes` stacked: positions, velocities, angular velocities
        ``[M, 3]`` (world) and the body mask ``[M]``."""
        pos, vel, ang, msk = self.world_planes(inputs, dtype)
        return jnp.stack(pos, -1), jnp.stack(vel, -1), jnp.stack(ang, -1), msk


def _prep_normals(name, normal, n):
    a = np.asarray(normal, dtype=float)
    if a.shape == (3,):
        a = np.broadcast_to(a, (n, 3))
    elif a.ndim >= 2 and a.shape[-1] == 3 and a.reshape(-1, 3).shape[0] == n:
        a = a.reshape(n, 3)
    else:
        raise ValueError(
            f"{name}.probe_local_normal: expected shape (3,) or ({n}, 3), got {a.shape}"
        )
    nrm = np.linalg.norm(a, axis=-1, keepdims=True)
    if np.any(nrm < 1e-12) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name}.probe_local_normal: expected non-zero finite vectors")
    return a / nrm


def _per_probe(name, v, n, *, positive=False, allow_zero=True):
    a = np.asarray(v, dtype=float)
    if a.ndim and a.size != n:
        raise ValueError(f"{name}: expected a scalar or {n} values, got shape {a.shape}")
    a = np.broadcast_to(a.reshape(-1) if a.ndim else a, (n,)).copy()
    bad = (a <= 0) if (positive and not allow_zero) else (a < 0)
    if not np.all(np.isfinite(a)) or np.any(bad):
        rel = "> 0" if (positive and not allow_zero) else ">= 0"
        raise ValueError(f"{name}: expected {rel}, got min {a.min()}")
    return a


def _scalar(name, v, lo=None, strict=False):
    x = float(np.asarray(v))
    if not math.isfinite(x) or (lo is not None and (x <= lo if strict else x < lo)):
        raise ValueError(
            f"{name}: expected a finite value {'>' if strict else '>='} {lo}, got {v!r}"
        )
    return jnp.asarray(x, jnp.result_type(float))


@pytree_dataclass
class PointCloudState:
    """Per-episode state of a point-cloud sensor (one environment).

    Attributes:
      probe_gain: ``[N]`` gain this episode.
      anchored: ``[M]`` bool, ElastomerTaxel shear anchors (empty for ProximityTaxel).
      anchor_entry: ``[M, 3]`` anchor positions in the sensor link frame (m).
      chain: imperfection-chain state.
      candidate_overflow: ``[]`` bool, sticky since the reset: True once a step found more
        tracked points near the probes than ``ProximityTaxel.max_candidates`` holds (that
        step's readings missed the points beyond the capacity; rebuild with a larger one).
        Always False without a capacity and for ElastomerTaxel.
    """

    probe_gain: Array
    anchored: Array
    anchor_entry: Array
    chain: ChainState
    candidate_overflow: Array


def _check_track(name, track):
    if not isinstance(track, TrackedPoints):
        raise TypeError(f"{name}.track_points: expected TrackedPoints, got {type(track).__name__}")


def _init_pc_state(sensor, key, n_channels, n_anchor) -> PointCloudState:
    g, chain = reset_gain_and_chain(sensor, key, n_channels)
    return PointCloudState(
        probe_gain=g,
        anchored=jnp.zeros((n_anchor,), bool),
        anchor_entry=jnp.zeros((n_anchor, 3), g.dtype),
        chain=chain,
        candidate_overflow=jnp.zeros((), bool),
    )


def _common_post(self, name, allow_crosstalk, grid_normal=None):
    flat, layout = prep_layout(name, self.probe_local_pos)
    n = flat.shape[0]
    dt = jnp.result_type(float)
    g = _per_probe(f"{name}.probe_gain", self.probe_gain, n, positive=True, allow_zero=False)
    rr = self.probe_gain_resample_range
    if rr is not None:
        rr = tuple(float(v) for v in rr)
        if len(rr) != 2 or not (0 < rr[0] <= rr[1]):
            raise ValueError(
                f"{name}.probe_gain_resample_range: expected (lo, hi), 0 < lo <= hi, got {rr}"
            )
    _check_track(name, self.track_points)
    imp = Imperfections() if self.imperfections is None else self.imperfections
    if not isinstance(imp, Imperfections):
        raise TypeError(f"{name}.imperfections: expected a difftaxel.Imperfections")
    imp = imp.bind(name, layout, flat, allow_crosstalk=allow_crosstalk, grid_normal=grid_normal)
    object.__setattr__(self, "probe_local_pos", jnp.asarray(flat, dt))
    object.__setattr__(self, "probe_gain", jnp.asarray(g, dt))
    object.__setattr__(self, "probe_gain_resample_range", rr)
    object.__setattr__(self, "layout", layout)
    object.__setattr__(self, "imperfections", imp)
    return flat, layout, n


# =============================================================================== proximity


def _motion_planes(T_body: Array, tw: Array, bx: Array, by: Array, bz: Array):
    """World positions, velocities and angular velocities, each a tuple of three planes
    ``[K]``, of points given in the body frame as planes ``bx, by, bz [K]``, for a body at
    pose ``T_body [7]`` with world twist ``tw [6]``. Planes rather than ``[K, 3]`` arrays:
    writing a trailing axis of size 3 is a slow interleaving pass on XLA's CPU backend."""
    R = _pose.quat_to_matrix(T_body[3:])
    p = affine_planes(R, T_body[:3], bx, by, bz)
    r = [p[i] - T_body[i] for i in range(3)]
    w = tw[3:]
    v = (
        tw[0] + w[1] * r[2] - w[2] * r[1],
        tw[1] + w[2] * r[0] - w[0] * r[2],
        tw[2] + w[0] * r[1] - w[1] * r[0],
    )
    ang = tuple(jnp.broadcast_to(w[i], bx.shape) for i in range(3))
    return p, v, ang


def _rows_times(v: Array, R: Array) -> Array:
    """``v @ R`` for ``v [N, 3]``, ``R [3, 3]`` (rows rotated by ``R^T``), written out: XLA's
    CPU backend sends the ``[N, 3] x [3, 3]`` product to a library GEMM that took 3.3 + 2.1 ms
    of the ProximityTaxel step at 1024 x 121 (profiled), where the nine products fuse."""
    return jnp.stack(
        [v[:, 0] * R[0, j] + v[:, 1] * R[1, j] + v[:, 2] * R[2, j] for j in range(3)], -1
    )


def _pair_sums(p, radii, x, mask, block: int, with_d: bool, feats: tuple = ()):
    """Sums over points of ``P = R - d`` for ``0 < d <= R`` (``d = |x - p|``), of
    ``P (x - p)`` if ``with_d``, and of ``P f`` for each per-point feature ``f`` in ``feats``.

    Args:
      p: probe positions, three ``[N]`` planes (world, m).
      radii: ``[B, N]`` sensing radii (m), one row per radius branch.
      x: point positions, three ``[K]`` planes (world, m).
      mask: ``[K]`` bool, points that count.
      block: points per loop iteration (static); the iteration is unrolled.
      with_d: also return ``D = sum P (x - p)``.
      feats: ``[K]`` per-point features (e.g. a point's velocity components).

    Returns:
      ``(S, D, F)``: ``S [B, N]``; ``D`` a tuple of three ``[B, N]`` planes or None; ``F`` a
      tuple of one ``[B, N]`` sum per feature.

    A ``lax.scan`` over blocks of points, unrolled inside, on ``[B, N]`` accumulators: XLA's
    CPU backend fuses each block into one loop over the probes, where a per-block product
    ``P @ features`` (the earlier form) was a batched library GEMM of tiny matrices. XLA
    evaluates every output of a fusion separately, so the sums travel in pairs as complex
    accumulators (``S + i D_x``, ``D_y + i D_z``, ...): the pair arithmetic is done once per
    accumulator, not once per sum.
    """
    px, py, pz = p
    K = x[0].shape[0]
    n_blocks = -(-K // max(1, block))
    C = -(-K // n_blocks)  # blocks of equal size <= block, the least padding
    pad = n_blocks * C - K
    if pad:
        x = tuple(jnp.concatenate([q, jnp.full((pad,), 1e6, q.dtype)]) for q in x)
        mask = jnp.concatenate([mask, jnp.zeros((pad,), bool)])
        feats = tuple(jnp.concatenate([f, jnp.zeros((pad,), f.dtype)]) for f in feats)
    xs = tuple(q.reshape(n_blocks, C) for q in (*x, mask, *feats))
    dtype = radii.dtype
    eps = _eps(dtype)
    r2 = radii * radii
    n_terms = 1 + 3 * bool(with_d) + len(feats)

    def body(acc, blk):
        cx, cy, cz, cm, *cf = blk
        for k in range(C):
            dx, dy, dz = cx[k] - px, cy[k] - py, cz[k] - pz  # [N]
            d2 = dx * dx + dy * dy + dz * dz
            pos = d2 > 0
            dist = jnp.where(pos, jnp.sqrt(jnp.where(pos, d2, 1.0)), 0.0)
            hit = (d2[None] <= r2) & (dist[None] > eps) & cm[k]  # [B, N]
            P = jnp.where(hit, radii - dist[None], 0.0)
            t = [P]
            if with_d:
                t += [P * dx[None], P * dy[None], P * dz[None]]
            t += [P * f[k] for f in cf]
            acc = tuple(
                a + (jax.lax.complex(t[2 * j], t[2 * j + 1]) if 2 * j + 1 < n_terms else t[2 * j])
                for j, a in enumerate(acc)
            )
        return acc, None

    ctype = jnp.result_type(dtype, jnp.complex64)
    acc0 = tuple(
        jnp.zeros(radii.shape, ctype if 2 * j + 1 < n_terms else dtype)
        for j in range((n_terms + 1) // 2)
    )
    acc, _ = jax.lax.scan(body, acc0, xs)
    sums = []
    for a in acc:
        sums += [a.real, a.imag] if jnp.iscomplexobj(a) else [a]
    D = tuple(sums[1:4]) if with_d else None
    return sums[0], D, tuple(sums[1 + 3 * bool(with_d) :])


@pytree_dataclass
class ProximityTaxel:
    """Force and torque per probe from the tracked points inside its sensing sphere.

    Per probe at world position ``p`` with world unit normal ``a = R n / (|R n| + eps)``, every
    tracked point at distance ``0 < d <= R`` contributes ``P = R - d``:
    ``S = sum P``, ``V = sum P v_t`` (tangential velocity of the point relative to the taxel),
    ``W = sum P (w_obj - w_link) . a``. With ``kappa = density_scalar / max(1, M)``:

    * ``F = stiffness kappa S a + shear_coupling kappa V`` (world; along **+ the probe
      normal**, out of the sensor, unlike KinematicTaxel);
    * ``T = (p - x_link) x F - twist_scalar (W / S) a`` (about the link origin; the twist term
      is 0 when ``S <= eps``).

    Outputs are rotated into the link frame: ``TaxelReading`` of ``[*layout, 3]`` arrays. The
    measured branch uses the noised radius and multiplies ``S`` and ``V`` by ``probe_gain``.
    The loop over points takes ``point_chunk`` points per iteration (static, unrolled,
    default 8): the forward pass holds ``O(N)`` accumulators per environment whatever the
    number of points, the reverse pass stores ``O(N)`` per point. Throughput was flat from 4
    to 32 points per block at 1024 x 121 x 500; compile time grows with the block (0.9 s at
    4, 1.5 s at 32; ``benchmarks/RESULTS.md``).

    ``max_candidates`` (static int, default None = every tracked point against every probe)
    turns on a spatial pre-selection, the capacity-and-overflow pattern of JAX-MD's neighbour
    lists: each step keeps only the tracked points inside the probes' axis-aligned bounding
    box (link frame) grown by the sensing radius, the first ``max_candidates`` of them in
    point order, and evaluates those against every probe. The readings are exactly the
    unselected ones whenever at most ``max_candidates`` points are inside; a step with more
    sets ``state.candidate_overflow`` (sticky until the next reset) and misses the rest, so
    check it after a rollout and rebuild with a larger capacity. Cost falls from ``N * M`` to
    ``N * max_candidates`` pairs plus ``O(M)`` for the selection.

    ``smoothing`` (m, default 0 = exact) weights the twist term by ``S / (S + smoothing^2)``
    instead of switching it on with the first point.
    """

    probe_local_pos: Array
    track_points: TrackedPoints
    probe_radius: Array = 0.01
    probe_radius_noise: Array = 0.0
    probe_local_normal: Array = (0.0, 0.0, 1.0)
    stiffness: Array = 100.0
    shear_coupling: Array = 0.0
    twist_scalar: Array = 1.0
    density_scalar: Array = 100.0
    probe_gain: Array = 1.0
    probe_gain_resample_range: tuple | None = static_field(None)
    imperfections: Imperfections | None = None
    point_chunk: int = static_field(8)
    max_candidates: int | None = static_field(None)
    smoothing: float = static_field(0.0)
    layout: tuple = static_field(())
    radius_noise_on: bool = static_field(False)
    shear_on: bool = static_field(False)

    def __post_init__(self):
        name = "ProximityTaxel"
        flat, layout = prep_layout(name, self.probe_local_pos)
        n = flat.shape[0]
        nrm = _prep_normals(name, self.probe_local_normal, n)
        gn = nrm.mean(0)
        gn = gn / max(np.linalg.norm(gn), 1e-300)
        _common_post(self, name, allow_crosstalk=True, grid_normal=gn)
        r = _per_probe(
            f"{name}.probe_radius", self.probe_radius, n, positive=True, allow_zero=False
        )
        noise = float(_scalar(f"{name}.probe_radius_noise", self.probe_radius_noise, 0))
        dt = jnp.result_type(float)
        object.__setattr__(self, "probe_radius", jnp.asarray(r, dt))
        object.__setattr__(self, "probe_radius_noise", jnp.asarray(noise, dt))
        object.__setattr__(self, "probe_local_normal", jnp.asarray(nrm, dt))
        for f in ("stiffness", "shear_coupling", "twist_scalar"):
            object.__setattr__(self, f, _scalar(f"{name}.{f}", getattr(self, f), 0))
        object.__setattr__(
            self, "density_scalar", _scalar(f"{name}.density_scalar", self.density_scalar, 0)
        )
        if int(self.point_chunk) < 1:
            raise ValueError(f"{name}.point_chunk: expected >= 1, got {self.point_chunk}")
        mc = self.max_candidates
        if mc is not None:
            if isinstance(mc, bool) or not isinstance(mc, (int, np.integer)) or mc < 1:
                raise ValueError(f"{name}.max_candidates: expected None or an int >= 1, got {mc!r}")
            object.__setattr__(self, "max_candidates", int(mc))
        object.__setattr__(self, "radius_noise_on", noise > 0)
        object.__setattr__(self, "shear_on", float(self.shear_coupling) > _eps(np.float64))
        sm = float(self.smoothing)
        if not sm >= 0:
            raise ValueError(f"{name}.smoothing: expected >= 0, got {sm}")

    @property
    def n_probes(self) -> int:
        return self.probe_local_pos.shape[0]

    def init_state(self, key=None) -> PointCloudState:
        """Per-episode state (a reset): gains and dead taxels drawn from ``key`` if configured."""
        return _init_pc_state(self, key, 6, 0)

    def _candidates(self, inputs: SensorInputs, radii: Array, dtype):
        """Body-frame positions (a tuple of three ``[K]`` planes) and segment index ``[K]`` of
        the first ``K = max_candidates`` tracked points inside the probes' bounding box, their
        mask ``[K]``, and whether more than ``K`` were inside (``[]`` bool).

        The box is the axis-aligned box of the (traced) probe positions in the link frame,
        grown by the largest sensing radius: a point outside it is farther than its radius from
        every probe and contributes nothing. The selection carries no gradient (it is
        piecewise constant); the selected points are moved to the world frame by the caller.
        """
        K = int(self.max_candidates)
        track = self.track_points
        bodies = inputs.bodies
        sg = jax.lax.stop_gradient
        T = sg(inputs.T_world_link)
        body_mask = jnp.asarray(inputs.body_mask)
        pts = track.points.astype(dtype)
        planes = (pts[:, 0], pts[:, 1], pts[:, 2])  # [M] each, body frames
        local, start = [[], [], []], 0
        for b, c in track.segments:
            T_lb = sg(_pose.relative(T, bodies.poses[b].astype(dtype)))
            R_lb, t_lb = _pose.quat_to_matrix(T_lb[3:]), T_lb[:3]
            seg = affine_planes(R_lb, t_lb, *(q[start : start + c] for q in planes))
            for i in range(3):  # link frame
                local[i].append(seg[i])
            start += c
        local = [jnp.concatenate(q) for q in local]  # [M] each
        msk = jnp.concatenate([jnp.broadcast_to(body_mask[b], (c,)) for b, c in track.segments])
        q = sg(self.probe_local_pos.astype(dtype))
        rmax = sg(jnp.max(radii))
        # a relative margin keeps points whose world-frame distance rounds to <= R inside
        scale = jnp.max(jnp.abs(q)) + jnp.max(jnp.abs(T[:3])) + rmax
        margin = rmax * (1.0 + 1e-3) + 64 * _eps(dtype) * scale
        lo = jnp.min(q, 0) - margin  # [3]
        hi = jnp.max(q, 0) + margin
        inside = msk
        for i in range(3):
            inside = inside & (local[i] >= lo[i]) & (local[i] <= hi[i])
        cum = jnp.cumsum(inside.astype(jnp.int32))
        count = cum[-1]
        # index of the k-th inside point (k = 1..K): first position where the count reaches k
        idx = jnp.searchsorted(
            cum, jnp.arange(1, K + 1, dtype=jnp.int32), side="left", method="scan_unrolled"
        )
        idx = jnp.minimum(idx, track.n_points - 1)
        valid = jnp.arange(K) < count
        pb = tuple(q[idx] for q in planes)  # [K] each, body frames
        seg_id = None
        if len(track.segments) > 1:
            seg_of = np.repeat(np.arange(len(track.segments)), [c for _, c in track.segments])
            seg_id = jnp.asarray(seg_of.astype(np.int32))[idx]
        return pb, seg_id, valid, count > K

    def _groups(self, inputs: SensorInputs, radii: Array, dtype):
        """The tracked points as groups ``(body, world positions (three planes), mask)``, and
        the overflow flag. Exhaustive: one group per segment, its own points. With
        ``max_candidates``: one group of the selected candidates; with several segments its
        body is None, the candidates are moved by their own bodies and the group carries
        their world velocities and spins (see :meth:`_accumulate`)."""
        bodies = inputs.bodies
        segs = self.track_points.segments
        for b, _ in segs:
            if b >= bodies.num_bodies:
                raise ValueError(
                    f"TrackedPoints.segments: body {b} but inputs.bodies has "
                    f"{bodies.num_bodies} bodies"
                )
        body_mask = jnp.asarray(inputs.body_mask)

        def world(b, pb):
            T_b = bodies.poses[b].astype(dtype)
            return affine_planes(_pose.quat_to_matrix(T_b[3:]), T_b[:3], *pb)

        use_cand = self.max_candidates is not None
        if use_cand and self.max_candidates < self.track_points.n_points:
            pb, seg_id, valid, overflow = self._candidates(inputs, radii, dtype)
            if seg_id is None:
                b = segs[0][0]
                return [(b, world(b, pb), valid & body_mask[b])], overflow
            # several bodies: each candidate moved by its own body (selects over segments)
            mot, m = None, jnp.zeros_like(valid)
            for j, (b, _) in enumerate(segs):
                on = seg_id == j
                new = _motion_planes(
                    bodies.poses[b].astype(dtype), bodies.twists[b].astype(dtype), *pb
                )
                mot = new if mot is None else jax.tree.map(
                    lambda n, o, on=on: jnp.where(on, n, o), new, mot
                )  # fmt: skip
                m = m | (valid & on & body_mask[b])
            pos, vel, ang = mot
            return [(None, pos, m, (vel, ang))], overflow
        groups, start = [], 0
        pts = self.track_points.points.astype(dtype)
        for b, c in segs:
            if c:
                seg = tuple(pts[start : start + c, i] for i in range(3))
                groups.append((b, world(b, seg), jnp.broadcast_to(body_mask[b], (c,))))
            start += c
        return groups, jnp.zeros((), bool)

    def _accumulate(self, inputs: SensorInputs, radii: Array):
        """``S [B, N]``, ``V [B, N, 3]``, ``W [B, N]`` for each radius branch ``radii [B, N]``,
        and whether the candidate capacity overflowed (``[]`` bool).

        A tracked body moves rigidly, so its points' velocities are affine in their positions:
        per body ``b`` (origin ``x_b``, twist ``(v_b, w_b)``), ``sum P v = v_b S_b + w_b x
        (D_b + (p - x_b) S_b)`` and ``sum P w = w_b S_b`` with ``S_b = sum P`` and ``D_b =
        sum P (x - p)`` over its points. So a group of one body's points only sums ``P`` and
        ``P (x - p)`` (:func:`_pair_sums`; with ``shear_coupling == 0`` only ``P``). The
        candidates of several bodies go through one loop that sums ``P`` times each point's
        own velocity and spin (7 sums, or 4 without shear) instead of one loop per body."""
        T = inputs.T_world_link
        dtype = T.dtype
        R = _pose.quat_to_matrix(T[3:])
        p = _pose.matrix_apply(R, T[:3], self.probe_local_pos.astype(dtype))  # [N, 3]
        a = _pose.matrix_apply(R, jnp.zeros(3, dtype), self.probe_local_normal.astype(dtype))
        a = a / (safe_norm(a, keepdims=True) + _eps(dtype))
        tl = inputs.twist_link.astype(dtype)
        v_tax = tl[None, :3] + cross(tl[None, 3:], p - T[None, :3])
        groups, overflow = self._groups(inputs, radii, dtype)
        pp = (p[:, 0], p[:, 1], p[:, 2])
        S = jnp.zeros(radii.shape, dtype)
        Pv = [jnp.zeros(radii.shape, dtype) for _ in range(3)]
        Pw = [jnp.zeros(radii.shape, dtype) for _ in range(3)]
        chunk = int(self.point_chunk)
        for b, world, m, *motion in groups:
            if b is None:  # candidates of several bodies: per-point velocity and spin
                v, w = motion[0]
                feats = (*v, *w) if self.shear_on else tuple(w)
                Sb, _, F = _pair_sums(pp, radii, world, m, chunk, False, feats)
                S = S + Sb
                for i in range(3):
                    Pw[i] = Pw[i] + F[-3 + i]
                    if self.shear_on:
                        Pv[i] = Pv[i] + F[i]
                continue
            Sb, D, _ = _pair_sums(pp, radii, world, m, chunk, self.shear_on)
            tw = inputs.bodies.twists[b].astype(dtype)
            w = tw[3:]
            S = S + Sb
            for i in range(3):
                Pw[i] = Pw[i] + w[i] * Sb
            if D is not None:
                x_b = inputs.bodies.poses[b, :3].astype(dtype)
                r = [D[i] + (pp[i] - x_b[i])[None] * Sb for i in range(3)]  # sum P (x - x_b)
                Pv[0] = Pv[0] + tw[0] * Sb + w[1] * r[2] - w[2] * r[1]
                Pv[1] = Pv[1] + tw[1] * Sb + w[2] * r[0] - w[0] * r[2]
                Pv[2] = Pv[2] + tw[2] * Sb + w[0] * r[1] - w[1] * r[0]
        Pv, Pw = jnp.stack(Pv, -1), jnp.stack(Pw, -1)
        # V = sum P (v_pt - v_tax)_t ; W = sum P (w_pt - w_link) . a
        Vr = Pv - S[..., None] * v_tax[None]
        V = Vr - a[None] * dot(Vr, a[None], keepdims=True)
        W = dot(Pw, a[None]) - S * dot(tl[None, 3:], a)[None]
        return S, V, W, p, a, R, overflow

    def forces(self, state: PointCloudState, inputs: SensorInputs, key=None):
        """Flat ``(measured, ground_truth)`` :class:`TaxelReading` with ``[N, 3]`` arrays."""
        m, g, _ = self._forces(state, inputs, key)
        return m, g

    def _forces(self, state: PointCloudState, inputs: SensorInputs, key=None):
        check_inputs_trace(inputs)
        dtype = inputs.T_world_link.dtype
        r = self.probe_radius.astype(dtype)
        if self.radius_noise_on:  # static: a second radius branch only when it can differ
            r_m = noised_radius(r, self.probe_radius_noise, key)
            S, V, W, p, a, R, over = self._accumulate(inputs, jnp.stack([r, r_m]))
        else:
            S, V, W, p, a, R, over = self._accumulate(inputs, r[None])
            S, V, W = (jnp.concatenate([x, x]) for x in (S, V, W))
        eps = _eps(dtype)
        kappa = self.density_scalar / max(1, self.track_points.n_points)
        out = []
        for b, gain in ((0, 1.0), (1, state.probe_gain)):
            Sb, Vb, Wb = S[b], V[b], W[b]
            pos = Sb > eps
            wbar = jnp.where(pos, Wb / jnp.where(pos, Sb, 1.0), 0.0)
            if self.smoothing > 0:
                wbar = Wb / (Sb + self.smoothing**2)
            if b:
                Sg, Vg = Sb * gain, Vb * gain[:, None]
            else:
                Sg, Vg = Sb, Vb
            F = self.stiffness * kappa * Sg[:, None] * a
            if self.shear_on:
                F = F + self.shear_coupling * kappa * Vg
            Tq = cross(p - inputs.T_world_link[None, :3], F) - self.twist_scalar * wbar[:, None] * a
            out.append(TaxelReading(_rows_times(F, R), _rows_times(Tq, R)))
        return out[1], out[0], over

    def step(self, state: PointCloudState, inputs: SensorInputs, key=None):
        """One reading: force (N) and torque (N*m), ``[*layout, 3]``, sensor link frame.

        With ``max_candidates`` set, ``state.candidate_overflow`` comes back True (and stays
        so until the next reset) on a step with more candidate points than the capacity.
        """
        k_r, k_hw, k_d = split3(key)
        m, g, over = self._forces(state, inputs, k_r)
        state = replace(state, candidate_overflow=state.candidate_overflow | over)
        imp = self.imperfections
        gshp = self.layout + (3,)
        if imp.is_identity:  # no chain: no [N, 6] round trip (a copy of both readings)
            return state, Reading(
                TaxelReading(m.force.reshape(gshp), m.torque.reshape(gshp)),
                TaxelReading(g.force.reshape(gshp), g.torque.reshape(gshp)),
            )
        v = jnp.concatenate([m.force, m.torque], axis=-1)
        v = imp.apply_crosstalk(v, jnp.ones((v.shape[0],), bool))
        chain, v = imp.apply_hysteresis(state.chain, v, inputs.dt)
        chain, v = imp.apply_hardware(chain, v, k_hw)
        chain, v = imp.apply_delay(chain, v, k_d)
        state = replace(state, chain=chain)
        H = imp.history_length
        shp = ((H,) if H else ()) + self.layout + (3,)
        return state, Reading(
            TaxelReading(v[..., :3].reshape(shp), v[..., 3:].reshape(shp)),
            TaxelReading(g.force.reshape(gshp), g.torque.reshape(gshp)),
        )


# =============================================================================== elastomer


def _layer_transfer(q: np.ndarray) -> np.ndarray:
    """Bonded incompressible layer ``S(q) = 2 q^2 / (sinh 2q - 2q)``, q clamped to [1e-3, 30];
    for ``2q < 1`` the denominator is its 5-term Taylor series (Genesis). Host numpy."""
    q = np.clip(q, 1e-3, 30.0)
    x = 2.0 * q
    taylor = sum(x ** (2 * m + 1) / math.factorial(2 * m + 1) for m in range(1, 6))
    den = np.where(x < 1.0, taylor, np.sinh(x) - x)
    return 2.0 * q * q / den


def elastomer_layer_kernel(L_y: int, L_x: int, s_v: float, s_u: float, h: float, dtype=None):
    """Real-space in-plane planes ``(G_u, G_v)`` ``[L_y, L_x]`` of the bonded layer of thickness
    ``h`` (m), built on the rfft2 half spectrum exactly as Genesis (section 7.3): rows
    ``k_v = 2 pi fftfreq(L_y, s_v)``, columns ``k_u = 2 pi rfftfreq(L_x, s_u)``,
    ``G^ = -i (k / |k|) S(|k| h)``, zero at k = 0, then ``irfft2``. Offset 0 at index [0, 0].
    Host-side numpy (static geometry).
    """
    ky = 2 * np.pi * np.fft.fftfreq(L_y, s_v)[:, None]
    kx = 2 * np.pi * np.fft.rfftfreq(L_x, s_u)[None, :]
    kmag = np.sqrt(kx * kx + ky * ky)
    kmag_c = np.maximum(kmag, np.finfo(float).eps)
    S = _layer_transfer(kmag * h)
    Gu = -1j * (kx / kmag_c) * S
    Gv = -1j * (ky / kmag_c) * S
    Gu[0, 0] = 0.0
    Gv[0, 0] = 0.0
    gu = np.fft.irfft2(Gu, s=(L_y, L_x))
    gv = np.fft.irfft2(Gv, s=(L_y, L_x))
    return gu, gv


@pytree_dataclass
class ElastomerTaxel:
    """Marker displacement per probe (m), HydroShear-style (Dang et al., RSS 2026,
    arXiv 2603.00446), with Genesis 1.4.5's compressibility and bonded-layer options.

    Per probe: indentation ``H = max(0, -min sd)`` of the tracked bodies at the marker; a
    dilation field (sum over indented probes ``j`` of a Gaussian ``exp(-lambda_d r^2)`` of the
    tangent-plane offset, times ``H_j`` times the offset, plus the normal bulge
    ``H_j^normal_exponent``) and a shear field from anchored tracked points (their tangential
    displacement since anchoring, weighted by ``exp(-lambda_s rho_t^2)`` and their depth in the
    elastomer). Output ``[*layout, 3]`` in the sensor link frame; fillers (radius 0) read 0.

    Paths: regular grids ``(ny, nx, 3)`` with ``nx, ny >= 2`` use FFT convolutions (zero padded
    to ``fft_size``, default the next power of two >= 2n - 1, so no wrap-around) with the grid's
    averaged tangents and mean normal; other layouts the direct sum. On a regular grid both give
    the same result (the bonded layer excepted: the direct path approximates it by the
    regularised 1/r kernel, as Genesis).

    Shear needs the sensor's own surface: ``elastomer_shapes`` (shapes whose ``T_body_shape`` is
    their pose in the **sensor link frame**). A tracked point anchors when its signed distance
    to that surface drops below ``-contact_threshold`` and releases above ``-release_threshold``
    or when it leaves the surface shapes' boxes (Genesis's AABB rule). The anchor state lives in
    :class:`PointCloudState`.

    Measured branch: hysteresis, then ``x probe_gain``, then the hardware chain.
    """

    probe_local_pos: Array
    track_points: TrackedPoints
    elastomer_shapes: tuple = ()
    probe_radius: Array = 0.01
    probe_local_normal: Array = (0.0, 0.0, 1.0)
    lambda_d: Array = 700.0
    lambda_s: Array = 300.0
    dilate_scale: Array = 1.0
    shear_scale: Array = 1.0
    normal_exponent: Array = 2.0
    contact_threshold: Array = 1e-5
    release_threshold: Array = -1e-4
    probe_gain: Array = 1.0
    compressibility: float = static_field(1.0)
    elastomer_thickness: float = static_field(0.0)
    fft_size: tuple | None = static_field(None)
    use_fft: bool | None = static_field(None)
    probe_gain_resample_range: tuple | None = static_field(None)
    imperfections: Imperfections | None = None
    layout: tuple = static_field(())
    grid_frame: tuple | None = static_field(None)  # (t_u, t_v, n_bar, s_u, s_v) for FFT
    dilation_reg: float = static_field(0.0)
    shear_on: bool = static_field(True)

    def __post_init__(self):
        name = "ElastomerTaxel"
        flat, layout = prep_layout(name, self.probe_local_pos)
        n = flat.shape[0]
        _common_post(self, name, allow_crosstalk=False)
        nrm = _prep_normals(name, self.probe_local_normal, n)
        r = _per_probe(f"{name}.probe_radius", self.probe_radius, n)
        if not np.any(r > 0):
            raise ValueError(f"{name}.probe_radius: every probe is a filler (radius 0)")
        c = float(self.compressibility)
        if not 0.0 <= c <= 1.0:
            raise ValueError(f"{name}.compressibility: expected a value in [0, 1], got {c}")
        h = float(self.elastomer_thickness)
        if not h >= 0:
            raise ValueError(f"{name}.elastomer_thickness: expected >= 0, got {h}")
        dt = jnp.result_type(float)
        for f in ("lambda_d", "lambda_s", "dilate_scale", "shear_scale"):
            object.__setattr__(self, f, _scalar(f"{name}.{f}", getattr(self, f), 0))
        object.__setattr__(
            self, "normal_exponent", _scalar(f"{name}.normal_exponent", self.normal_exponent, 1)
        )
        ct = float(_scalar(f"{name}.contact_threshold", self.contact_threshold))
        rt = float(_scalar(f"{name}.release_threshold", self.release_threshold))
        if rt > ct:
            raise ValueError(
                f"{name}.release_threshold: expected <= contact_threshold ({ct}), got {rt}"
            )
        object.__setattr__(self, "contact_threshold", jnp.asarray(ct, dt))
        object.__setattr__(self, "release_threshold", jnp.asarray(rt, dt))
        shapes = (
            tuple(self.elastomer_shapes)
            if isinstance(self.elastomer_shapes, (list, tuple))
            else (self.elastomer_shapes,)
        )
        for i, s in enumerate(shapes):
            if not hasattr(s, "sdf_local"):
                raise TypeError(f"{name}.elastomer_shapes[{i}]: expected a shape")
        shear_on = float(self.shear_scale) > 0
        if shear_on and not shapes:
            raise ValueError(
                f"{name}.elastomer_shapes: shear (shear_scale > 0) needs the sensor's own "
                "surface shapes (link frame); pass them or set shear_scale=0"
            )
        grid = len(layout) == 2 and layout[0] >= 2 and layout[1] >= 2
        use_fft = grid if self.use_fft is None else bool(self.use_fft)
        if use_fft and not grid:
            raise ValueError(
                f"{name}.use_fft: the FFT path needs a (ny, nx, 3) grid with nx, ny >= 2"
            )
        frame = None
        if use_fft:
            s_v, s_u, t_u, t_v = grid_metadata(flat.reshape(layout + (3,)))
            # averaged spacings in float64 for the kernels (float32 only fixes integer radii)
            g = flat.reshape(layout + (3,))
            du = (g[:, 1:] - g[:, :-1]).reshape(-1, 3).mean(0)
            dv = (g[1:] - g[:-1]).reshape(-1, 3).mean(0)
            s_u, s_v = float(np.linalg.norm(du)), float(np.linalg.norm(dv))
            if s_u < 1e-12 or s_v < 1e-12:
                raise ValueError(f"{name}.probe_local_pos: degenerate grid spacing")
            t_u, t_v = du / s_u, dv / s_v
            nb = nrm.mean(0)
            nb = nb / np.linalg.norm(nb) if np.linalg.norm(nb) > 1e-12 else nrm[0]
            fs = self.fft_size
            if fs is None:
                fs = tuple(1 << (2 * k - 2).bit_length() for k in layout)
            fs = tuple(int(v) for v in fs)
            if len(fs) != 2 or fs[0] < 2 * layout[0] - 1 or fs[1] < 2 * layout[1] - 1:
                raise ValueError(
                    f"{name}.fft_size: expected (L_y, L_x) >= (2 ny - 1, 2 nx - 1), got {fs}"
                )
            frame = (tuple(t_u), tuple(t_v), tuple(nb), s_u, s_v, fs)
            reg = h if h > 0 else 0.5 * (s_u + s_v)
        else:
            reg = h
            if reg <= 0:
                ext = np.sort(flat.max(0) - flat.min(0))[::-1]
                A = ext[0] * ext[1] if ext[1] >= np.finfo(float).eps else ext[0] ** 2
                reg = math.sqrt(max(A, np.finfo(float).eps) / n)
        object.__setattr__(self, "probe_radius", jnp.asarray(r, dt))
        object.__setattr__(self, "probe_local_normal", jnp.asarray(nrm, dt))
        object.__setattr__(self, "elastomer_shapes", shapes)
        object.__setattr__(self, "compressibility", c)
        object.__setattr__(self, "elastomer_thickness", h)
        object.__setattr__(self, "use_fft", use_fft)
        object.__setattr__(self, "grid_frame", frame)
        object.__setattr__(self, "dilation_reg", float(reg))
        object.__setattr__(self, "shear_on", shear_on)

    @property
    def n_probes(self) -> int:
        return self.probe_local_pos.shape[0]

    def init_state(self, key=None) -> PointCloudState:
        """Per-episode state (a reset): no anchors, zeroed chain, gains/dead taxels from key."""
        return _init_pc_state(self, key, 3, self.track_points.n_points)

    # ------------------------------------------------------------------ depth and dilation

    def depths(self, inputs: SensorInputs) -> Array:
        """Indentation ``H [N]`` (m): how far a tracked surface has passed each marker."""
        check_inputs_trace(inputs)
        T = inputs.T_world_link
        q = inputs.bodies.query_in_frame(T, self.probe_local_pos.astype(T.dtype), inputs.body_mask)
        sd_min = jnp.min(q.sd, axis=0)
        H = jnp.maximum(-sd_min, 0.0)
        return jnp.where(self.probe_radius > 0, H, 0.0)

    def _direct(self, H: Array) -> Array:
        x = self.probe_local_pos.astype(H.dtype)
        n = self.probe_local_normal.astype(H.dtype)
        d = x[:, None] - x[None]  # target i - source j
        Delta = d - n[:, None] * dot(d, n[:, None], keepdims=True)
        r2 = jnp.sum(Delta * Delta, -1)
        g = jnp.exp(-self.lambda_d * r2)
        c, eps_r = self.compressibility, self.dilation_reg
        Hj = H[None, :]
        if c >= 1:
            w = Hj * g
        else:
            inv = 1.0 / (r2 + eps_r**2)
            if c <= 0:
                w = Hj * inv
            else:
                Ng = math.exp(-0.5) / jnp.sqrt(2.0 * self.lambda_d)
                Ni = 1.0 / (2.0 * eps_r)
                w = Hj * (c * g / Ng + (1.0 - c) * inv / Ni)
        Hp = safe_pow(H, self.normal_exponent)
        u = jnp.sum(w[..., None] * Delta, axis=1) + n * jnp.sum(Hp[None, :] * g, axis=1)[:, None]
        return self.dilate_scale * u

    def _fft_kernels(self, dtype):
        t_u, t_v, nb, s_u, s_v, (Ly, Lx) = self.grid_frame
        a = (jnp.arange(Lx) - Lx // 2).astype(dtype) * s_u
        b = (jnp.arange(Ly) - Ly // 2).astype(dtype) * s_v
        a = jnp.fft.ifftshift(a)[None, :]
        b = jnp.fft.ifftshift(b)[:, None]
        r2 = a * a + b * b
        g = jnp.exp(-self.lambda_d * r2)
        c, h, eps_r = self.compressibility, self.elastomer_thickness, self.dilation_reg
        Ku, Kv = a * g, b * g
        if c < 1:
            if h > 0:
                gu, gv = elastomer_layer_kernel(Ly, Lx, s_v, s_u, h)
                Gu, Gv = jnp.asarray(gu, dtype), jnp.asarray(gv, dtype)
                Ni = float(np.max(np.sqrt(gu * gu + gv * gv)))
            else:
                Gu = a / (r2 + eps_r**2)
                Gv = b / (r2 + eps_r**2)
                Ni = 1.0 / (2.0 * eps_r)
            if c <= 0:
                Ku, Kv = Gu, Gv
            else:
                Ng = math.exp(-0.5) / jnp.sqrt(2.0 * self.lambda_d)
                Ku = c * Ku / Ng + (1.0 - c) * Gu / Ni
                Kv = c * Kv / Ng + (1.0 - c) * Gv / Ni
        return Ku, Kv, g

    def _fft(self, H: Array) -> Array:
        ny, nx = self.layout
        t_u, t_v, nb, s_u, s_v, (Ly, Lx) = self.grid_frame
        dtype = H.dtype
        Ku, Kv, Kn = self._fft_kernels(dtype)
        Hg = H.reshape(ny, nx)
        Hp = safe_pow(Hg, self.normal_exponent)
        fH = jnp.fft.rfft2(Hg, s=(Ly, Lx))
        fHp = jnp.fft.rfft2(Hp, s=(Ly, Lx))

        def conv(fx, K):
            return jnp.fft.irfft2(fx * jnp.fft.rfft2(K), s=(Ly, Lx))[:ny, :nx]

        Du, Dv, Dn = conv(fH, Ku), conv(fH, Kv), conv(fHp, Kn)
        tu, tv, nn = (jnp.asarray(v, dtype) for v in (t_u, t_v, nb))
        u = (
            Du[..., None] * tu[None, None]
            + Dv[..., None] * tv[None, None]
            + Dn[..., None] * nn[None, None]
        )
        u = self.dilate_scale * u.reshape(-1, 3)
        return jnp.where((self.probe_radius > 0)[:, None], u, 0.0)

    def dilation(self, H: Array) -> Array:
        """Dilation field ``[N, 3]`` (link frame) of indentations ``H [N]`` (FFT or direct)."""
        if self.use_fft:
            return self._fft(H)
        return jnp.where((self.probe_radius > 0)[:, None], self._direct(H), 0.0)

    # ------------------------------------------------------------------ shear

    def _surface_sd(self, y: Array) -> Array:
        """Signed distance ``[M]`` of link-frame points to the elastomer surface, ``1e6`` outside
        every shape's (closed) box, as Genesis's AABB skip."""
        sd_min = jnp.full(y.shape[:1], 1e6, y.dtype)
        for s in self.elastomer_shapes:
            T = s.T_body_shape.astype(y.dtype)
            R = _pose.quat_to_matrix(T[3:])
            p = _pose.matrix_apply(R.T, -(R.T @ T[:3]), y)
            lo, hi = s.aabb_local()
            lo = jnp.asarray(lo, y.dtype)[None]
            hi = jnp.asarray(hi, y.dtype)[None]
            inside = jnp.all((p >= lo) & (p <= hi), -1)
            sd, _ = s.sdf_local(p)
            sd_min = jnp.minimum(sd_min, jnp.where(inside, sd, 1e6))
        return sd_min

    def shear(self, state: PointCloudState, inputs: SensorInputs):
        """New anchors and the shear field ``[N, 3]`` (link frame) from the tracked points."""
        T = inputs.T_world_link
        dtype = T.dtype
        pts, _, _, msk = self.track_points.world(inputs, dtype)
        R = _pose.quat_to_matrix(T[3:])
        y = _pose.matrix_apply(R.T, -(R.T @ T[:3]), pts)  # [M, 3] link frame
        sd = jnp.where(msk, self._surface_sd(y), 1e6)
        D = jnp.maximum(-sd, 0.0)
        release = sd > -self.release_threshold
        enter = (~state.anchored) & (sd < -self.contact_threshold)
        anchored = jnp.where(release, False, state.anchored | enter)
        entry = jnp.where(release[:, None], 0.0, jnp.where(enter[:, None], y, state.anchor_entry))
        eps = _eps(dtype)
        x = self.probe_local_pos.astype(dtype)
        n = self.probe_local_normal.astype(dtype)
        delta = (y - entry)[None]  # [1, M, 3]
        dt_ = delta - n[:, None] * dot(delta, n[:, None], keepdims=True)  # [N, M, 3]
        rho = x[:, None] - y[None]
        rho_t = rho - n[:, None] * dot(rho, n[:, None], keepdims=True)
        wgt = D[None] * jnp.exp(-self.lambda_s * jnp.sum(rho_t * rho_t, -1))
        ok = (anchored & (D > eps))[None] & (jnp.sum(dt_ * dt_, -1) > eps * eps)
        u = self.shear_scale * jnp.sum(jnp.where(ok, wgt, 0.0)[..., None] * dt_, axis=1)
        u = jnp.where((self.probe_radius > 0)[:, None], u, 0.0)
        return replace(state, anchored=anchored, anchor_entry=entry), u

    def displacement(self, state: PointCloudState, inputs: SensorInputs):
        """Ground-truth marker displacement ``[N, 3]`` (m, link frame) and the new state."""
        H = self.depths(inputs)
        u = self.dilation(H)
        if self.shear_on:
            state, us = self.shear(state, inputs)
            u = u + us
        return state, u

    def step(self, state: PointCloudState, inputs: SensorInputs, key=None):
        """One reading ``[*layout, 3]`` (m, link frame) per branch."""
        _, k_hw, k_d = split3(key)
        state, u = self.displacement(state, inputs)
        imp = self.imperfections
        chain, v = imp.apply_hysteresis(state.chain, u, inputs.dt)
        v = v * state.probe_gain[:, None]
        chain, v = imp.apply_hardware(chain, v, k_hw)
        chain, v = imp.apply_delay(chain, v, k_d)
        state = replace(state, chain=chain)
        H = imp.history_length
        shp = ((H,) if H else ()) + self.layout + (3,)
        return state, Reading(v.reshape(shp), u.reshape(self.layout + (3,)))
