"""The raw-reading model: counts -> newtons (curve, delay, Maxwell hysteresis)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._numerics import smooth_relu

Array = jax.Array

__all__ = ["SOFTNESS", "REF_COUNTS", "SOFT_FRACTION", "raw_to_force"]

#: the defaults of :func:`raw_to_force` (counts); a fit chooses both from its data instead
SOFTNESS = 20.0
REF_COUNTS = 1000.0
#: a fit's softness as a fraction of its reference span (20 counts of 1000 before)
SOFT_FRACTION = 0.02
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

    ``params`` entries are ``[N]``: ``offset`` (raw units, counts or volts), ``force_at_ref``
    (N), ``exponent``, ``hysteresis_strength``, ``hysteresis_tau`` (s; samples when ``dt`` is
    None) and optionally ``delay`` (samples, signed: counts that lag the force have ``delay >
    0``). ``sign`` (+1 or -1, scalar or ``[N]``) is the direction in which counts move with
    force. ``softness`` and ``ref_counts`` (raw units, scalars or ``[N]``) fix the curve's
    rounding at the offset and the raw span ``force_at_ref`` refers to; entries of the same
    names in ``params`` (a fit's own, chosen from its data) take precedence.
    """
    softness = jnp.asarray(params.get("softness", softness))
    ref_counts = jnp.asarray(params.get("ref_counts", ref_counts))
    raw = jnp.asarray(raw)
    if raw.ndim != 2:
        raise ValueError(f"raw: expected [T, N], got shape {raw.shape}")
    step_dt = 1.0 if dt is None else float(dt)
    s = jnp.broadcast_to(jnp.asarray(sign, raw.dtype), raw.shape[1:])
    softness, ref_counts = (
        jnp.broadcast_to(v, raw.shape[1:])[None] for v in (softness, ref_counts)
    )
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
