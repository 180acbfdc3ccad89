"""The functional sensor contract: inputs, readings, shared probe options and validation.

A sensor is an immutable pytree. Float options and arrays are leaves (differentiable); layout
shape, flags and backends are static. ::

    state = sensor.init_state(key)                    # per-episode draws; zeroed latches
    state, reading = sensor.step(state, inputs, key)  # pure; reading.measured, reading.ground_truth

Kernels are written for **one environment**; ``jax.vmap`` over environments and ``lax.scan``
over time are the caller's.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import eps as _eps
from .._numerics import smooth_relu
from .._pytree import pytree_dataclass
from .._validate import check_finite, check_pose, check_shape
from ..geometry import Bodies

Array = jax.Array

__all__ = ["SensorInputs", "Reading", "TaxelReading", "make_inputs"]


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
    """

    T_world_link: Array
    twist_link: Array
    bodies: Bodies
    body_mask: Array
    dt: Array


def make_inputs(T_world_link, bodies: Bodies, twist_link=None, body_mask=None, dt=0.01):
    """Validated :class:`SensorInputs` (host side). Defaults: zero twist, every body on, 10 ms."""
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
    return SensorInputs(
        T_world_link=jnp.asarray(T_world_link, dtype),
        twist_link=jnp.asarray(tw, dtype),
        bodies=bodies,
        body_mask=jnp.asarray(m, bool),
        dt=jnp.asarray(dt, dtype),
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
    """Genesis's per-step radius noise: ``max(0, r + (2u - 1) noise)`` where ``noise > eps``.

    ``u ~ U[0, 1)`` per probe, fresh each step from ``key``; ``r`` is returned unchanged where
    ``noise <= eps`` or ``key`` is None.
    """
    if key is None:
        return radius
    u = jax.random.uniform(key, radius.shape, radius.dtype)
    noisy = jnp.maximum(radius + (2.0 * u - 1.0) * noise, 0.0)
    return jnp.where(noise > _eps(radius.dtype), noisy, radius)


def prep_layout(name: str, pos):
    """Validate a probe layout ``[N, 3]`` or ``[ny, nx, 3]`` (m, link frame) on the host.

    Returns ``(flat [N, 3] float64 numpy, layout tuple)``; errors name ``<name>.probe_local_pos``.
    """
    p = np.asarray(pos, dtype=float)
    if p.ndim not in (2, 3) or p.shape[-1] != 3 or p.size == 0:
        raise ValueError(
            f"{name}.probe_local_pos: expected shape (N, 3) or (ny, nx, 3), got {p.shape}"
        )
    if not np.all(np.isfinite(p)):
        raise ValueError(f"{name}.probe_local_pos: expected finite values")
    return p.reshape(-1, 3), tuple(int(v) for v in p.shape[:-1])


def split3(key):
    """Three independent keys (radius noise, hardware chain, delay/jitter), or Nones."""
    if key is None:
        return None, None, None
    k = jax.random.split(key, 3)
    return k[0], k[1], k[2]


def reset_gain_and_chain(sensor, key, n_channels, channels_first: bool = False):
    """A reset's per-episode draws: ``(probe_gain [N], chain state)``.

    The gain is ``sensor.probe_gain`` or, with ``probe_gain_resample_range=(lo, hi)``, drawn
    ``U(lo, hi)`` per probe from ``key``; dead taxels are drawn by the imperfection chain.
    ``channels_first``: the chain state is laid out ``[C, N]`` (taxel sensors).
    """
    g = sensor.probe_gain
    k_gain = k_chain = None
    if key is not None:
        k_gain, k_chain = jax.random.split(key)
    if sensor.probe_gain_resample_range is not None:
        if key is None:
            raise ValueError(
                f"key: {type(sensor).__name__}.init_state needs a PRNG key to resample probe_gain"
            )
        lo, hi = sensor.probe_gain_resample_range
        g = jax.random.uniform(k_gain, g.shape, g.dtype, lo, hi)
    chain = sensor.imperfections.init(k_chain, g.shape[0], n_channels, g.dtype, channels_first)
    return g, chain
