"""Signed-distance contact sensors: ContactDepthProbe, ContactProbe, KinematicTaxel.

Formulas, defaults and sign conventions follow Genesis World 1.4.5's sensors of these names;
departures (geometric gating, no AABB pre-cull, smooth options) are listed in each class's
docstring.

Options shared by the three (besides :class:`~difftaxel.sensors.base.ProbeSensor`'s):

* ``probe_radius``: penetration is ``probe_radius - sd``, so a probe centred on a surface
  reads its full radius. ``0`` marks a filler probe (ContactProbe and KinematicTaxel only): it
  reads exactly zero / False.
* ``probe_radius_noise`` (m): the measured branch uses ``max(0, r + (2u - 1) noise)``, ``u``
  uniform, fresh per probe and step. Its stage is ``"radius_noise"``.
* ``probe_gain``: measured depth (ContactDepthProbe, ContactProbe) or measured penetration
  before the force model (KinematicTaxel) is multiplied by it.
* ``filter_link_idx``: indices of bodies (in :class:`~difftaxel.geometry.Bodies`) never queried.
* ``contact_depth_query``: ``"sdf"`` (every shape's signed distance, max penetration over
  shapes) or ``"raycast"`` (Genesis's nearest-surface semantics: the shape with the smallest
  ``|sd|`` decides, and a probe farther than ``max(r_gt, r_m)`` from every surface reads 0,
  so depth collapses to 0 once a probe centre is deeper than that; use
  ``TriangleMesh(sign="face")`` shapes for Genesis's face-normal sign).
* ``smoothing`` (m, default 0 = Genesis's exact semantics): replaces the onset clamp
  ``max(0, x)`` by ``smoothing * softplus(x / smoothing)`` and every hard contact test by a
  sigmoid of width ``smoothing``, so readings have gradients before contact (for calibration).
  Readings converge to the exact ones as ``smoothing -> 0`` (largest gap ``smoothing * log 2``
  in depth, at zero penetration).

* ``broad_phase``: ``"auto"`` (default), ``"links"`` or ``"off"``. ``"links"`` tests every
  shape once against a ball around the link's probes and evaluates only the shapes that may
  lie within reach of a probe (:mod:`difftaxel.geometry.broadphase`): readings and their
  derivatives equal the exhaustive pass's (``"off"``), and a step costs ``S`` one-point tests
  plus ``N`` evaluations per near shape instead of ``S x N``. The reach is the largest probe
  radius plus ``probe_radius_noise`` plus ``40 * smoothing`` (beyond it the softplus tail is
  below ``e^-40`` of ``smoothing``). ``"auto"`` is ``"links"`` for scenes of at least
  ``BROAD_PHASE_MIN_SHAPES`` shapes, where it is faster; the exhaustive pass otherwise.

Gating: every body in ``inputs.bodies`` with ``inputs.body_mask`` True and not in
``filter_link_idx`` is queried (Genesis only queries bodies its rigid solver reports in
contact with the sensor link; pass that contact list as ``body_mask`` for exact parity).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import (
    channels_last,
    compute_once,
    cross,
    matmul3,
    pinned_reshape,
    runtime_one,
    safe_pow,
    skew,
    stack_rows,
)
from .._numerics import eps as _eps
from .._pytree import derived_field, pytree_dataclass, static_field
from ..crosstalk import grid_axes, grid_metadata
from ..geometry import Planes, ShapeQuery
from ..geometry.bodies import shape_rows
from ..geometry.broadphase import grid_patches, nearest_surface
from ..geometry.planes import affine_planes
from ..imperfections import ChainState
from .base import (
    ProbeSensor,
    Reading,
    SensorInputs,
    TaxelReading,
    check_inputs_trace,
    check_length,
    check_scalar,
    clamp_depth,
    noised_radius,
    split3,
    step_gate,
)
from .winner import _select, _winner

Array = jax.Array

#: ``broad_phase="auto"`` uses the per-link broad phase from this many shapes in the scene
BROAD_PHASE_MIN_SHAPES = 8

__all__ = ["ContactDepthProbe", "ContactProbe", "ContactProbeState", "KinematicTaxel", "ProbeState"]


# ------------------------------------------------------------------------------- states


@pytree_dataclass
class ProbeState:
    """Per-episode state of a ContactDepthProbe or KinematicTaxel (one environment).

    Attributes:
      probe_gain: ``[N]`` gain this episode (drawn at reset if resampled).
      chain: imperfection-chain state (channels first: ``[1, N]`` depths, ``[6, N]`` force
        then torque).
    """

    probe_gain: Array
    chain: ChainState


@pytree_dataclass
class ContactProbeState:
    """Per-episode state of a ContactProbe (one environment).

    Attributes:
      probe_gain: ``[N]`` gain this episode.
      latch_measured: ``[N]`` Schmitt latch of the measured branch: bool, or a float in
        [0, 1] with smoothing.
      latch_ground_truth: ``[N]`` Schmitt latch of the ground-truth branch (same type).
      chain: imperfection-chain state (``[1, N]``).
    """

    probe_gain: Array
    latch_measured: Array
    latch_ground_truth: Array
    chain: ChainState


# ------------------------------------------------------------------------------- shared base


@pytree_dataclass(kw_only=True)
class _ContactSensor(ProbeSensor):
    """Options of the signed-distance sensors (see the module docstring)."""

    probe_radius_noise: Array = 0.0
    filter_link_idx: tuple = static_field(())
    contact_depth_query: str = static_field("sdf")
    smoothing: float = static_field(0.0)
    broad_phase: str = static_field("auto")

    STAGES = ("radius_noise",)
    _STAGE_OF = {"probe_radius_noise": "radius_noise"}
    FILLERS = True  # radius 0 allowed (a filler probe)

    def _check_field(self, name, v):
        o = type(self).__name__
        if name == "probe_radius":
            r = super()._check_field(name, v)
            rr = np.asarray(r)
            if self.FILLERS:
                if not np.any(rr > 0):
                    raise ValueError(
                        f"{o}.probe_radius: every probe is a filler (radius 0); at least one "
                        "probe needs a radius > 0"
                    )
            elif np.any(rr <= 0):
                raise ValueError(
                    f"{o}.probe_radius: expected > 0 for every probe (no fillers for this "
                    f"sensor), got min {rr.min()}"
                )
            return r
        if name == "probe_radius_noise":
            return check_scalar(o, name, v, lo=0)
        if name == "filter_link_idx":
            f = tuple(int(i) for i in v)
            if any(i < 0 for i in f):
                raise ValueError(f"{o}.filter_link_idx: expected body indices >= 0, got {f}")
            return f
        if name == "contact_depth_query":
            if v not in ("sdf", "raycast"):
                raise ValueError(f"{o}.contact_depth_query: expected 'sdf' or 'raycast', got {v!r}")
            return v
        if name == "smoothing":
            return check_length(o, name, v)
        if name == "broad_phase":
            if v not in ("auto", "links", "off"):
                raise ValueError(f"{o}.broad_phase: expected 'auto', 'links' or 'off', got {v!r}")
            return v
        return super()._check_field(name, v)

    def uses_broad_phase(self, bodies) -> bool:
        """Whether a step over ``bodies`` takes the per-link broad phase (static)."""
        if self.broad_phase == "auto":
            return len(bodies.shapes) >= BROAD_PHASE_MIN_SHAPES
        return self.broad_phase == "links"

    def _stage_values(self):
        return {"radius_noise": float(self.probe_radius_noise) > 0}

    def _radii(self, dtype, key):
        """``(r [N], r_m [N])``: ground-truth and measured (noised) radii."""
        r = self.per_probe(self.probe_radius, dtype)
        if not self.stage_on("radius_noise"):
            return r, r
        return r, noised_radius(r, self.probe_radius_noise, key)

    def _query(self, inputs: SensorInputs):
        """Link-frame probe planes ``[N]``, the query on them and the winning shape per probe.

        Exhaustive: every shape (:class:`~difftaxel.geometry.ShapeQuery` of ``[S, N]``, normals
        in the link frame) and ``None``. Broad phase: the nearest surface only, as a query of
        one "shape" ``[1, N]``, and the winning shape's index ``[N]``."""
        check_inputs_trace(inputs)
        T = inputs.T_world_link
        pos = Planes.from_array(self.flat_positions(T.dtype))
        bodies = inputs.bodies
        m = jnp.asarray(inputs.body_mask, bool)
        if self.filter_link_idx:
            keep = np.ones(m.shape[0], bool)
            keep[[i for i in self.filter_link_idx if i < m.shape[0]]] = False
            m = m & jnp.asarray(keep)
        if not self.uses_broad_phase(bodies):
            return pos, bodies.query(pos, m, frame=T), None
        on = shape_rows(m, bodies.shape_bodies)
        sd, n, k = nearest_surface(
            bodies,
            pos,
            T,
            shape_on=on,
            reach=self._reach(T.dtype),
            mode=self.contact_depth_query,
            groups=grid_patches(self.layout),
        )
        valid = jnp.broadcast_to(jnp.any(on), (1,) + sd.shape)
        q = ShapeQuery(sd=sd[None], normal=Planes(*(c[None] for c in n)), mask=valid)
        return pos, q, k

    def _reach(self, dtype):
        """``[]`` m: beyond this from every probe a shape changes no reading (the largest
        radius, its noise, and the smoothing tail to ``e^-40``)."""
        r = jnp.max(self.per_probe(self.probe_radius, dtype))
        if self.stage_on("radius_noise"):
            r = r + jnp.asarray(self.probe_radius_noise, dtype)
        return r + 40.0 * self.smoothing

    def _depth_branch(self, q, radius, active):
        pen_raw, _, valid = _winner(self.contact_depth_query, q, radius)
        d = clamp_depth(pen_raw, self.smoothing)
        return jnp.where(valid & active, d, 0.0)

    def depths(self, state, inputs: SensorInputs, key=None):
        """Flat raw ``(measured [N], ground_truth [N])`` depths (m): radius noise (from
        ``key``) and gain on the measured one, before the imperfection chain."""
        _, q, _ = self._query(inputs)
        r, r_m = self._radii(inputs.T_world_link.dtype, key)
        active = r > 0
        gt = self._depth_branch(q, r, active)
        m = self._depth_branch(q, r_m, active) * state.probe_gain
        return m, gt

    def _out_shape(self, tail=()):
        H = self.imperfections.history_length
        return ((H,) if H > 0 else ()) + self.layout + tail


