"""The functional sensor contract: inputs, readings, the shared probe options.

A sensor is an immutable pytree of options (:class:`Sensor`). Float options and arrays are
leaves (differentiable); anything that fixes a shape or a code path is static. Each sensor
declares its own state type, holding only what that sensor carries::

    state = sensor.init_state(key)                    # per-episode draws; zeroed latches
    state, reading = sensor.step(state, inputs, key)  # pure; reading.measured, reading.ground_truth

Kernels are written for **one environment**; ``jax.vmap`` over environments and ``lax.scan``
over time are the caller's (:mod:`difftaxel.rollout`).
"""

from __future__ import annotations

import abc
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import smooth_relu
from .._pytree import Options, derived_field, pytree_dataclass, static_field
from .._validate import check_finite, check_pose, check_shape
from ..draws import split_key
from ..geometry import Bodies
from ..imperfections import Imperfections

Array = jax.Array

__all__ = ["ProbeSensor", "Reading", "SensorInputs", "Sensor", "TaxelReading", "make_inputs"]


class Reading(NamedTuple):
    """What a sensor step returns: the measured branch and the ground truth.

    ``measured`` went through the sensor's imperfections (radius noise, gain, and the chain);
    ``ground_truth`` never does.
    """

    measured: object
    ground_truth: object


class TaxelReading(NamedTuple):
    """Force and torque per taxel, each ``[*layout, 3]`` (N, N*m), sensor link frame."""

    force: Array
    torque: Array


@pytree_dataclass
class SensorInputs:
    """Everything a sensor step reads about the world, for one environment.

    Attributes:
      T_world_link: ``[7]`` pose of the sensor link (position m, quaternion x, y, z, w).
      twist_link: ``[6]`` twist of the sensor link: linear velocity of its frame origin (m/s)
        then angular velocity (rad/s), both in the world frame.
      bodies: :class:`~difftaxel.geometry.Bodies` around the sensor (shapes, poses, twists).
      body_mask: ``[B]`` bool: False removes a body from the query (contact gating, filters).
      dt: step length (s).
      body_poses_start: optional ``[B, 7]`` body poses at the start of the step (position m,
        quaternion x, y, z, w), for Genesis's stale bounding-box rule
        (``ElastomerTaxel(stale_aabb=True)``); None otherwise.
    """

    T_world_link: Array
    twist_link: Array
    bodies: Bodies
    body_mask: Array
    dt: Array
    body_poses_start: Array | None = None


def make_inputs(
    T_world_link, bodies: Bodies, twist_link=None, body_mask=None, dt=0.01, body_poses_start=None
):
    """Validated :class:`SensorInputs` (host side). Defaults: zero twist, every body on, 10 ms,
    no start-of-step poses."""
    dtype = jnp.result_type(float)
    check_shape(T_world_link, (7,), "T_world_link")
    check_pose(T_world_link, "T_world_link")
    if not isinstance(bodies, Bodies):
        raise TypeError(
            f"bodies: expected a difftaxel.geometry.Bodies, got {type(bodies).__name__}"
        )
    tw = np.zeros(6) if twist_link is None else twist_link
    check_shape(tw, (6,), "twist_link")
    check_finite(tw, "twist_link")
    B = bodies.num_bodies
    m = np.ones(B, bool) if body_mask is None else body_mask
    check_shape(m, (B,), "body_mask")
    if not (np.asarray(dt) > 0):
        raise ValueError(f"dt: expected > 0, got {dt}")
    if body_poses_start is not None:
        check_shape(body_poses_start, (B, 7), "body_poses_start")
        check_pose(body_poses_start, "body_poses_start")
        body_poses_start = jnp.asarray(body_poses_start, dtype)
    return SensorInputs(
        T_world_link=jnp.asarray(T_world_link, dtype),
        twist_link=jnp.asarray(tw, dtype),
        bodies=bodies,
        body_mask=jnp.asarray(m, bool),
        dt=jnp.asarray(dt, dtype),
        body_poses_start=body_poses_start,
    )


