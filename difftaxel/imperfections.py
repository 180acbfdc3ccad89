"""The measured branch of a real tactile sensor: Genesis World 1.4.5's imperfection chain.

Order, each stage pure with explicit state:

1. **spatial crosstalk** (taxel sensors on a grid; :mod:`difftaxel.crosstalk`);
2. **viscoelastic hysteresis** (single Maxwell element) per channel:
   ``xi_k = a xi_{k-1} + (x_k - x_{k-1})``, ``y_k = x_k + strength xi_k``, ``a = exp(-dt/tau)``;
3. **random walk** ``rho += N(0, random_walk)``, value += rho;
4. **white noise** ``+ noise * N(0, 1)`` (reparameterised: differentiable in ``noise``);
5. **bias** ``+ bias``;
6. **resolution** ``round(x / res) * res`` (round half to even), optionally straight-through
   (identity gradient) for training;
7. **dead taxels**: a probe drawn dead at reset reads its dead value on every channel;
8. the sensor's own thresholds (ContactProbe latch) - applied by the sensor;
9. **delay and jitter** through a ring of past readings; **history** of the last H readings
   (index 0 newest; history reads bypass the delay, as Genesis).

Values travel **channels first**, ``[C, N]``: C channels per probe (1 for depths and flags, 3
for marker displacements, 6 for a taxel's force then torque), N probes. Every stage is then
elementwise on contiguous probe rows. Options that vary per probe or per channel are given
broadcastable to ``[N, C]`` (e.g. ``noise=(0.01, 0.01, 0.05, 0, 0, 0)`` per channel).

Every random draw comes from an explicit key: ``init`` draws dead taxels (per reset) and the
stages draw noise, random-walk increments and jitter. The ground-truth branch never sees any of
this.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ._numerics import eps as _eps
from ._pytree import Options, derived_field, pytree_dataclass, replace, static_field
from .crosstalk import (
    apply_crosstalk,
    crosstalk_correlate,
    crosstalk_support,
    gaussian_mix_kernel,
    grid_metadata,
)
from .draws import hash_normal, normal_halves, standard_normal

Array = jax.Array

__all__ = [
    "STAGES",
    "ChainState",
    "Imperfections",
    "crosstalk_correlate",
    "grid_metadata",
    "hash_normal",
    "standard_normal",
]

#: The chain's switchable stages, in the order they run (delay and history are set by
#: ``delay`` / ``history_length``).
STAGES = ("crosstalk", "hysteresis", "random_walk", "noise", "bias", "resolution", "dead", "jitter")


@pytree_dataclass
class ChainState:
    """State of the imperfection chain for one environment (channels first).

    A stage that does not run keeps no state: its fields are None (so a bare sensor's state
    is a few bytes per probe and a jitted step does not copy unused zeros through).

    Attributes:
      hyst_xi: ``[C, N]`` Maxwell element state (None without hysteresis).
      hyst_prev: ``[C, N]`` previous hysteresis input (None without hysteresis).
      walk: ``[C, N]`` random-walk offset (None without random walk).
      dead: ``[N]`` bool, drawn at reset (None without dead taxels).
      dead_value: ``[N]`` value a dead probe reads (None without dead taxels).
      ring: the past post-processed measured readings (:func:`ring_read`: slot 0 newest); ``()``
        when no delay or history is configured. Up to ``TUPLE_RING_MAX`` deep, a tuple of ``D``
        arrays ``[C, N]``; deeper, ``(buffer [D, C, N], head [])`` (see :func:`ring_push`).
    """

    hyst_xi: Array
    hyst_prev: Array
    walk: Array
    dead: Array
    dead_value: Array
    ring: tuple


def _array(owner, name, v, lo=None, hi=None, scalar=False):
    try:
        a = np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}.{name}: expected a number or array, got {v!r}") from None
    if scalar and a.ndim:
        raise ValueError(f"{owner}.{name}: expected a scalar, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{owner}.{name}: expected finite values, got {v!r}")
    if lo is not None and np.any(a < lo):
        raise ValueError(f"{owner}.{name}: expected >= {lo}, got {v!r}")
    if hi is not None and np.any(a > hi):
        raise ValueError(f"{owner}.{name}: expected <= {hi}, got {v!r}")
    return jnp.asarray(a, jnp.result_type(float))


def _check_layout(x, value: Array, where: str, field: str) -> None:
    """``value`` has the shape of the state's stage array ``x``; a missing array (None: the
    state was made for options where the stage did not run) is an error naming the field."""
    if x is None:
        raise ValueError(
            f"state.{field}: Imperfections.{where} runs a stage this chain state has no state "
            "for (it was made before the option was switched on); call init_state again"
        )
    if tuple(value.shape[-x.ndim :]) != tuple(x.shape) or value.ndim != 2:
        raise ValueError(
            f"value: Imperfections.{where} expected shape {tuple(x.shape)} or (C, "
            f"{x.shape[-1]}) (the state's channels-first [C, N] layout), got "
            f"{tuple(value.shape)}"
        )


@pytree_dataclass(kw_only=True)
class Imperfections(Options):
    """Options of the measured-branch chain (Genesis names and defaults: everything off).

    Attributes:
      hysteresis_strength: ``s >= 0`` of the Maxwell element.
      hysteresis_tau: relaxation time (s), must be > 0 when the hysteresis stage runs.
      random_walk: std of the per-step increment of a cumulative offset (sensor units).
      noise: std of additive white Gaussian noise (sensor units).
      bias: constant offset (sensor units).
      resolution: quantisation step (0 = off).
      dead_taxel_probability: probability in [0, 1] that a probe is dead (drawn per reset).
      dead_taxel_value_range: ``(lo, hi)`` a dead probe's value is drawn from.
      crosstalk_strength: Gaussian crosstalk mix ``K = s G + (1 - s) delta``.
      crosstalk_sigma: Gaussian width (m), > 0 when the Gaussian crosstalk runs.
      crosstalk_kernel: explicit kernel ``[kr, kc]``, ``[2, kr, kc]`` or ``[3, kr, kc]`` (odd
        sizes; groups normal/rest or normal/shear/torque), exclusive with the Gaussian options.
      jitter: random extra latency (s), ``<= delay`` and ``<= dt``.
      delay: read latency (s, static); ``round(delay / dt)`` steps (``dt`` is required then).
      dt: sensor step (s, static); needed for delay and jitter (hysteresis uses ``inputs.dt``).
      history_length: H > 0 makes ``step`` return the last H post-processed readings (static).
      straight_through: quantisation passes gradients unchanged (for training; static).
      noise_generator: Gaussian source of the random walk and white noise (static):
        ``"hash"`` (default; :func:`~difftaxel.draws.hash_normal`, a counter hash seeded by the
        step's key) or ``"threefry"`` (``jax.random`` bits through Box-Muller, several times
        dearer per draw). Either way the draws come only from the key passed to ``step``,
        through the same Box-Muller transform; neither is the ``jax.random.normal`` stream.
      stages: which of :data:`STAGES` run (static). ``None`` (default): each stage whose
        option is non-zero at construction. A stage that does not run costs nothing and
        ignores its options, so to trace or differentiate an option from zero, list its stage:
        ``Imperfections(stages=("noise",))``. A stage that runs with zero options is exactly
        the identity.

    ``replace`` rebuilds the chain (``stages=None`` is resolved again from the new values);
    under a trace it refuses an option of a stage that does not run (see
    :meth:`~difftaxel._pytree.Options.replace`).
    """

    hysteresis_strength: Array = 0.0
    hysteresis_tau: Array = 0.0
    random_walk: Array = 0.0
    noise: Array = 0.0
    bias: Array = 0.0
    resolution: Array = 0.0
    dead_taxel_probability: Array = 0.0
    dead_taxel_value_range: Array = (0.0, 0.0)
    crosstalk_strength: Array = 0.0
    crosstalk_sigma: Array = 0.0
    crosstalk_kernel: Array | None = None
    jitter: Array = 0.0
    delay: float = static_field(0.0)
    dt: float | None = static_field(None)
    history_length: int = static_field(0)
    straight_through: bool = static_field(False)
    noise_generator: str = static_field("hash")
    stages: tuple | None = static_field(None)
    active_stages: tuple = derived_field(())

    _STAGE_OF = {
        "hysteresis_strength": "hysteresis",
        "hysteresis_tau": "hysteresis",
        "random_walk": "random_walk",
        "noise": "noise",
        "bias": "bias",
        "resolution": "resolution",
        "dead_taxel_probability": "dead",
        "dead_taxel_value_range": "dead",
        "crosstalk_strength": "crosstalk",
        "crosstalk_sigma": "crosstalk",
        "crosstalk_kernel": "crosstalk",
        "jitter": "jitter",
    }
    _REDERIVES = frozenset({"stages", "delay", "dt"})

    # ------------------------------------------------------------------ validation

    def _check_field(self, name, v):
        o = "Imperfections"
        if name in ("hysteresis_strength", "crosstalk_strength", "crosstalk_sigma", "jitter"):
            return _array(o, name, v, lo=0, scalar=True)
        if name == "hysteresis_tau":
            return _array(o, name, v, lo=0, scalar=True)
        if name in ("random_walk", "noise", "resolution"):
            return _array(o, name, v, lo=0)
        if name == "bias":
            return _array(o, name, v)
        if name == "dead_taxel_probability":
            return _array(o, name, v, lo=0, hi=1, scalar=True)
        if name == "dead_taxel_value_range":
            a = np.asarray(_array(o, name, v))
            if a.shape != (2,) or a[0] > a[1]:
                raise ValueError(f"{o}.{name}: expected (lo, hi) with lo <= hi, got {v!r}")
            return jnp.asarray(a)
        if name == "crosstalk_kernel":
            if v is None:
                return None
            K = np.asarray(v, dtype=float)
            if K.ndim == 2:
                K = K[None]
            if K.ndim != 3 or K.shape[0] not in (1, 2, 3):
                raise ValueError(
                    f"{o}.{name}: expected shape (kr, kc), (2, kr, kc) or (3, kr, kc), "
                    f"got {np.shape(v)}"
                )
            if K.shape[1] % 2 == 0 or K.shape[2] % 2 == 0:
                raise ValueError(f"{o}.{name}: expected odd kernel sizes, got {K.shape[1:]}")
            if not np.all(np.isfinite(K)):
                raise ValueError(f"{o}.{name}: expected finite values")
            return jnp.asarray(K, jnp.result_type(float))
        if name == "delay":
            d = float(v)
            if not (d >= 0 and math.isfinite(d)):
                raise ValueError(f"{o}.delay: expected >= 0 (s), got {v!r}")
            return d
        if name == "dt":
            if v is None:
                return None
            if not float(v) > 0:
                raise ValueError(f"{o}.dt: expected the sensor step (s) > 0, got {v!r}")
            return float(v)
        if name == "history_length":
            if isinstance(v, bool) or int(v) != v or int(v) < 0:
                raise ValueError(f"{o}.history_length: expected an int >= 0, got {v!r}")
            return int(v)
        if name == "straight_through":
            return bool(v)
        if name == "noise_generator":
            if v not in ("threefry", "hash"):
                raise ValueError(f"{o}.noise_generator: expected 'threefry' or 'hash', got {v!r}")
            return v
        if name == "stages":
            if v is None:
                return None
            st = (v,) if isinstance(v, str) else tuple(v)
            bad = [s for s in st if s not in STAGES]
            if bad:
                raise ValueError(f"{o}.stages: unknown stage(s) {bad}; expected names in {STAGES}")
            return tuple(s for s in STAGES if s in st)
        return v

    def _derive(self):
        o = "Imperfections"
        s, tau = float(self.hysteresis_strength), float(self.hysteresis_tau)
        lam, sig = float(self.crosstalk_strength), float(self.crosstalk_sigma)
        K, jit, delay = self.crosstalk_kernel, float(self.jitter), self.delay
        if K is not None and (lam > 0 or sig > 0):
            raise ValueError(
                f"{o}.crosstalk_kernel: an explicit kernel excludes crosstalk_strength and "
                "crosstalk_sigma (got both)"
            )
        nonzero = {
            "crosstalk": K is not None or lam > 0,
            "hysteresis": s > 0,
            "random_walk": bool(np.any(np.asarray(self.random_walk) > 0)),
            "noise": bool(np.any(np.asarray(self.noise) > 0)),
            "bias": bool(np.any(np.asarray(self.bias) != 0)),
            "resolution": bool(np.any(np.asarray(self.resolution) > 0)),
            "dead": float(self.dead_taxel_probability) > 0,
            "jitter": jit > 0,
        }
        if self.stages is None:
            active = tuple(k for k in STAGES if nonzero[k])
        else:
            active = self.stages
            for k in STAGES:
                if nonzero[k] and k not in active:
                    raise ValueError(
                        f"{o}.stages: stage {k!r} has a non-zero option but is not listed in "
                        f"stages={active}; list it or set its option to zero"
                    )
        if "hysteresis" in active and not tau > 0:
            raise ValueError(
                f"{o}.hysteresis_tau: expected > 0 when the hysteresis stage runs "
                f"(hysteresis_strength={s}), got {tau}"
            )
        if "crosstalk" in active and K is None and not sig > 0:
            raise ValueError(
                f"{o}.crosstalk_sigma: expected > 0 when the Gaussian crosstalk runs, got {sig}"
            )
        if (delay > 0 or "jitter" in active) and self.dt is None:
            raise ValueError(
                f"{o}.dt: expected the sensor step (s) > 0 when delay or jitter is set, got None"
            )
        if "jitter" in active:
            tol = 1e-12
            if delay <= 0 or jit > delay + tol:
                raise ValueError(
                    f"{o}.jitter: expected <= delay ({delay}) and delay > 0, got {jit}"
                )
            if jit > self.dt + tol:
                raise ValueError(f"{o}.jitter: expected <= dt ({self.dt}), got {jit}")
        return {"active_stages": active}

    # ------------------------------------------------------------------ static properties

    @property
    def is_identity(self) -> bool:
        """Static: no stage runs, so the measured branch equals its input."""
        return not self.active_stages and self.ring_depth == 0

    @property
    def has_crosstalk(self) -> bool:
        """Static: the crosstalk stage runs."""
        return "crosstalk" in self.active_stages

    def crosstalk_support(self, spacing: tuple) -> tuple:
        """Static kernel radius ``(r_v, r_u)`` in taxels for a grid of ``spacing (s_v, s_u)``:
        the explicit kernel's, or ``ceil(3 sigma / s)`` of the Gaussian (the construction-time
        ``sigma``; a traced ``sigma`` keeps this support)."""
        if self.crosstalk_kernel is not None:
            return self.crosstalk_kernel.shape[1] // 2, self.crosstalk_kernel.shape[2] // 2
        return crosstalk_support(float(self.crosstalk_sigma), spacing)

    @property
    def ring_depth(self) -> int:
        """Depth ``D`` of the ring: ``history_length``, or the oldest slot a delayed
        (jittered) read can need. From ``delay_steps >= 1`` on, the read comes from the ring
        before the push, so ``delay_steps + 1`` past readings suffice (``+ 1`` for jitter)."""
        d = 0
        if self.delay > 0:
            steps = self.delay_steps
            d = 2 if steps == 0 else steps + (1 if "jitter" in self.active_stages else 0)
        return max(d, self.history_length)

    @property
    def delay_steps(self) -> int:
        """``round(delay / dt)`` (static)."""
        if self.delay <= 0:
            return 0
        return int(np.round(self.delay / self.dt))

    # ------------------------------------------------------------------ state

    def init(self, key, n_probes: int, n_channels: int, dtype=None) -> ChainState:
        """Zeroed hysteresis, walk and ring (``[C, N]``); dead taxels drawn from ``key`` (a
        reset). ``key`` may be None when the dead-taxel stage does not run. Stages that do not
        run get None (no state)."""
        dtype = dtype or jnp.result_type(float)
        shape = (n_channels, n_probes)
        st = self.active_stages
        hyst = jnp.zeros(shape, dtype) if "hysteresis" in st else None
        walk = jnp.zeros(shape, dtype) if "random_walk" in st else None
        dead = val = None
        if "dead" in st:
            if key is None:
                raise ValueError("key: a PRNG key is needed to draw dead taxels at reset")
            k1, k2 = jax.random.split(key)
            p = self.dead_taxel_probability.astype(dtype)
            dead = jax.random.uniform(k1, (n_probes,), dtype) < p
            lo, hi = (self.dead_taxel_value_range[i].astype(dtype) for i in range(2))
            val = jax.random.uniform(k2, (n_probes,), dtype) * (hi - lo) + lo
        ring = ring_init(self.ring_depth, shape, dtype)
        return ChainState(
            hyst_xi=hyst, hyst_prev=hyst, walk=walk, dead=dead, dead_value=val, ring=ring
        )

    # ------------------------------------------------------------------ stages

    def crosstalk_kernels(self, dtype, support: tuple, spacing: Array) -> Array:
        """``[G, kr, kc]`` kernels: the explicit one, or the Gaussian mix on a grid of
        ``spacing [2] = (s_v, s_u)`` (m) with the static ``support`` radius."""
        if self.crosstalk_kernel is not None:
            return self.crosstalk_kernel.astype(dtype)
        return gaussian_mix_kernel(
            self.crosstalk_strength.astype(dtype),
            self.crosstalk_sigma.astype(dtype),
            support,
            spacing.astype(dtype),
        )

    def apply_crosstalk(self, value, active, grid_shape, support, spacing, normal) -> Array:
        """Crosstalk on ``value [C, N]`` (see :func:`difftaxel.crosstalk.apply_crosstalk`);
        the identity when the stage does not run."""
        if not self.has_crosstalk:
            return value
        K = self.crosstalk_kernels(value.dtype, support, spacing)
        return apply_crosstalk(value, K, grid_shape, normal, active)

    def apply_hysteresis(self, state: ChainState, value: Array, dt) -> tuple[ChainState, Array]:
        """Single Maxwell element per channel on ``value [C, N]``."""
        if "hysteresis" not in self.active_stages:
            return state, value
        _check_layout(state.hyst_xi, value, "apply_hysteresis", "hyst_xi")
        s = self.hysteresis_strength.astype(value.dtype)
        tau = self.hysteresis_tau.astype(value.dtype)
        pos = tau > 0
        a = jnp.where(pos, jnp.exp(-jnp.asarray(dt, value.dtype) / jnp.where(pos, tau, 1.0)), 0.0)
        xi = a * state.hyst_xi + (value - state.hyst_prev)
        return replace(state, hyst_xi=xi, hyst_prev=value), value + s * xi

    def apply_hardware(self, state: ChainState, value: Array, key) -> tuple[ChainState, Array]:
        """Random walk, white noise, bias, quantisation, dead taxels (in that order) on
        ``value [C, N]``. ``key`` None draws nothing (the walk holds, no white noise)."""
        dtype = value.dtype
        st = self.active_stages
        if "random_walk" in st:
            _check_layout(state.walk, value, "apply_hardware", "walk")
        if "dead" in st:
            _check_layout(state.dead, value, "apply_hardware", "dead")

        def per(x):  # an [N, C]-broadcastable option laid out like ``value`` ([C, N])
            x = jnp.asarray(x).astype(dtype)
            if x.ndim:
                x = jnp.broadcast_to(x, value.shape[::-1]).T
            return jnp.broadcast_to(x, value.shape)

        use_rw, use_n = "random_walk" in st, "noise" in st
        C, shape = value.shape[0], value.shape
        # the draws' two halves, each where it is used: one stage's draws each (walk and
        # noise), or the upper and lower halves of the channels (a 2-D [C, N] with C even);
        # joining them would copy every draw once more
        groups = [(slice(None), None, None)]  # (channels, walk draws, noise draws)
        if key is not None and (use_rw or use_n):
            draw = hash_normal if self.noise_generator == "hash" else standard_normal
            n = int(np.prod(shape))
            if use_rw and use_n:
                a, b = normal_halves(key, 2 * n, dtype, self.noise_generator)
                groups = [(slice(None), a.reshape(shape), b.reshape(shape))]
            elif C % 2 == 0 and value.ndim == 2:
                a, b = normal_halves(key, n, dtype, self.noise_generator)
                h = (C // 2,) + shape[1:]
                a, b = a.reshape(h), b.reshape(h)
                groups = [
                    (slice(0, C // 2), *((a, None) if use_rw else (None, a))),
                    (slice(C // 2, C), *((b, None) if use_rw else (None, b))),
                ]
            else:
                z = draw(key, shape, dtype)
                groups = [(slice(None), *((z, None) if use_rw else (None, z)))]
        values, walks = [], []
        for rows, z_walk, z_noise in groups:
            v = value[rows]
            walk = state.walk[rows] if use_rw else state.walk
            if use_rw:
                if z_walk is not None:
                    walk = walk + per(self.random_walk)[rows] * z_walk
                v = v + walk
            if use_n and z_noise is not None:
                v = v + per(self.noise)[rows] * z_noise
            if "bias" in st:
                v = v + per(self.bias)[rows]
            if "resolution" in st:
                res = per(self.resolution)[rows]
                on = res > _eps(dtype)
                q = jnp.round(v / jnp.where(on, res, 1.0)) * res
                if self.straight_through:
                    q = v + jax.lax.stop_gradient(q - v)
                v = jnp.where(on, q, v)
            if "dead" in st:
                v = jnp.where(state.dead[None], state.dead_value[None].astype(dtype), v)
            values.append(v)
            walks.append(walk)
        value = values[0] if len(values) == 1 else jnp.concatenate(values)
        walk = walks[0] if len(walks) == 1 or not use_rw else jnp.concatenate(walks)
        return replace(state, walk=walk), value

    def apply_delay(self, state: ChainState, value: Array, key):
        """Push ``value [C, N]`` into the ring and read: history ``[H, C, N]`` (newest first,
        undelayed) if ``history_length > 0``, else the delayed (and jittered) reading."""
        if self.ring_depth == 0:
            return state, value
        old = state.ring
        if ring_depth(old) != self.ring_depth:
            raise ValueError(
                f"state.ring: Imperfections.apply_delay needs {self.ring_depth} past readings, "
                f"the state holds {ring_depth(old)} (it was made for other delay or history "
                "options); call init_state again"
            )
        ring = ring_push(old, value)
        state = replace(state, ring=ring)
        if self.history_length > 0:
            return state, ring_newest(ring, self.history_length)
        base = self.delay_steps
        if base >= 1:
            # read the ring before the push (new ring[k] = old ring[k - 1]): the fresh value
            # then has one reader, the ring, and is not evaluated twice
            src, base = old, base - 1
        else:
            src = ring
        if "jitter" in self.active_stages and key is not None:
            # the jittered slot is base + floor(j + u) with j <= jitter / dt <= 1 and u < 1:
            # one of two static slots, so the read is one select
            k1, k2 = jax.random.split(jax.random.fold_in(key, 7))
            j = jax.random.uniform(k1, (), value.dtype) * self.jitter.astype(value.dtype) / self.dt
            u = jax.random.uniform(k2, (), value.dtype)
            return state, jnp.where(j + u >= 1.0, ring_read(src, base + 1), ring_read(src, base))
        return state, ring_read(src, base)

    def run(self, state: ChainState, value: Array, dt, k_hw, k_d, *, gain=None, crosstalk=None):
        """The whole chain on ``value [C, N]``: crosstalk (``crosstalk`` = the arguments of
        :meth:`apply_crosstalk` after ``value``, or None), hysteresis, ``x gain [N]`` (if given),
        the hardware stages (key ``k_hw``) and the delay (key ``k_d``; keys may be None).
        Returns ``(state, value)``; ``value`` is ``[C, N]``, or ``[H, C, N]`` with history."""
        if crosstalk is not None:
            value = self.apply_crosstalk(value, *crosstalk)
        state, value = self.apply_hysteresis(state, value, dt)
        if gain is not None:
            value = value * gain[None]
        state, value = self.apply_hardware(state, value, k_hw)
        return self.apply_delay(state, value, k_d)


# ----------------------------------------------------------------------------- the ring

#: Rings up to this depth are a tuple of ``[C, N]`` arrays: a push renames buffers instead of
#: shifting the ring (a shifted array let XLA fuse the sensor kernel into the shift, which its
#: CPU backend runs unvectorised). Deeper rings are one circular buffer ``[D, C, N]`` and a head
#: index, so the program does not grow with the depth (a tuple of 10^4 arrays compiles for
#: minutes).
TUPLE_RING_MAX = 32


def _is_buffer(ring) -> bool:
    return len(ring) == 2 and getattr(ring[1], "ndim", None) == 0


def ring_init(depth: int, shape: tuple, dtype) -> tuple:
    """A zeroed ring of ``depth`` past readings of ``shape`` (``()`` for depth 0)."""
    if depth <= TUPLE_RING_MAX:
        return tuple(jnp.zeros(shape, dtype) for _ in range(depth))
    return (jnp.zeros((depth,) + tuple(shape), dtype), jnp.zeros((), jnp.int32))


def ring_depth(ring) -> int:
    """How many past readings ``ring`` holds."""
    return int(ring[0].shape[0]) if _is_buffer(ring) else len(ring)


def ring_push(ring, value: Array) -> tuple:
    """``ring`` with ``value`` as its newest reading (slot 0) and its oldest dropped."""
    if not _is_buffer(ring):
        return (value,) + tuple(ring[:-1])
    buf, head = ring
    head = (head - 1) % buf.shape[0]  # the newest slot moves back one: nothing shifts
    return (jax.lax.dynamic_update_index_in_dim(buf, value.astype(buf.dtype), head, 0), head)


def ring_read(ring, k: int) -> Array:
    """Slot ``k`` (a static int; 0 newest) of ``ring``: ``[C, N]``."""
    if not _is_buffer(ring):
        return ring[k]
    buf, head = ring
    return jax.lax.dynamic_index_in_dim(buf, (head + k) % buf.shape[0], 0, keepdims=False)


def ring_newest(ring, H: int) -> Array:
    """The newest ``H`` readings of ``ring``, newest first: ``[H, C, N]``."""
    if not _is_buffer(ring):
        return jnp.stack(ring[:H])
    buf, head = ring
    slots = (head + jax.lax.iota(jnp.int32, H)) % buf.shape[0]
    return jnp.take(buf, slots, axis=0)
