"""Signed-distance contact sensors: ContactDepthProbe, ContactProbe, KinematicTaxel.

Formulas, defaults and sign conventions follow Genesis World 1.4.5
(``shared/reference/GENESIS_MODELS.md`` sections 4-6, 9.5); departures (geometric gating, no
AABB pre-cull, smooth options) are listed in DESIGN.md and in each class's docstring.

Common probe options (Genesis names):

* ``probe_local_pos``: ``[N, 3]`` or a grid ``[ny, nx, 3]`` of probe centres (m, sensor link
  frame). Outputs keep this layout; flattening is row-major.
* ``probe_radius``: scalar or ``[N]`` (m). Penetration is ``probe_radius - sd``, so a probe
  centred on a surface reads its full radius. ``0`` marks a filler probe (ContactProbe and
  KinematicTaxel only): it reads exactly zero / False.
* ``probe_radius_noise`` (m): the measured branch uses ``max(0, r + (2u - 1) noise)``, ``u``
  uniform, fresh per probe and step (drawn only if the sensor was built with noise > 0).
* ``probe_gain``: scalar or ``[N]``, > 0: measured depth (ContactDepthProbe, ContactProbe) or
  measured penetration before the force model (KinematicTaxel) is multiplied by it.
  ``probe_gain_resample_range=(lo, hi)`` redraws it ``U(lo, hi)`` per probe at every
  ``init_state`` (a reset).
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

Gating: every body in ``inputs.bodies`` with ``inputs.body_mask`` True and not in
``filter_link_idx`` is queried (Genesis only queries bodies its rigid solver reports in
contact with the sensor link; pass that contact list as ``body_mask`` for exact parity).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import affine_planes, cross, safe_pow, skew
from .._numerics import eps as _eps
from .._pytree import pytree_dataclass, replace, static_field
from ..imperfections import ChainState, Imperfections
from .base import (
    Reading,
    SensorInputs,
    TaxelReading,
    check_inputs_trace,
    clamp_depth,
    noised_radius,
    prep_layout,
    reset_gain_and_chain,
    split3,
    step_gate,
)

Array = jax.Array

__all__ = ["ContactDepthProbe", "ContactProbe", "KinematicTaxel", "ProbeState"]


# ------------------------------------------------------------------------------- validation


def _prepare_probes(cls_name, probe_local_pos, probe_radius, allow_filler):
    flat, layout = prep_layout(cls_name, probe_local_pos)
    n = flat.shape[0]
    r = np.asarray(probe_radius, dtype=float)
    if r.ndim != 0 and r.shape not in ((n,), layout):
        raise ValueError(
            f"{cls_name}.probe_radius: expected a scalar or shape ({n},) or {layout}, got {r.shape}"
        )
    r = np.broadcast_to(r.reshape(-1) if r.ndim else r, (n,)).copy()
    if not np.all(np.isfinite(r)) or np.any(r < 0):
        raise ValueError(f"{cls_name}.probe_radius: expected values >= 0, got min {r.min()}")
    if allow_filler:
        if not np.any(r > 0):
            raise ValueError(
                f"{cls_name}.probe_radius: every probe is a filler (radius 0); at least one "
                "probe needs a radius > 0"
            )
    elif np.any(r <= 0):
        raise ValueError(
            f"{cls_name}.probe_radius: expected > 0 for every probe (no fillers for this "
            f"sensor), got min {r.min()}"
        )
    return flat, layout, r


def _has_tracer(self) -> bool:
    import dataclasses

    return any(
        isinstance(leaf, jax.core.Tracer)
        for f in dataclasses.fields(self)
        if not f.metadata.get("static", False)
        for leaf in jax.tree_util.tree_leaves(getattr(self, f.name))
    )


def _prepare_common(self, allow_filler):
    name = type(self).__name__
    if _has_tracer(self):
        raise TypeError(
            f"{name}: options are validated on the host and cannot be traced values at "
            "construction; build the sensor outside jit and use sensor.replace(option=value) "
            "to trace or differentiate an option"
        )
    flat, layout, r = _prepare_probes(name, self.probe_local_pos, self.probe_radius, allow_filler)
    n = flat.shape[0]
    dt = jnp.result_type(float)
    g = np.asarray(self.probe_gain, dtype=float)
    if g.ndim != 0 and g.size != n:
        raise ValueError(f"{name}.probe_gain: expected a scalar or {n} values, got shape {g.shape}")
    g = np.broadcast_to(g.reshape(-1) if g.ndim else g, (n,)).copy()
    if not np.all(np.isfinite(g)) or np.any(g <= 0):
        raise ValueError(f"{name}.probe_gain: expected > 0, got min {g.min()}")
    noise = float(self.probe_radius_noise)
    if not np.isfinite(noise) or noise < 0:
        raise ValueError(f"{name}.probe_radius_noise: expected >= 0, got {noise}")
    rr = self.probe_gain_resample_range
    if rr is not None:
        rr = tuple(float(v) for v in rr)
        if len(rr) != 2 or not (0 < rr[0] <= rr[1]):
            raise ValueError(
                f"{name}.probe_gain_resample_range: expected (lo, hi) with 0 < lo <= hi, got {rr}"
            )
    f = tuple(int(i) for i in self.filter_link_idx)
    if any(i < 0 for i in f):
        raise ValueError(f"{name}.filter_link_idx: expected body indices >= 0, got {f}")
    if self.contact_depth_query not in ("sdf", "raycast"):
        raise ValueError(
            f"{name}.contact_depth_query: expected 'sdf' or 'raycast', "
            f"got {self.contact_depth_query!r}"
        )
    sm = float(self.smoothing)
    if not np.isfinite(sm) or sm < 0:
        raise ValueError(f"{name}.smoothing: expected a length >= 0 (m), got {sm}")
    object.__setattr__(self, "probe_local_pos", jnp.asarray(flat, dt))
    object.__setattr__(self, "probe_radius", jnp.asarray(r, dt))
    object.__setattr__(self, "probe_gain", jnp.asarray(g, dt))
    object.__setattr__(self, "probe_radius_noise", jnp.asarray(noise, dt))
    object.__setattr__(self, "layout", tuple(int(v) for v in layout))
    object.__setattr__(self, "probe_gain_resample_range", rr)
    object.__setattr__(self, "filter_link_idx", f)
    object.__setattr__(self, "smoothing", sm)
    object.__setattr__(self, "radius_noise_on", noise > 0)
    imp = Imperfections() if self.imperfections is None else self.imperfections
    if not isinstance(imp, Imperfections):
        raise TypeError(
            f"{name}.imperfections: expected a difftaxel.Imperfections, got {type(imp).__name__}"
        )
    imp = imp.bind(
        name, tuple(int(v) for v in layout), flat, allow_crosstalk=name == "KinematicTaxel"
    )
    object.__setattr__(self, "imperfections", imp)


def _check_scalar(name, value, *, lo=None, lo_strict=False):
    v = float(np.asarray(value))
    if not np.isfinite(v) or (lo is not None and (v <= lo if lo_strict else v < lo)):
        rel = ">" if lo_strict else ">="
        raise ValueError(f"{name}: expected a finite value {rel} {lo}, got {value!r}")
    return jnp.asarray(v, jnp.result_type(float))


# ------------------------------------------------------------------------------- state


@pytree_dataclass
class ProbeState:
    """Per-episode state of a probe sensor (one environment).

    Attributes:
      probe_gain: ``[N]`` gain in force this episode (drawn at reset if resampled).
      latch_measured: ``[N]`` Schmitt latch of the measured branch (ContactProbe; 0/1, or
        in [0, 1] with smoothing).
      latch_ground_truth: ``[N]`` Schmitt latch of the ground-truth branch.
    """

    probe_gain: Array
    latch_measured: Array
    latch_ground_truth: Array
    chain: ChainState


def _init_probe_state(sensor, key, n_channels, channels_first=False) -> ProbeState:
    g, chain = reset_gain_and_chain(sensor, key, n_channels, channels_first)
    z = jnp.zeros_like(g)
    return ProbeState(probe_gain=g, latch_measured=z, latch_ground_truth=z, chain=chain)


def _out_shape(sensor, tail=()):
    H = sensor.imperfections.history_length
    return ((H,) if H > 0 else ()) + sensor.layout + tail


# ------------------------------------------------------------------------------- kernels


def _effective_mask(sensor, inputs: SensorInputs) -> Array:
    m = jnp.asarray(inputs.body_mask, bool)
    if sensor.filter_link_idx:
        B = m.shape[0]
        keep = np.ones(B, bool)
        for i in sensor.filter_link_idx:
            if i < B:
                keep[i] = False
        m = m & jnp.asarray(keep)
    return m


def _query(sensor, inputs: SensorInputs):
    """Link-frame probe planes ``(x, y, z)`` each ``[N]`` and the per-shape query on planes.

    Returns ``(pos, q)`` with ``q = (sd [S, N], (nx, ny, nz) each [S, N], mask [S, N])``,
    normals in the link frame. Planes rather than ``[N, 3]`` arrays: XLA's CPU backend
    vectorises a trailing axis of size 3 poorly (the KinematicTaxel step ran ~2x slower).
    """
    check_inputs_trace(inputs)
    T = inputs.T_world_link
    p = sensor.probe_local_pos.astype(T.dtype)
    pos = (p[:, 0], p[:, 1], p[:, 2])
    q = inputs.bodies.query_in_frame_xyz(T, pos, _effective_mask(sensor, inputs))
    return pos, q


def _select(onehot: Array, x: Array) -> Array:
    """``x[k[n], n]`` for a one-hot ``[S, N]`` selector and ``x [S, N, ...]``.

    A masked sum rather than a gather: it fuses with the elementwise kernel and its transpose
    is a broadcast, not a scatter (much cheaper in the backward pass on CPU).
    """
    if x.shape[0] == 1:
        return x[0]
    oh = onehot.reshape(onehot.shape + (1,) * (x.ndim - 2))
    return jnp.sum(jnp.where(oh, x, jnp.zeros((), x.dtype)), axis=0)


def _winner(sensor, q, radius):
    """Winning shape per probe for one branch of radius ``radius [N]``.

    Returns ``(pen_raw [N], onehot [S, N] bool, valid [N] bool)``: the largest ``r - sd`` over
    shapes (first shape on ties), a one-hot selector of that shape and whether any shape was
    queryable. ``"raycast"`` mode replaces the per-shape penetration by that of the nearest
    surface (smallest ``|sd|``), with the distance capped at ``radius`` (Genesis's query
    radius).
    """
    sd, _, mask = q
    S = sd.shape[0]
    valid = jnp.any(mask, axis=0)
    if sensor.contact_depth_query == "raycast":
        absd = jnp.where(mask, jnp.abs(sd), jnp.inf)
        k = jnp.argmin(absd, axis=0)
        onehot = jnp.arange(S)[:, None] == k[None]
        sdk = _select(onehot, sd)
        dk = _select(onehot, absd)
        sdk = jnp.where(dk > radius, radius, sdk)
        return radius - sdk, onehot, valid
    pen_s = jnp.where(mask, radius[None] - sd, -jnp.inf)
    if S == 1:
        return jnp.where(valid, pen_s[0], -1.0), jnp.ones((1,) + pen_s.shape[1:], bool), valid
    k = jnp.argmax(pen_s, axis=0)
    onehot = jnp.arange(S)[:, None] == k[None]
    pen = _select(onehot, jnp.where(mask, pen_s, 0.0))
    return jnp.where(valid, pen, -1.0), onehot, valid


def _depth_branch(sensor, q, radius, active):
    pen_raw, _, valid = _winner(sensor, q, radius)
    d = clamp_depth(pen_raw, sensor.smoothing)
    return jnp.where(valid & active, d, 0.0)


# ------------------------------------------------------------------------------- sensors


@pytree_dataclass
class ContactDepthProbe:
    """Penetration depth per probe (m): ``max(0, probe_radius - min_g sd_g(p))``.

    Genesis 1.4.5 ``ContactDepthProbe``: radius must be > 0 (no fillers). The measured branch
    uses the noised radius and multiplies by ``probe_gain``; the ground truth uses neither.

    ``step`` returns ``Reading(measured [*layout], ground_truth [*layout])`` (m).
    """

    probe_local_pos: Array = ((0.0, 0.0, 0.0),)
    probe_radius: Array = 0.01
    probe_radius_noise: Array = 0.0
    probe_gain: Array = 1.0
    probe_gain_resample_range: tuple | None = static_field(None)
    filter_link_idx: tuple = static_field(())
    contact_depth_query: str = static_field("sdf")
    smoothing: float = static_field(0.0)
    imperfections: Imperfections | None = None
    layout: tuple = static_field(())
    radius_noise_on: bool = static_field(False)

    def __post_init__(self):
        _prepare_common(self, allow_filler=False)

    @property
    def n_probes(self) -> int:
        return self.probe_local_pos.shape[0]

    def init_state(self, key=None) -> ProbeState:
        """Per-episode state (a reset): gains resampled and dead taxels drawn from ``key`` if
        configured; zero latches, hysteresis, random walk and delay ring."""
        return _init_probe_state(self, key, 1)

    def depths(self, state: ProbeState, inputs: SensorInputs, key=None):
        """Flat raw ``(measured [N], ground_truth [N])`` depths (m): radius noise and gain on
        the measured one, before the imperfection chain."""
        _, q = _query(self, inputs)
        r = self.probe_radius.astype(inputs.T_world_link.dtype)
        active = r > 0
        gt = _depth_branch(self, q, r, active)
        r_m = noised_radius(r, self.probe_radius_noise, key if self.radius_noise_on else None)
        m = _depth_branch(self, q, r_m, active) * state.probe_gain
        return m, gt

    def _chain(self, state, m, inputs, k_hw):
        imp = self.imperfections
        chain, v = imp.apply_hysteresis(state.chain, m[:, None], inputs.dt)
        chain, v = imp.apply_hardware(chain, v, k_hw)
        return chain, v

    def step(self, state: ProbeState, inputs: SensorInputs, key=None):
        """One reading ``[*layout]`` (m) per branch (``[H, *layout]`` measured with history).

        ``key`` drives radius noise, white noise, random walk and jitter; ``None`` draws
        nothing (a noise-free step)."""
        k_r, k_hw, k_d = split3(key)
        m, gt = self.depths(state, inputs, k_r)
        chain, v = self._chain(state, m, inputs, k_hw)
        chain, v = self.imperfections.apply_delay(chain, v, k_d)
        state = replace(state, chain=chain)
        return state, Reading(v.reshape(_out_shape(self)), gt.reshape(self.layout))


@pytree_dataclass
class ContactProbe:
    """Contact flag per probe with a Schmitt trigger on the penetration depth.

    ``latched_k = (d_k > contact_threshold) or (latched_{k-1} and d_k > release_threshold)``,
    strict comparisons, separately for the measured and ground-truth branches (Genesis 1.4.5;
    ``release_threshold=None`` means equal to ``contact_threshold``, i.e. a plain threshold;
    it may be negative). Fillers (radius 0) read False.

    With ``smoothing > 0`` the comparisons become sigmoids of width ``smoothing`` and the flags
    soft values in [0, 1] (float); otherwise ``step`` returns bool ``[*layout]`` arrays.
    """

    probe_local_pos: Array = ((0.0, 0.0, 0.0),)
    probe_radius: Array = 0.01
    probe_radius_noise: Array = 0.0
    probe_gain: Array = 1.0
    contact_threshold: Array = 1e-4
    release_threshold: Array | None = None
    probe_gain_resample_range: tuple | None = static_field(None)
    filter_link_idx: tuple = static_field(())
    contact_depth_query: str = static_field("sdf")
    smoothing: float = static_field(0.0)
    imperfections: Imperfections | None = None
    layout: tuple = static_field(())
    radius_noise_on: bool = static_field(False)

    def __post_init__(self):
        _prepare_common(self, allow_filler=True)
        ct = _check_scalar("ContactProbe.contact_threshold", self.contact_threshold)
        rt = (
            ct
            if self.release_threshold is None
            else _check_scalar("ContactProbe.release_threshold", self.release_threshold)
        )
        if float(rt) > float(ct):
            raise ValueError(
                f"ContactProbe.release_threshold: expected <= contact_threshold ({float(ct)}), "
                f"got {float(rt)}"
            )
        object.__setattr__(self, "contact_threshold", ct)
        object.__setattr__(self, "release_threshold", rt)

    n_probes = ContactDepthProbe.n_probes
    init_state = ContactDepthProbe.init_state
    depths = ContactDepthProbe.depths
    _chain = ContactDepthProbe._chain

    def _latch(self, d, prev, active):
        on = step_gate(d, self.smoothing, self.contact_threshold)
        hold = step_gate(d, self.smoothing, self.release_threshold)
        new = on + (1.0 - on) * prev * hold  # = on OR (prev AND hold) for 0/1 values
        return jnp.where(active, new, 0.0)

    def step(self, state: ProbeState, inputs: SensorInputs, key=None):
        """One reading; returns the new latches in the state."""
        k_r, k_hw, k_d = split3(key)
        m, gt = self.depths(state, inputs, k_r)
        chain, v = self._chain(state, m, inputs, k_hw)
        active = self.probe_radius > 0
        lm = self._latch(v[:, 0], state.latch_measured, active)
        lg = self._latch(gt, state.latch_ground_truth, active)
        chain, lm_read = self.imperfections.apply_delay(chain, lm[:, None], k_d)
        state = ProbeState(state.probe_gain, lm, lg, chain)
        lm_read = lm_read[..., 0]
        if self.smoothing > 0:
            out_m, out_g = lm_read, lg
        else:
            out_m, out_g = lm_read > 0.5, lg > 0.5
        return state, Reading(out_m.reshape(_out_shape(self)), out_g.reshape(self.layout))


@pytree_dataclass
class KinematicTaxel:
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

    ``step`` returns ``Reading(TaxelReading, TaxelReading)``: force and torque ``[*layout, 3]``
    in the sensor link frame.
    """

    probe_local_pos: Array = ((0.0, 0.0, 0.0),)
    probe_radius: Array = 0.01
    probe_radius_noise: Array = 0.0
    probe_gain: Array = 1.0
    normal_stiffness: Array = 1000.0
    normal_damping: Array = 1.0
    normal_exponent: Array = 1.0
    shear_scalar: Array = 1.0
    twist_scalar: Array = 1.0
    probe_gain_resample_range: tuple | None = static_field(None)
    filter_link_idx: tuple = static_field(())
    contact_depth_query: str = static_field("sdf")
    smoothing: float = static_field(0.0)
    imperfections: Imperfections | None = None
    layout: tuple = static_field(())
    radius_noise_on: bool = static_field(False)

    def __post_init__(self):
        _prepare_common(self, allow_filler=True)
        n = "KinematicTaxel"
        object.__setattr__(
            self,
            "normal_stiffness",
            _check_scalar(f"{n}.normal_stiffness", self.normal_stiffness, lo=0),
        )
        object.__setattr__(
            self, "normal_damping", _check_scalar(f"{n}.normal_damping", self.normal_damping, lo=0)
        )
        object.__setattr__(
            self,
            "normal_exponent",
            _check_scalar(f"{n}.normal_exponent", self.normal_exponent, lo=1),
        )
        object.__setattr__(
            self, "shear_scalar", _check_scalar(f"{n}.shear_scalar", self.shear_scalar, lo=0)
        )
        object.__setattr__(
            self, "twist_scalar", _check_scalar(f"{n}.twist_scalar", self.twist_scalar, lo=0)
        )

    n_probes = ContactDepthProbe.n_probes

    def init_state(self, key=None) -> ProbeState:
        """Per-episode state (a reset); see :meth:`ContactDepthProbe.init_state`. The chain
        state is laid out ``[6, N]`` (force then torque channels first)."""
        return _init_probe_state(self, key, 6, channels_first=True)

    def _branch(self, q, v_rel, w_rel, p_link, radius, gain):
        """Force and torque planes ``(Fx, Fy, Fz), (Tx, Ty, Tz)`` each ``[N]`` (link frame)."""
        dtype = p_link[0].dtype
        pen_raw, onehot, valid = _winner(self, q, radius)
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
        n = [_select(onehot, c) for c in q[1]]
        v = [_select(onehot, c) for c in v_rel]
        w = [_select(onehot, c) for c in w_rel]
        v_n = v[0] * n[0] + v[1] * n[1] + v[2] * n[2]
        s = safe_pow(pen, self.normal_exponent)
        a = self.normal_stiffness * s + self.normal_damping * s * v_n
        g = self.shear_scalar * gate
        # F = a n - g (v - v_n n) = (a + g v_n) n - g v
        b = a + g * v_n
        F = [b * n[i] - g * v[i] for i in range(3)]
        w_n = self.twist_scalar * gate * (w[0] * n[0] + w[1] * n[1] + w[2] * n[2])
        px, py, pz = p_link
        Tq = [
            py * F[2] - pz * F[1] - w_n * n[0],
            pz * F[0] - px * F[2] - w_n * n[1],
            px * F[1] - py * F[0] - w_n * n[2],
        ]
        return F, Tq

    def _relative_motion(self, p_link, inputs):
        """Relative velocity, object material point minus sensor, at each probe, per shape.

        Returns ``v_rel`` (m/s) and ``w_rel`` (rad/s) as planes ``(x, y, z)``, each ``[S, N]``
        and ``[S, 1]``, in the link frame: with ``R`` the link rotation,
        ``R^T (v_o + w_o x (p - o) - v_l - w_l x (p - x_l))
        = (R^T v_o - R^T v_l + R^T w_o x (x_l - o)) + (R^T (w_o - w_l)) x p_L``.
        """
        bodies = inputs.bodies
        dtype = p_link[0].dtype
        T = inputs.T_world_link.astype(dtype)
        Rt = _pose.quat_to_matrix(T[3:]).T
        b = bodies.shape_bodies
        # static slices (not a gather: its transpose would be a scatter)
        tw = jnp.stack([bodies.twists[int(i)] for i in b]).astype(dtype)  # [S, 6]
        org = jnp.stack([bodies.poses[int(i), :3] for i in b]).astype(dtype)  # [S, 3]
        tl = inputs.twist_link.astype(dtype)
        w_rel_world = tw[:, 3:] - tl[None, 3:]
        v0_world = tw[:, :3] - tl[None, :3] + cross(tw[:, 3:], T[None, :3] - org)
        v0 = v0_world @ Rt.T  # [S, 3] rows rotated by R^T
        w = w_rel_world @ Rt.T
        wx, wy, wz = (w[:, i : i + 1] for i in range(3))  # [S, 1]
        # v0 + w x p_L, one affine map per shape (its pose gradient is one product, see
        # affine_planes)
        per_shape = [affine_planes(skew(w[s]), v0[s], *p_link) for s in range(w.shape[0])]
        v_rel = tuple(jnp.stack([v[i] for v in per_shape]) for i in range(3))  # [S, N]
        return v_rel, (wx, wy, wz)

    def forces(self, state: ProbeState, inputs: SensorInputs, key=None):
        """Flat ``(measured, ground_truth)`` :class:`TaxelReading` with ``[N, 3]`` arrays."""
        m, g = self._forces6(state, inputs, key)
        return TaxelReading(m[:, :3], m[:, 3:]), TaxelReading(g[:, :3], g[:, 3:])

    def _planes(self, state, inputs, key):
        """``(F_m, T_m, F_g, T_g)``: measured and ground-truth force and torque, each a tuple
        of three ``[N]`` coordinate planes, link frame."""
        p_link, q = _query(self, inputs)
        r = self.probe_radius.astype(p_link[0].dtype)
        v_rel, w_rel = self._relative_motion(p_link, inputs)
        F_g, T_g = self._branch(q, v_rel, w_rel, p_link, r, 1.0)
        r_m = noised_radius(r, self.probe_radius_noise, key if self.radius_noise_on else None)
        F_m, T_m = self._branch(q, v_rel, w_rel, p_link, r_m, state.probe_gain)
        return F_m, T_m, F_g, T_g

    def _forces6(self, state, inputs, key):
        """``(measured [N, 6], ground_truth [N, 6])``: force then torque, link frame."""
        F_m, T_m, F_g, T_g = self._planes(state, inputs, key)
        return jnp.stack(F_m + T_m, -1), jnp.stack(F_g + T_g, -1)

    def step(self, state: ProbeState, inputs: SensorInputs, key=None):
        """One reading: force (N) and torque (N*m), ``[*layout, 3]``, sensor link frame.

        The measured branch goes through crosstalk, hysteresis, random walk, noise, bias,
        quantisation, dead taxels and delay (``[H, *layout, 3]`` with history). ``key`` drives
        every random draw; ``None`` draws nothing."""
        k_r, k_hw, k_d = split3(key)
        imp = self.imperfections
        gshp = self.layout + (3,)
        if imp.is_identity:
            # no chain: each reading is stacked from its own planes. Stacking force and torque
            # into one [N, 6] array and slicing it back made the backward pass materialise
            # padded [E, N, 6] cotangents (10 of ~50 ms per gradient at 4096 envs, profiled).
            F_m, T_m, F_g, T_g = self._planes(state, inputs, k_r)
            out = [jnp.stack(x, -1).reshape(gshp) for x in (F_m, T_m, F_g, T_g)]
            return state, Reading(TaxelReading(*out[:2]), TaxelReading(*out[2:]))
        # The chain runs channels first, on [6, N] (force then torque): every stage is then
        # elementwise on contiguous probe rows, and the only interleave is the final [N, 3]
        # readings, as without a chain ([N, 6] values cost a transpose in and out and ran
        # the elementwise stages on a trailing axis of 6: benchmarks/RESULTS.md 2026-12-04).
        F_m, T_m, F_g, T_g = self._planes(state, inputs, k_r)
        v = jnp.stack(F_m + T_m, axis=0)
        v = imp.apply_crosstalk(v, self.probe_radius > 0, channels_first=True)
        chain, v = imp.apply_hysteresis(state.chain, v, inputs.dt)
        chain, v = imp.apply_hardware(chain, v, k_hw)  # [6, N]: the state's layout
        chain, v = imp.apply_delay(chain, v, k_d)
        state = replace(state, chain=chain)
        shp = _out_shape(self, (3,))
        F, T = jnp.swapaxes(v[..., :3, :], -1, -2), jnp.swapaxes(v[..., 3:, :], -1, -2)
        return state, Reading(
            TaxelReading(F.reshape(shp), T.reshape(shp)),
            TaxelReading(jnp.stack(F_g, -1).reshape(gshp), jnp.stack(T_g, -1).reshape(gshp)),
        )