def check_inputs_trace(inputs: SensorInputs) -> None:
    """Trace-time shape checks (static shapes only; safe under jit/vmap)."""
    if not isinstance(inputs, SensorInputs):
        raise TypeError(f"inputs: expected SensorInputs, got {type(inputs).__name__}")
    if jnp.shape(inputs.T_world_link) != (7,):
        raise ValueError(
            f"inputs.T_world_link: expected shape (7,), got {jnp.shape(inputs.T_world_link)}"
        )
    if jnp.shape(inputs.twist_link) != (6,):
        raise ValueError(
            f"inputs.twist_link: expected shape (6,), got {jnp.shape(inputs.twist_link)}"
        )
    B = inputs.bodies.poses.shape[0]
    if inputs.bodies.poses.shape != (B, 7):
        raise ValueError(
            f"inputs.bodies.poses: expected shape (B, 7), got {inputs.bodies.poses.shape}"
        )
    if inputs.bodies.twists.shape != (B, 6):
        raise ValueError(
            f"inputs.bodies.twists: expected shape ({B}, 6), got {inputs.bodies.twists.shape}"
        )
    if inputs.body_poses_start is not None and jnp.shape(inputs.body_poses_start) != (B, 7):
        raise ValueError(
            f"inputs.body_poses_start: expected shape ({B}, 7), got "
            f"{jnp.shape(inputs.body_poses_start)}"
        )
    if jnp.shape(inputs.body_mask) != (B,):
        raise ValueError(
            f"inputs.body_mask: expected shape ({B},) (one flag per body), "
            f"got {jnp.shape(inputs.body_mask)}"
        )


def clamp_depth(x: Array, smoothing: float) -> Array:
    """``max(0, x)`` (exact, ``smoothing == 0``) or ``smoothing * softplus(x / smoothing)``."""
    if smoothing > 0:
        return smooth_relu(x, jnp.asarray(smoothing, x.dtype))
    return jnp.maximum(x, 0.0)


def step_gate(x: Array, smoothing: float, threshold) -> Array:
    """Indicator ``x > threshold`` as 0/1 floats, or ``sigmoid((x - threshold)/smoothing)``."""
    if smoothing > 0:
        return jax.nn.sigmoid((x - threshold) / jnp.asarray(smoothing, x.dtype))
    return (x > threshold).astype(x.dtype)


def probe_world_positions(T_world_link: Array, probe_local_pos: Array) -> Array:
    """``[N, 3]`` world positions of link-frame probes ``[N, 3]``."""
    return _pose.apply(T_world_link[None, :], probe_local_pos)


def noised_radius(radius: Array, noise: Array, key) -> Array:
    """Genesis's per-step radius noise ``max(0, r + (2u - 1) noise)``, ``u ~ U[0, 1)`` per
    probe, fresh each step from ``key``; ``r`` unchanged when ``key`` is None. With
    ``noise == 0`` it is exactly ``r`` (``r >= 0``), with the gradient in ``noise`` of the
    reparameterised draw."""
    if key is None:
        return radius
    u = jax.random.uniform(key, radius.shape, radius.dtype)
    return jnp.maximum(radius + (2.0 * u - 1.0) * noise.astype(radius.dtype), 0.0)


def split3(key):
    """Three independent keys (radius noise, hardware chain, delay/jitter), or Nones."""
    if key is None:
        return None, None, None
    return split_key(key, 3)


# ----------------------------------------------------------------------------- validation


def check_positions(owner: str, pos) -> jax.Array:
    """``probe_local_pos``: ``[N, 3]`` or ``[ny, nx, 3]`` finite (m, link frame), kept in its
    shape (the shape is the output layout)."""
    p = np.asarray(pos, dtype=float)
    if p.ndim not in (2, 3) or p.shape[-1] != 3 or p.size == 0:
        raise ValueError(
            f"{owner}.probe_local_pos: expected shape (N, 3) or (ny, nx, 3), got {p.shape}"
        )
    if not np.all(np.isfinite(p)):
        raise ValueError(f"{owner}.probe_local_pos: expected finite values")
    return jnp.asarray(p, jnp.result_type(float))


def check_per_probe(owner: str, name: str, v, layout: tuple, *, lo=0.0, strict=False):
    """A per-probe option: a scalar, ``[N]`` or ``[*layout]`` with values ``>= lo`` (``> lo``
    if ``strict``), kept in its shape (kernels broadcast it to ``[N]``)."""
    try:
        a = np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}.{name}: expected a number or array, got {v!r}") from None
    n = int(np.prod(layout))
    if a.ndim and a.shape not in ((n,), tuple(layout)):
        raise ValueError(
            f"{owner}.{name}: expected a scalar or shape ({n},) or {tuple(layout)}, got {a.shape}"
        )
    bad = (a <= lo) if strict else (a < lo)
    if not np.all(np.isfinite(a)) or np.any(bad):
        rel = ">" if strict else ">="
        raise ValueError(
            f"{owner}.{name}: expected values {rel} {lo:g} (finite), got min {a.min()}"
        )
    return jnp.asarray(a, jnp.result_type(float))


