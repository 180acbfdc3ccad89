"""ProximityTaxel: force and torque from the tracked points inside each probe's sensing sphere.

Formulas, defaults and quirks follow Genesis World 1.4.5's ``ProximityTaxel``. The sensor is
not contact-gated: every body of ``inputs.bodies`` with ``inputs.body_mask`` True is tracked
(Genesis: the ``track_link_idx`` links), through a :class:`~difftaxel.sensors.TrackedPoints`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import channels_last, cross, dot, running_count, safe_norm, stack_rows
from .._numerics import eps as _eps
from .._pytree import derived_field, pytree_dataclass, replace, static_field
from ..crosstalk import grid_axes, grid_metadata
from ..geometry.planes import affine_planes
from ..imperfections import ChainState
from .base import (
    Reading,
    SensorInputs,
    TaxelReading,
    check_inputs_trace,
    check_length,
    check_per_probe,
    check_scalar,
    noised_radius,
    split3,
)
from .pair_bodies import body_groups, fold_motion, pair_sums_bodies
from .pair_windows import choose_window
from .pairs import block_shape, pair_sums
from .tracked import PointCloudSensor, pose_in_frame

Array = jax.Array

__all__ = ["ProximityState", "ProximityTaxel"]


@pytree_dataclass
class ProximityState:
    """Per-episode state of a ProximityTaxel (one environment).

    Attributes:
      probe_gain: ``[N]`` gain this episode.
      chain: imperfection-chain state (``[6, N]``: force then torque).
      candidate_overflow: ``[]`` bool, sticky since the reset: True once a step found more
        tracked points near the probes than ``max_candidates`` holds (that step's readings
        missed the points beyond the capacity; rebuild with a larger one). Always False without
        a capacity.
    """

    probe_gain: Array
    chain: ChainState
    candidate_overflow: Array


def spatial_order(points: np.ndarray, segments: tuple, block: int = 8) -> tuple:
    """A permutation of ``points [M, 3]`` that keeps each segment's points in place as a
    group and orders them so that consecutive blocks (of the size the pair sums cut: about
    ``block``) are compact clusters: each group is split at the median of its longest extent
    (at a multiple of the block size), recursively, down to single blocks.

    The pair sums visit blocks of consecutive points and skip a block far from the probes,
    and a compact block reaches few probes. A permutation of a sum's terms changes its value
    only by rounding."""
    pts = np.asarray(points, np.float64)
    order, start = [], 0
    for _, c in segments:
        if c:
            C = block_shape(c, block)[1]  # the blocks the sums cut
            todo = [np.arange(start, start + c)]
            while todo:
                ix = todo.pop()
                if len(ix) <= C:
                    order.extend(ix.tolist())
                    continue
                q = pts[ix]
                axis = int(np.argmax(q.max(0) - q.min(0)))
                ix = ix[np.argsort(q[:, axis], kind="stable")]
                h = -(-(len(ix) // 2) // C) * C
                todo += [ix[h:], ix[:h]]  # the lower half is taken first
        start += c
    return tuple(order)


@pytree_dataclass(kw_only=True)
class ProximityTaxel(PointCloudSensor):
    """Force and torque per probe from the tracked points inside its sensing sphere.

    Per probe at position ``q`` with unit normal ``a = n / (|n| + eps)`` (both in the sensor
    link frame), every tracked point at distance ``0 < d <= R`` contributes ``P = R - d``:
    ``S = sum P``, ``V = sum P v_t`` (tangential velocity of the point relative to the taxel),
    ``W = sum P (w_obj - w_link) . a``. With ``kappa = density_scalar / max(1, M)``:

    * ``F = stiffness kappa S a + shear_coupling kappa V`` (along **+ the probe normal**, out
      of the sensor, unlike KinematicTaxel);
    * ``T = q x F - twist_scalar (W / S) a`` (about the link origin; the twist term is 0
      when ``S <= eps``).

    Readings are in the sensor link frame (``TaxelReading`` of ``[*layout, 3]`` arrays):
    Genesis computes them in the world and rotates them back, the same values up to rounding;
    the link frame, where the probes sit still, needs no per-environment probe positions,
    normals or rotations. The measured branch uses the noised radius and multiplies ``S`` and
    ``V`` by ``probe_gain``. The loop over points takes ``point_chunk`` points per iteration
    (static, unrolled, default 8): the forward pass holds ``O(N)`` accumulators per
    environment whatever the number of points, the reverse pass stores ``O(N)`` per point; a
    larger block compiles longer for no faster step.

    By default (``max_candidates=None``) the readings are those of every tracked point
    against every probe, computed without a capacity: each body's points are kept in a
    spatial order (:func:`spatial_order`, the derived ``point_order``) and a step visits only
    the blocks of ``point_chunk`` consecutive points whose body-frame box meets the probes'
    box grown by the largest radius (:func:`~difftaxel.sensors.pairs.pair_sums_rigid`;
    derivatives from the exhaustive pass). The sums run in the link frame. On a grid layout
    each such block takes only a window of the probes it can reach (the derived
    ``pair_window``, :func:`~difftaxel.sensors.pair_windows.choose_window`; None where windows
    would not pay), with the same readings. Several tracked bodies go through one scan per
    group of bodies of similar size (:mod:`difftaxel.sensors.pair_bodies`): the program does
    not grow with the bodies tracked.

    ``max_candidates`` (static int) turns on a hand-tuned point pre-selection instead, the
    capacity-and-overflow pattern of JAX-MD's neighbour lists: each step keeps only the
    tracked points inside the probes' axis-aligned bounding box (link frame) grown by the
    sensing radius, the first ``max_candidates`` of them in point order, and evaluates those
    against every probe. The readings are exactly the unselected ones whenever at most
    ``max_candidates`` points are inside; a step with more sets ``state.candidate_overflow``
    (sticky until the next reset) and misses the rest, so check it after a rollout and
    rebuild with a larger capacity.

    Stages: ``"radius_noise"`` (``probe_radius_noise``: a second, noised radius branch) and
    ``"shear"`` (``shear_coupling``: the tangential-velocity sums). The imperfections may
    include crosstalk (grid layouts; the grid normal is the mean probe normal).

    ``smoothing`` (m, default 0 = exact) weights the twist term by ``S / (S + smoothing^2)``
    instead of switching it on with the first point.
    """

    probe_radius_noise: Array = 0.0
    stiffness: Array = 100.0
    shear_coupling: Array = 0.0
    twist_scalar: Array = 1.0
    density_scalar: Array = 100.0
    point_chunk: int = static_field(8)
    max_candidates: int | None = static_field(None)
    smoothing: float = static_field(0.0)
    crosstalk_support: tuple | None = derived_field(None)
    point_order: tuple | None = derived_field(None)
    pair_window: tuple | None = derived_field(None)

    STAGES = ("radius_noise", "shear")
    N_CHANNELS = 6
    CROSSTALK = True
    _STAGE_OF = {"probe_radius_noise": "radius_noise", "shear_coupling": "shear"}

    def _check_field(self, name, v):
        o = "ProximityTaxel"
        if name == "probe_radius":
            return check_per_probe(o, name, v, self.layout, strict=True)
        scalars = ("probe_radius_noise", "stiffness", "shear_coupling", "twist_scalar")
        if name in (*scalars, "density_scalar"):
            return check_scalar(o, name, v, lo=0)
        if name == "point_chunk":
            if isinstance(v, bool) or int(v) != v or int(v) < 1:
                raise ValueError(f"{o}.point_chunk: expected an int >= 1, got {v!r}")
            return int(v)
        if name == "max_candidates":
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{o}.max_candidates: expected None or an int >= 1, got {v!r}")
            return int(v)
        if name == "smoothing":
            return check_length(o, name, v)
        return super()._check_field(name, v)

    def _stage_values(self):
        return {
            "radius_noise": float(self.probe_radius_noise) > 0,
            "shear": float(self.shear_coupling) > 0,
        }

    def _derive(self):
        d = super()._derive()
        if self.imperfections.has_crosstalk:
            s_v, s_u, _, _ = grid_metadata(np.asarray(self.probe_local_pos))
            if s_u < 1e-12 or s_v < 1e-12:
                raise ValueError(
                    "ProximityTaxel.probe_local_pos: degenerate grid spacing for crosstalk"
                )
            d["crosstalk_support"] = self.imperfections.crosstalk_support((s_v, s_u))
        order = spatial_order(
            np.asarray(self.track_points.points), self.track_points.segments, self.point_chunk
        )
        d["point_order"] = order
        d["pair_window"] = None
        if len(self.layout) == 2:
            d["pair_window"] = choose_window(
                np.asarray(self.probe_local_pos, np.float64).reshape(self.layout + (3,)),
                float(np.max(np.asarray(self.probe_radius))),
                np.asarray(self.track_points.points)[np.asarray(order)],
                self.track_points.segments,
                self.point_chunk,
            )
        return d

    def init_state(self, key=None) -> ProximityState:
        """Per-episode state (a reset): gains and dead taxels drawn from ``key`` if configured."""
        g, chain = self.reset_gain_and_chain(key)
        return ProximityState(probe_gain=g, chain=chain, candidate_overflow=jnp.zeros((), bool))

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
            R_lb, t_lb = pose_in_frame(T, sg(bodies.poses[b].astype(dtype)))
            seg = affine_planes(R_lb, t_lb, *(q[start : start + c] for q in planes))
            for i in range(3):  # link frame
                local[i].append(seg[i])
            start += c
        local = [jnp.concatenate(q) for q in local]  # [M] each
        msk = jnp.concatenate([jnp.broadcast_to(body_mask[b], (c,)) for b, c in track.segments])
        q = sg(self.flat_positions(dtype))
        rmax = sg(jnp.max(radii))
        # a relative margin keeps points whose world-frame distance rounds to <= R inside
        scale = jnp.max(jnp.abs(q)) + jnp.max(jnp.abs(T[:3])) + rmax
        margin = rmax * (1.0 + 1e-3) + 64 * _eps(dtype) * scale
        lo = jnp.min(q, 0) - margin  # [3]
        hi = jnp.max(q, 0) + margin
        inside = msk
        for i in range(3):
            inside = inside & (local[i] >= lo[i]) & (local[i] <= hi[i])
        cum = running_count(inside)
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
        """The tracked points as groups ``(kind, body, data, mask)`` in the sensor link frame,
        and the overflow flag.

        * ``"rigid"`` (exhaustive: one group for every segment; body None): ``data = (poses
          [G, 7], twists [G, 6], points)``, each segment's body world pose and twist, and the
          points (three planes, body frames, each segment in a spatial order); ``mask [G]``
          the segments' bodies' flags.
        * ``"points"`` (``max_candidates``, one body): ``data`` = the selected candidates'
          link-frame positions (three planes); ``mask [K]``.
        * ``"mixed"`` (``max_candidates``, several bodies; body None): ``data = (positions,
          velocities, spins)`` of the candidates (link frame), each moved by its own body."""
        bodies = inputs.bodies
        segs = self.track_points.segments
        self.track_points.check_bodies(bodies)
        body_mask = jnp.asarray(inputs.body_mask)
        T = inputs.T_world_link.astype(dtype)
        R_l = _pose.quat_to_matrix(T[3:])

        use_cand = self.max_candidates is not None
        if use_cand and self.max_candidates < self.track_points.n_points:
            pb, seg_id, valid, overflow = self._candidates(inputs, radii, dtype)
            if seg_id is None:
                b = segs[0][0]
                R_lb, t_lb = pose_in_frame(T, bodies.poses[b].astype(dtype))
                pts = affine_planes(R_lb, t_lb, *pb)
                return [("points", b, pts, valid & body_mask[b])], overflow
            # several bodies: each candidate moved by its own body (selects over segments)
            mot, m = None, jnp.zeros_like(valid)
            for j, (b, _) in enumerate(segs):
                on = seg_id == j
                # the rigid motion in the link frame, from the same rotation as the exhaustive
                # pass (pose_in_frame), so that both round alike
                R_lb, t_lb = pose_in_frame(T, bodies.poses[b].astype(dtype))
                tw = bodies.twists[b].astype(dtype)
                v_b, w_b = R_l.T @ tw[:3], R_l.T @ tw[3:]
                x = affine_planes(R_lb, t_lb, *pb)
                r = [x[i] - t_lb[i] for i in range(3)]
                new = (
                    x,
                    (
                        v_b[0] + w_b[1] * r[2] - w_b[2] * r[1],
                        v_b[1] + w_b[2] * r[0] - w_b[0] * r[2],
                        v_b[2] + w_b[0] * r[1] - w_b[1] * r[0],
                    ),
                    tuple(jnp.broadcast_to(w_b[i], valid.shape) for i in range(3)),
                )
                mot = new if mot is None else jax.tree.map(
                    lambda n, o, on=on: jnp.where(on, n, o), new, mot
                )  # fmt: skip
                m = m | (valid & on & body_mask[b])
            return [("mixed", None, mot, m)], overflow
        pts = self.track_points.points.astype(dtype)
        if self.point_order is not None:  # each body's points in a spatial order
            pts = pts[np.asarray(self.point_order)]
        bs = np.array([b for b, _ in segs])
        # each segment's body pose and twist (world); the sums move them into the link frame
        data = (
            bodies.poses[bs].astype(dtype),
            bodies.twists[bs].astype(dtype),
            (pts[:, 0], pts[:, 1], pts[:, 2]),
        )
        return [("rigid", None, data, body_mask[bs])], jnp.zeros((), bool)

    def _accumulate(self, inputs: SensorInputs, radii: Array):
        """``S [B, N]``, ``V [B, N, 3]``, ``W [B, N]`` for each radius branch ``radii [B, N]``,
        the unit probe normals ``a [N, 3]``, and whether the candidate capacity overflowed
        (``[]`` bool). Vectors are in the sensor link frame, where the probes sit still: the
        sums need no per-environment probe positions, normals or output rotations.

        A tracked body moves rigidly, so its points' velocities are affine in their positions:
        per body ``b`` (origin ``x_b``, twist ``(v_b, w_b)``), ``sum P v = v_b S_b + w_b x
        (D_b + (p - x_b) S_b)`` and ``sum P w = w_b S_b`` with ``S_b = sum P`` and ``D_b =
        sum P (x - p)`` over its points. So a group of one body's points only sums ``P`` and
        ``P (x - p)`` (:mod:`difftaxel.sensors.pairs`; with ``shear_coupling == 0`` only
        ``P``). The candidates of several bodies go through one loop that sums ``P`` times
        each point's own velocity and spin (7 sums, or 4 without shear) instead of one loop
        per body."""
        T = inputs.T_world_link
        dtype = T.dtype
        R = _pose.quat_to_matrix(T[3:])
        q = self.flat_positions(dtype)  # [N, 3], link frame
        n = self.flat_normals(dtype)
        a = n / (safe_norm(n, keepdims=True) + _eps(dtype))
        tl = inputs.twist_link.astype(dtype)
        v_l, w_l = R.T @ tl[:3], R.T @ tl[3:]  # the link's twist in its own frame
        v_tax = v_l[None] + cross(w_l[None], q)  # [N, 3]
        groups, overflow = self._groups(inputs, radii, dtype)
        pl = (q[:, 0], q[:, 1], q[:, 2])
        z = jnp.zeros(radii.shape, dtype)
        S, Pw, Pv = z, [z] * 3, [z] * 3
        chunk = int(self.point_chunk)
        shear = self.stage_on("shear")
        for kind, b, data, m in groups:  # each branch: sum P, sum P w, sum P v (or None)
            if kind == "rigid":  # every segment's points, each moved by its own body
                P_b, tw_b, pts = data
                grouping = body_groups(self.track_points.segments, chunk)
                Sb, Fw, Fv = pair_sums_bodies(
                    pl, radii, T, P_b, tw_b, pts, m, grouping, shear, self.pair_window
                )
            elif kind == "mixed":  # candidates of several bodies: per-point velocity and spin
                x, v, w = data
                Sb, _, F = pair_sums(pl, radii, x, m, chunk, False, (*v, *w) if shear else w)
                Fw, Fv = F[-3:], F[:3] if shear else None
            else:  # one body's candidates, folded with that body's motion
                Sb, D, _ = pair_sums(pl, radii, data, m, chunk, shear)
                tw = inputs.bodies.twists[b].astype(dtype)
                x_b = R.T @ (inputs.bodies.poses[b, :3].astype(dtype) - T[:3])
                mot = (R.T @ tw[:3], R.T @ tw[3:], x_b)
                _, Fw, Fv = fold_motion((z, (z,) * 3, (z,) * 3 if shear else None), Sb, D, pl, mot)
            S = S + Sb
            for i in range(3):
                Pw[i] = Pw[i] + Fw[i]
                if shear:
                    Pv[i] = Pv[i] + Fv[i]
        Pv, Pw = jnp.stack(Pv, -1), jnp.stack(Pw, -1)
        # V = sum P (v_pt - v_tax)_t ; W = sum P (w_pt - w_link) . a
        Vr = Pv - S[..., None] * v_tax[None]
        V = Vr - a[None] * dot(Vr, a[None], keepdims=True)
        W = dot(Pw, a[None]) - S * dot(w_l[None], a)[None]
        return S, V, W, a, overflow

    def forces(self, state: ProximityState, inputs: SensorInputs, key=None):
        """Flat ``(measured, ground_truth)`` :class:`TaxelReading` with ``[N, 3]`` arrays,
        before the imperfection chain."""
        m, g, _ = self._forces(state, inputs, key)
        return tuple(TaxelReading(r.force.T, r.torque.T) for r in (m, g))

    def _forces(self, state: ProximityState, inputs: SensorInputs, key=None):
        check_inputs_trace(inputs)
        dtype = inputs.T_world_link.dtype
        r = self.per_probe(self.probe_radius, dtype)
        if self.stage_on("radius_noise"):  # static: a second radius branch only when it can differ
            r_m = noised_radius(r, self.probe_radius_noise, key)
            S, V, W, a, over = self._accumulate(inputs, jnp.stack([r, r_m]))
        else:
            S, V, W, a, over = self._accumulate(inputs, r[None])
            S, V, W = (jnp.concatenate([x, x]) for x in (S, V, W))
        eps = _eps(dtype)
        kappa = self.density_scalar / max(1, self.track_points.n_points)
        q = self.flat_positions(dtype).T  # [3, N]
        a = a.T
        out = []
        for b, gain in ((0, 1.0), (1, state.probe_gain)):
            Sb, Vb, Wb = S[b], V[b], W[b]
            pos = Sb > eps
            wbar = jnp.where(pos, Wb / jnp.where(pos, Sb, 1.0), 0.0)
            if self.smoothing > 0:
                wbar = Wb / (Sb + self.smoothing**2)
            if b:
                Sg, Vg = Sb * gain, Vb.T * gain[None]
            else:
                Sg, Vg = Sb, Vb.T
            F = self.stiffness * kappa * Sg[None] * a
            if self.stage_on("shear"):
                F = F + self.shear_coupling * kappa * Vg
            # about the link origin: (p - x_link) x F is q x F in the link frame
            tw = self.twist_scalar * wbar
            Tq = stack_rows(
                [
                    q[1] * F[2] - q[2] * F[1] - tw * a[0],
                    q[2] * F[0] - q[0] * F[2] - tw * a[1],
                    q[0] * F[1] - q[1] * F[0] - tw * a[2],
                ]
            )
            out.append(TaxelReading(F, Tq))
        # channels first, [3, N] (why: the readings leave as a transpose, see channels_last)
        return out[1], out[0], over

    def crosstalk_args(self, dtype):
        """The grid arguments of :meth:`Imperfections.apply_crosstalk`: active probes, grid
        shape, static support, traced spacings ``[2]`` and the mean probe normal ``[3]``."""
        s_v, s_u, _, _ = grid_axes(self.probe_local_pos.astype(dtype))
        n = jnp.mean(self.flat_normals(dtype), 0)
        n = n / jnp.sqrt(jnp.sum(n * n))
        active = jnp.ones((self.n_probes,), bool)
        return active, self.layout, self.crosstalk_support, jnp.stack([s_v, s_u]), n

    def step(self, state: ProximityState, inputs: SensorInputs, key=None):
        """One reading: force (N) and torque (N*m), ``[*layout, 3]``, sensor link frame.

        With ``max_candidates`` set, ``state.candidate_overflow`` comes back True (and stays
        so until the next reset) on a step with more candidate points than the capacity.
        """
        k_r, k_hw, k_d = split3(key)
        m, g, over = self._forces(state, inputs, k_r)
        state = replace(state, candidate_overflow=state.candidate_overflow | over)
        imp = self.imperfections
        gshp = self.layout + (3,)
        truth = TaxelReading(channels_last(g.force, gshp), channels_last(g.torque, gshp))
        if imp.is_identity:  # no chain: no [6, N] round trip (a copy of both readings)
            return state, Reading(
                TaxelReading(channels_last(m.force, gshp), channels_last(m.torque, gshp)), truth
            )
        v = jnp.concatenate([m.force, m.torque], axis=0)  # [6, N]
        xt = self.crosstalk_args(v.dtype) if imp.has_crosstalk else None
        chain, v = imp.run(state.chain, v, inputs.dt, k_hw, k_d, crosstalk=xt)
        state = replace(state, chain=chain)
        shp = ((imp.history_length,) if imp.history_length else ()) + gshp
        F, T = channels_last(v[..., :3, :], shp), channels_last(v[..., 3:, :], shp)
        return state, Reading(TaxelReading(F, T), truth)