# ------------------------------------------------------------------------------- sensors


@pytree_dataclass(kw_only=True)
class ContactDepthProbe(_ContactSensor):
    """Penetration depth per probe (m): ``max(0, probe_radius - min_g sd_g(p))``.

    Genesis 1.4.5 ``ContactDepthProbe``: radius must be > 0 (no fillers). The measured branch
    uses the noised radius and multiplies by ``probe_gain``; the ground truth uses neither.
    Stages: ``"radius_noise"``.

    ``step`` returns ``Reading(measured [*layout], ground_truth [*layout])`` (m).
    """

    FILLERS = False

    def init_state(self, key=None) -> ProbeState:
        """Per-episode state (a reset): gains resampled and dead taxels drawn from ``key`` if
        configured; zero hysteresis, random walk and delay ring."""
        g, chain = self.reset_gain_and_chain(key)
        return ProbeState(probe_gain=g, chain=chain)

    def step(self, state: ProbeState, inputs: SensorInputs, key=None):
        """One reading ``[*layout]`` (m) per branch (``[H, *layout]`` measured with history).

        ``key`` drives radius noise, white noise, random walk and jitter; ``None`` draws
        nothing (a noise-free step)."""
        k_r, k_hw, k_d = split3(key)
        m, gt = self.depths(state, inputs, k_r)
        chain, v = self.imperfections.run(state.chain, m[None], inputs.dt, k_hw, k_d)
        state = ProbeState(probe_gain=state.probe_gain, chain=chain)
        return state, Reading(pinned_reshape(v, self._out_shape()), pinned_reshape(gt, self.layout))