def check_scalar(owner: str, name: str, v, *, lo=None, strict=False):
    """A scalar option, finite and ``>= lo`` (``> lo`` if ``strict``)."""
    try:
        a = np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}.{name}: expected a number, got {v!r}") from None
    if a.ndim:
        raise ValueError(f"{owner}.{name}: expected a scalar, got shape {a.shape}")
    x = float(a)
    if not np.isfinite(x) or (lo is not None and (x <= lo if strict else x < lo)):
        rel = ">" if strict else ">="
        bound = "" if lo is None else f" {rel} {lo}"
        raise ValueError(f"{owner}.{name}: expected a finite value{bound}, got {v!r}")
    return jnp.asarray(x, jnp.result_type(float))


def check_length(owner: str, name: str, v) -> float:
    """A static length (m) ``>= 0`` (``smoothing``)."""
    x = float(v)
    if not np.isfinite(x) or x < 0:
        raise ValueError(f"{owner}.{name}: expected a length >= 0 (m), got {v!r}")
    return x


def resolve_stages(owner: str, stages, known: tuple, nonzero: dict) -> tuple:
    """The stages that run: ``stages`` (validated names) or, for ``None``, those whose option
    is non-zero; a non-zero option of an unlisted stage raises."""
    if stages is None:
        return tuple(k for k in known if nonzero.get(k, False))
    st = (stages,) if isinstance(stages, str) else tuple(stages)
    bad = [s for s in st if s not in known]
    if bad:
        raise ValueError(f"{owner}.stages: unknown stage(s) {bad}; expected names in {known}")
    for k in known:
        if nonzero.get(k, False) and k not in st:
            raise ValueError(
                f"{owner}.stages: stage {k!r} has a non-zero option but is not listed in "
                f"stages={st}; list it or set its option to zero"
            )
    return tuple(k for k in known if k in st)


# ----------------------------------------------------------------------------- the contract


class Sensor(Options, abc.ABC):
    """The sensor contract: an immutable option pytree with a pure reset and a pure step.

    An abstract base: every sensor class defines both methods, each with a state type of its
    own. ``key`` is the only source of randomness; ``None`` draws nothing.
    """

    @abc.abstractmethod
    def init_state(self, key=None):
        """A reset: per-episode draws (gains, dead taxels), zeroed latches and chain."""

    @abc.abstractmethod
    def step(self, state, inputs: SensorInputs, key=None):
        """``(new_state, Reading)`` for one step of one environment."""


