"""The raw-reading model: counts -> newtons (curve, delay, Maxwell hysteresis)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._numerics import smooth_relu

Array = jax.Array

__all__ = ["SOFTNESS", "REF_COUNTS", "raw_to_force"]

SOFTNESS = 20.0
REF_COUNTS = 1000.0
_CURVE = ("force_at_ref", "exponent", "hysteresis_strength", "hysteresis_tau", "delay")


def _shift(F: Array, delay: Array) -> Array:
    """``F[k + delay]`` per column (linear interpolation, clamped at both ends)."""
    T = F.shape[0]
    t = jnp.arange(T, dtype=F.dtype)[:, None] + delay[None]
    t = jnp.clip(t, 0.0, T - 1.0)
    i0 = jnp.clip(jnp.floor(t), 0, T - 2).astype(jnp.int32) if T > 1 else jnp.zeros_like(t, int)
    f = t - i0
    g0 = jnp.take_along_axis(F, i0, axis=0)
    g1 = jnp.take_along_axis(F, jnp.minimum(i0 + 1, T - 1), axis=0)
    return g0 + f * (g1 - g0)


def raw_to_force(
    params: dict,
    raw: Array,
    dt: float | None = None,
    sign=1.0,
    softness: float = SOFTNESS,
    ref_counts: float = REF_COUNTS,
) -> Array:
    """Forces ``[T, N]`` (N) of raw counts ``raw [T, N]`` (the module's model).

    ``params`` entries are ``[N]``: ``offset`` (counts), ``force_at_ref`` (N), ``exponent``,
    ``hysteresis_strength``, ``hysteresis_tau`` (s; samples when ``dt`` is None) and optionally
    ``delay`` (samples, signed: counts that lag the force have ``delay > 0``). ``sign`` (+1 or
    -1, scalar or ``[N]``) is the direction in which counts move with force.
    """
    raw = jnp.asarray(raw)
    if raw.ndim != 2:
        raise ValueError(f"raw: expected [T, N], got shape {raw.shape}")
    step_dt = 1.0 if dt is None else float(dt)
    s = jnp.broadcast_to(jnp.asarray(sign, raw.dtype), raw.shape[1:])
    x = smooth_relu(s[None] * (raw - params["offset"][None]), softness) / ref_counts
    F = params["force_at_ref"][None] * jnp.exp(
        params["exponent"][None] * jnp.log(jnp.maximum(x, 1e-30))
    )
    if "delay" in params:
        F = _shift(F, params["delay"])
    a = jnp.exp(-step_dt / params["hysteresis_tau"])

    def step(carry, f):
        xi, prev = carry
        xi = a * xi + (f - prev)
        return (xi, f), f + params["hysteresis_strength"] * xi

    _, y = jax.lax.scan(step, (jnp.zeros_like(F[0]), F[0]), F)
    return y