@pytree_dataclass(kw_only=True)
class ContactProbe(_ContactSensor):
    """Contact flag per probe with a Schmitt trigger on the penetration depth.

    ``latched_k = (d_k > contact_threshold) or (latched_{k-1} and d_k > release_threshold)``,
    strict comparisons, separately for the measured and ground-truth branches (Genesis 1.4.5;
    ``release_threshold=None`` means equal to ``contact_threshold``, i.e. a plain threshold;
    it may be negative). Fillers (radius 0) read False. Stages: ``"radius_noise"``.

    With ``smoothing > 0`` the comparisons become sigmoids of width ``smoothing`` (rescaled to
    read exactly 0 at zero depth, so far from contact the flags are exactly False) and the flags
    soft values in [0, 1] (float); otherwise ``step`` returns bool ``[*layout]`` arrays.
    """

    contact_threshold: Array = 1e-4
    release_threshold: Array | None = None

    def _check_field(self, name, v):
        if name == "contact_threshold":
            return check_scalar("ContactProbe", name, v)
        if name == "release_threshold":
            return None if v is None else check_scalar("ContactProbe", name, v)
        return super()._check_field(name, v)

    def _derive(self):
        if self.release_threshold is not None:
            ct, rt = float(self.contact_threshold), float(self.release_threshold)
            if rt > ct:
                raise ValueError(
                    f"ContactProbe.release_threshold: expected <= contact_threshold ({ct}), "
                    f"got {rt}"
                )
        return super()._derive()

    @property
    def release(self) -> Array:
        """The release threshold in use (``contact_threshold`` when None)."""
        return self.contact_threshold if self.release_threshold is None else self.release_threshold

    def init_state(self, key=None) -> ContactProbeState:
        """Per-episode state (a reset): open latches; gains and dead taxels from ``key``."""
        g, chain = self.reset_gain_and_chain(key)
        # exact latches are the readings themselves (bool): one array per branch and step
        z = jnp.zeros_like(g) if self.smoothing > 0 else jnp.zeros(g.shape, bool)
        return ContactProbeState(g, z, z, chain)

    def _gate(self, d, threshold):
        """``d > threshold`` for a depth ``d >= 0``; with smoothing, a sigmoid of width
        ``smoothing`` rescaled to be exactly 0 at ``d = 0`` (so a probe far from contact reads
        exactly what the exact form reads) and 1 for a negative threshold (always exceeded)."""
        if not self.smoothing > 0:
            return step_gate(d, 0.0, threshold)
        thr = jnp.asarray(threshold, d.dtype)
        g0 = jax.nn.sigmoid(-thr / self.smoothing)
        g = (jax.nn.sigmoid((d - thr) / self.smoothing) - g0) / (1.0 - g0)
        return jnp.where(thr < 0, 1.0, g)

    def _latch(self, d, prev, active):
        if not self.smoothing > 0:  # bools: on OR (prev AND hold)
            on = d > self.contact_threshold
            hold = d > self.release
            return active & (on | (jnp.asarray(prev, bool) & hold))
        on = self._gate(d, self.contact_threshold)
        hold = self._gate(d, self.release)
        new = on + (1.0 - on) * prev * hold  # = on OR (prev AND hold) for 0/1 values
        return jnp.where(active, new, 0.0)

    def step(self, state: ContactProbeState, inputs: SensorInputs, key=None):
        """One reading; returns the new latches in the state."""
        k_r, k_hw, k_d = split3(key)
        imp = self.imperfections
        m, gt = self.depths(state, inputs, k_r)
        chain, v = imp.apply_hysteresis(state.chain, m[None], inputs.dt)
        chain, v = imp.apply_hardware(chain, v, k_hw)
        active = self.per_probe(self.probe_radius, m.dtype) > 0
        lm = self._latch(v[0], state.latch_measured, active)
        lg = self._latch(gt, state.latch_ground_truth, active)
        state = ContactProbeState(state.probe_gain, lm, lg, chain)
        if imp.ring_depth:  # the delay ring holds floats
            chain, lm_read = imp.apply_delay(chain, lm[None].astype(m.dtype), k_d)
            state = ContactProbeState(state.probe_gain, lm, lg, chain)
            if not self.smoothing > 0:
                lm_read = lm_read > 0.5
        else:
            lm_read = lm
        return state, Reading(
            pinned_reshape(lm_read, self._out_shape()), pinned_reshape(lg, self.layout)
        )