@pytree_dataclass(kw_only=True)
class ProbeSensor(Sensor):
    """Options every probe sensor shares (Genesis names).

    Attributes:
      probe_local_pos: ``[N, 3]`` or a grid ``[ny, nx, 3]`` of probe centres (m, sensor link
        frame). Its shape is the output layout (row-major flattening); ``layout`` and
        ``n_probes`` follow from it.
      probe_radius: scalar, ``[N]`` or ``[*layout]`` (m).
      probe_gain: scalar, ``[N]`` or ``[*layout]``, > 0: the measured branch's gain.
      probe_gain_resample_range: ``(lo, hi)`` (static): redraw the gain ``U(lo, hi)`` per probe
        at every ``init_state`` (a reset); needs a key.
      imperfections: the measured branch's :class:`~difftaxel.Imperfections` (default: none).
      stages: the sensor's own switchable stages that run (static; see each class), ``None``
        (default) for those whose option is non-zero at construction. List a stage to trace
        or differentiate its option from zero.
    """

    probe_local_pos: Array = ((0.0, 0.0, 0.0),)
    probe_radius: Array = 0.01
    probe_gain: Array = 1.0
    probe_gain_resample_range: tuple | None = static_field(None)
    imperfections: Imperfections | None = None
    stages: tuple | None = static_field(None)
    active_stages: tuple = derived_field(())

    #: the sensor's switchable stages (subclasses)
    STAGES: ClassVar[tuple] = ()
    #: channels per probe of the measured branch's chain
    N_CHANNELS: ClassVar[int] = 1
    #: whether the imperfections may include crosstalk
    CROSSTALK: ClassVar[bool] = False
    _REDERIVES = frozenset({"stages"})

    @property
    def layout(self) -> tuple:
        """Static output layout: ``(N,)`` or ``(ny, nx)``."""
        return tuple(self.probe_local_pos.shape[:-1])

    @property
    def n_probes(self) -> int:
        return int(np.prod(self.layout))

    def flat_positions(self, dtype=None) -> Array:
        """``[N, 3]`` probe positions (m, link frame)."""
        p = self.probe_local_pos.reshape(-1, 3)
        return p if dtype is None else p.astype(dtype)

    def per_probe(self, x, dtype) -> Array:
        """A per-probe option broadcast to ``[N]``."""
        return jnp.broadcast_to(jnp.asarray(x).astype(dtype).reshape(-1), (self.n_probes,))

    def _check_field(self, name, v):
        o = type(self).__name__
        if name == "probe_local_pos":
            return check_positions(o, v)
        if name == "probe_radius":
            return check_per_probe(o, name, v, self.layout)
        if name == "probe_gain":
            return check_per_probe(o, name, v, self.layout, strict=True)
        if name == "probe_gain_resample_range":
            if v is None:
                return None
            rr = tuple(float(x) for x in v)
            if len(rr) != 2 or not (0 < rr[0] <= rr[1] < np.inf):
                raise ValueError(
                    f"{o}.probe_gain_resample_range: expected finite (lo, hi) with 0 < lo <= hi, "
                    f"got {v!r}"
                )
            return rr
        if name == "imperfections":
            imp = Imperfections() if v is None else v
            if not isinstance(imp, Imperfections):
                raise TypeError(
                    f"{o}.imperfections: expected a difftaxel.Imperfections, got "
                    f"{type(imp).__name__}"
                )
            if imp.has_crosstalk:
                self._check_crosstalk_layout(o)
            N, C = self.n_probes, self.N_CHANNELS
            for k in ("random_walk", "noise", "bias", "resolution"):
                shape = np.shape(getattr(imp, k))
                try:
                    np.broadcast_shapes(shape, (N, C))
                except ValueError:
                    raise ValueError(
                        f"{o}.imperfections.{k}: expected a scalar, [{C}] (one per channel) or "
                        f"[{N}, {C}] (per probe and channel), got shape {shape}"
                    ) from None
            return imp
        if name == "stages":
            return None if v is None else ((v,) if isinstance(v, str) else tuple(v))
        return v

    PER_PROBE: ClassVar[tuple] = ("probe_radius", "probe_gain")

    def _accepts_shape(self, name, shape):
        if name in self.PER_PROBE:
            return tuple(shape) in ((), (self.n_probes,), self.layout)
        if name == "probe_local_normal":
            return tuple(shape) in ((3,), (self.n_probes, 3), self.layout + (3,))
        return False

    def _check_crosstalk_layout(self, o):
        if not self.CROSSTALK:
            raise ValueError(
                f"{o}.imperfections: crosstalk is not applied to {o} (Genesis applies it to "
                "KinematicTaxel and ProximityTaxel only); remove the crosstalk options"
            )
        lay = self.layout
        if len(lay) != 2 or lay[0] < 2 or lay[1] < 2:
            raise ValueError(
                f"{o}.imperfections: crosstalk needs a grid layout (ny, nx, 3) with nx, ny >= 2, "
                f"got probe layout {lay}"
            )

    def _stage_values(self) -> dict:
        """``{stage: whether its option is non-zero}`` (concrete options; subclasses)."""
        return {}

    def _derive(self) -> dict:
        o = type(self).__name__
        return {"active_stages": resolve_stages(o, self.stages, self.STAGES, self._stage_values())}

    # ------------------------------------------------------------------ reset

    def reset_gain_and_chain(self, key, dtype=None):
        """A reset's draws: ``(probe_gain [N], chain state [C, N])``. The gain is
        ``probe_gain`` or, with ``probe_gain_resample_range=(lo, hi)``, drawn ``U(lo, hi)``
        per probe from ``key``; dead taxels are drawn by the imperfection chain."""
        dtype = dtype or jnp.result_type(float)
        g = self.per_probe(self.probe_gain, dtype)
        k_gain = k_chain = None
        if key is not None:
            k_gain, k_chain = jax.random.split(key)
        if self.probe_gain_resample_range is not None:
            if key is None:
                raise ValueError(
                    f"key: {type(self).__name__}.init_state needs a PRNG key to resample probe_gain"
                )
            lo, hi = self.probe_gain_resample_range
            g = jax.random.uniform(k_gain, g.shape, dtype, lo, hi)
        chain = self.imperfections.init(k_chain, self.n_probes, self.N_CHANNELS, dtype)
        return g, chain