@pytree_dataclass(kw_only=True)
class KinematicTaxel(_ContactSensor):
    """Spring-damper force and torque per probe (Genesis 1.4.5 ``KinematicTaxel``).

    Per probe at link-frame position ``p_L`` and world position ``p``, with penetration
    ``pen = max_g (r - sd_g(p))`` (> eps, else the taxel reads exactly 0), the winning shape's
    outward unit normal ``n`` (world), ``R`` the link rotation and ``n_L = R^T n``:

    * ``s = pen ** normal_exponent``;
    * relative velocity of the object's material point minus the sensor's at ``p``:
      ``v_L = R^T (v_obj(p) - v_link(p))``, ``v_n = v_L . n_L``, ``v_t = v_L - v_n n_L``;
    * ``F_L = normal_stiffness s n_L + normal_damping s v_n n_L - shear_scalar v_t`` (N);
    * ``T_L = p_L x F_L - twist_scalar ((w_obj - w_link) . n) n_L`` (N*m, about the link origin).

    ``n`` points out of the touched object toward the probe, so the normal force pushes into the
    sensor. Shear and twist terms are not scaled by ``s`` and switch on at contact onset; with
    ``smoothing > 0`` they are weighted by ``sigmoid(pen_raw / smoothing)`` and ``pen`` by the
    softplus clamp. The measured branch uses the noised radius with its own winning shape and
    ``pen * probe_gain`` (so stiffness/damping parts scale like ``gain ** normal_exponent``).
    Stages: ``"radius_noise"``; the imperfections may include crosstalk (grid layouts).

    ``step`` returns ``Reading(TaxelReading, TaxelReading)``: force and torque ``[*layout, 3]``
    in the sensor link frame.
    """

    normal_stiffness: Array = 1000.0
    normal_damping: Array = 1.0
    normal_exponent: Array = 1.0
    shear_scalar: Array = 1.0
    twist_scalar: Array = 1.0
    crosstalk_support: tuple | None = derived_field(None)

    N_CHANNELS = 6
    CROSSTALK = True

    def _check_field(self, name, v):
        o = "KinematicTaxel"
        if name in ("normal_stiffness", "normal_damping", "shear_scalar", "twist_scalar"):
            return check_scalar(o, name, v, lo=0)
        if name == "normal_exponent":
            return check_scalar(o, name, v, lo=1)
        return super()._check_field(name, v)

    def _derive(self):
        d = super()._derive()
        if self.imperfections.has_crosstalk:
            grid = np.asarray(self.probe_local_pos)
            s_v, s_u, _, _ = grid_metadata(grid)
            if s_u < 1e-12 or s_v < 1e-12:
                raise ValueError(
                    "KinematicTaxel.probe_local_pos: degenerate grid spacing for crosstalk"
                )
            d["crosstalk_support"] = self.imperfections.crosstalk_support((s_v, s_u))
        return d

    def init_state(self, key=None) -> ProbeState:
        """Per-episode state (a reset); the chain state is ``[6, N]`` (force then torque)."""
        g, chain = self.reset_gain_and_chain(key)
        return ProbeState(probe_gain=g, chain=chain)

    def _branch(self, q, v_rel, w_rel, p_link, radius, gain, one, spin_per_probe):
        """Force and torque planes ``(Fx, Fy, Fz), (Tx, Ty, Tz)`` each ``[N]`` (link frame).

        ``one`` (:func:`~difftaxel._numerics.runtime_one`) marks the planes computed once and
        read by every output component; the two branches share those of equal radius.
        ``spin_per_probe`` (static): whether the relative spin ``w_rel`` differs between probes
        (several shapes, or the broad phase's picked bodies), not one value per step."""
        dtype = p_link[0].dtype
        pen_raw, onehot, valid = _winner(self.contact_depth_query, q, radius)
        pen_raw = compute_once(one, pen_raw)
        active = (radius > 0) & valid
        if self.smoothing > 0:
            pen = clamp_depth(pen_raw, self.smoothing)
            gate = step_gate(pen_raw, self.smoothing, 0.0)
        else:
            contact = pen_raw > _eps(dtype)
            pen = jnp.where(contact, pen_raw, 0.0)
            gate = contact.astype(dtype)
        gate = jnp.where(active, gate, 0.0)
        pen = jnp.where(active, pen, 0.0) * gain
        n = compute_once(one, *(_select(onehot, c) for c in q.normal))
        v = compute_once(one, *(_select(onehot, c) for c in v_rel))
        w = [_select(onehot, c) for c in w_rel]
        v_n = v[0] * n[0] + v[1] * n[1] + v[2] * n[2]
        s = safe_pow(pen, self.normal_exponent)
        a = self.normal_stiffness * s + self.normal_damping * s * v_n
        g = self.shear_scalar * gate
        # F = a n - g (v - v_n n) = (a + g v_n) n - g v
        b = a + g * v_n
        w_n = self.twist_scalar * gate * (w[0] * n[0] + w[1] * n[1] + w[2] * n[2])
        if spin_per_probe:
            b, g, w_n = compute_once(one, b, g, w_n)
        else:  # one spin per environment: the gate and the twist term cost less recomputed in
            b = compute_once(one, b)  # each output component than stored and read back
        F = [b * n[i] - g * v[i] for i in range(3)]
        px, py, pz = p_link
        Tq = [
            py * F[2] - pz * F[1] - w_n * n[0],
            pz * F[0] - px * F[2] - w_n * n[1],
            px * F[1] - py * F[0] - w_n * n[2],
        ]
        return F, Tq

    def _body_motion(self, inputs, dtype):
        """Each body's motion relative to the sensor link, in the link frame: ``v0`` (m/s) and
        ``w`` (rad/s), ``[B, 3]`` each, such that the object's material point at link-frame
        ``p_L`` moves at ``v0 + w x p_L`` relative to the sensor. With ``R`` the link rotation,
        ``R^T (v_o + w_o x (p - o) - v_l - w_l x (p - x_l))
        = (R^T v_o - R^T v_l + R^T w_o x (x_l - o)) + (R^T (w_o - w_l)) x p_L``."""
        bodies = inputs.bodies
        T = inputs.T_world_link.astype(dtype)
        Rt = _pose.quat_to_matrix(T[3:]).T
        tw = bodies.twists.astype(dtype)
        org = bodies.poses[:, :3].astype(dtype)
        tl = inputs.twist_link.astype(dtype)
        w_rel_world = tw[:, 3:] - tl[None, 3:]
        v0_world = tw[:, :3] - tl[None, :3] + cross(tw[:, 3:], T[None, :3] - org)
        return matmul3(v0_world, Rt.T), matmul3(w_rel_world, Rt.T)  # rows rotated by R^T

    def _relative_motion(self, p_link, bodies, v0, w, picked=None):
        """Relative velocity, object material point minus sensor, at each probe.

        ``v0, w [B, 3]``: :meth:`_body_motion`. Returns ``v_rel`` (m/s) and ``w_rel`` (rad/s)
        as planes ``(x, y, z)`` in the link frame: per shape, ``[S, N]`` and ``[S, 1]``; or,
        given ``picked`` (the six ``[N]`` components of ``v0`` and ``w`` at each probe's winning
        shape, broad phase), of that shape's body only, ``[1, N]`` each.
        """
        if picked is not None:  # v0 + w x p_L on the probes' planes, [1, N] each
            v0, w = picked[:3], picked[3:]
            px, py, pz = p_link
            wp = (w[1] * pz - w[2] * py, w[2] * px - w[0] * pz, w[0] * py - w[1] * px)
            v_rel = tuple((v0[i] + wp[i])[None] for i in range(3))
            return v_rel, tuple(c[None] for c in w)
        b = bodies.shape_bodies
        v0, w = shape_rows(v0, b), shape_rows(w, b)  # [S, 3]
        wx, wy, wz = (w[:, i : i + 1] for i in range(3))  # [S, 1]
        # v0 + w x p_L, one affine map per shape (its pose gradient is one product)
        v_rel = jax.vmap(lambda A, c: affine_planes(A, c, *p_link))(jax.vmap(skew)(w), v0)
        return v_rel, (wx, wy, wz)

    def _planes(self, state, inputs, key):
        """``(F_m, T_m, F_g, T_g)``: measured and ground-truth force and torque, each a tuple
        of three ``[N]`` coordinate planes, link frame."""
        v0, w = self._body_motion(inputs, inputs.T_world_link.dtype)
        p_link, q, winner = self._query(inputs)
        picked = None
        if winner is not None:  # each probe reads its winning shape's body
            # one row of six per probe from a per-shape table computed once. Why: XLA's CPU
            # gather costs per index, so one [N, 6] gather beats six [N] ones; and fused into
            # the gather, each probe would redo its body's rotation and cross product
            table = shape_rows(jnp.concatenate([v0, w], 1), inputs.bodies.shape_bodies)
            rows = compute_once(runtime_one(table), table)[winner]  # [N, 6]
            picked = tuple(rows[:, i] for i in range(6))
        r, r_m = self._radii(p_link[0].dtype, key)
        v_rel, w_rel = self._relative_motion(p_link, inputs.bodies, v0, w, picked)
        # [N] ones from what is a runtime value in any real step: the gain (a scan's carry), the
        # probes (a traced sensor) or the object's pose; unfoldable even if two are constants.
        # One gain, not all [N]: every plane computed once would read the whole gain array
        one = runtime_one(p_link[0] + (state.probe_gain[0] + inputs.bodies.poses[0, 0]))
        spin = picked is not None or len(inputs.bodies.shapes) > 1
        F_g, T_g = self._branch(q, v_rel, w_rel, p_link, r, 1.0, one, spin)
        F_m, T_m = self._branch(q, v_rel, w_rel, p_link, r_m, state.probe_gain, one, spin)
        return F_m, T_m, F_g, T_g

    def forces(self, state: ProbeState, inputs: SensorInputs, key=None):
        """Flat ``(measured, ground_truth)`` :class:`TaxelReading` with ``[N, 3]`` arrays,
        before the imperfection chain (``key`` drives the radius noise only)."""
        F_m, T_m, F_g, T_g = self._planes(state, inputs, key)
        s = jnp.stack
        return TaxelReading(s(F_m, -1), s(T_m, -1)), TaxelReading(s(F_g, -1), s(T_g, -1))

    def crosstalk_args(self, dtype):
        """The grid arguments of :meth:`Imperfections.apply_crosstalk`: active probes, grid
        shape, static support, traced spacings ``[2]`` and unit normal ``[3]`` (link frame)."""
        s_v, s_u, t_u, t_v = grid_axes(self.probe_local_pos.astype(dtype))
        n = cross(t_u, t_v)
        n = n / jnp.sqrt(jnp.sum(n * n))
        active = self.per_probe(self.probe_radius, dtype) > 0
        return active, self.layout, self.crosstalk_support, jnp.stack([s_v, s_u]), n

    def step(self, state: ProbeState, inputs: SensorInputs, key=None):
        """One reading: force (N) and torque (N*m), ``[*layout, 3]``, sensor link frame.

        The measured branch goes through crosstalk, hysteresis, random walk, noise, bias,
        quantisation, dead taxels and delay (``[H, *layout, 3]`` with history). ``key`` drives
        every random draw; ``None`` draws nothing."""
        k_r, k_hw, k_d = split3(key)
        imp = self.imperfections
        gshp = self.layout + (3,)
        F_m, T_m, F_g, T_g = self._planes(state, inputs, k_r)
        truth = TaxelReading(
            channels_last(stack_rows(F_g), gshp), channels_last(stack_rows(T_g), gshp)
        )
        if imp.is_identity:
            # no chain: each reading is stacked from its own planes (a [6, N] round trip made
            # the backward pass materialise padded cotangents)
            meas = TaxelReading(
                channels_last(stack_rows(F_m), gshp), channels_last(stack_rows(T_m), gshp)
            )
            return state, Reading(meas, truth)
        v = stack_rows(F_m + T_m)  # [6, N], channels first
        xt = self.crosstalk_args(v.dtype) if imp.has_crosstalk else None
        chain, v = imp.run(state.chain, v, inputs.dt, k_hw, k_d, crosstalk=xt)
        state = ProbeState(probe_gain=state.probe_gain, chain=chain)
        shp = self._out_shape((3,))
        F, T = channels_last(v[..., :3, :], shp), channels_last(v[..., 3:, :], shp)
        return state, Reading(TaxelReading(F, T), truth)
