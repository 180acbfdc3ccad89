"""Raw-reading model of a real glove or skin: per-taxel ADC counts -> newtons.

``F = F_ref * (smooth_relu(c - c0, w) / c_ref)^p`` (a monotone static curve of the raw counts
``c``: offset ``c0``, ``F_ref > 0`` the force ``c_ref`` counts above the offset (``c_ref`` = 1000
by default; this parameterisation keeps gain and exponent decorrelated), exponent ``p > 0``,
``w`` a fixed softness in counts)
followed by a single Maxwell element in the force domain (``xi_k = a xi_{k-1} + (F_k -
F_{k-1})``, ``y = F + s xi``, ``a = exp(-dt / tau)``), the same hysteresis as the sensors'
imperfection chain. Parameters are fitted per taxel to pairs of raw readings and a reference
force (a load cell) by :func:`fit_raw_model`, with Gauss-Newton standard deviations.

Logs: plain text with two columns ``raw force`` (one taxel; ``#`` comments; optional header
line ``# dt = 0.01``) or NPZ with ``raw [T]`` or ``[T, N]``, ``force`` (same shape) and ``dt``.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._numerics import smooth_relu
from .calibrate import fit, gauss_newton_std

Array = jax.Array

__all__ = ["RawLog", "load_raw_log", "raw_to_force", "fit_raw_model", "RawFit"]

_POSITIVE = ("force_at_ref", "exponent", "hysteresis_tau")


class RawLog(NamedTuple):
    """``raw [T, N]`` counts, ``force [T, N]`` N (reference), ``dt`` s."""

    raw: np.ndarray
    force: np.ndarray
    dt: float


def load_raw_log(path, dt: float | None = None) -> RawLog:
    """Read a two-column text log or an NPZ log (see the module docstring)."""
    p = os.fspath(path)
    if p.endswith(".npz"):
        with np.load(p, allow_pickle=False) as z:
            for k in ("raw", "force"):
                if k not in z.files:
                    raise ValueError(f"path: NPZ log lacks '{k}'")
            raw, force = np.asarray(z["raw"], float), np.asarray(z["force"], float)
            dt = float(z["dt"]) if "dt" in z.files and dt is None else dt
    else:
        header_dt = None
        with open(p) as fh:
            for line in fh:
                s = line.strip()
                if s.startswith("#") and "dt" in s and "=" in s:
                    header_dt = float(s.split("=", 1)[1])
        arr = np.loadtxt(p, comments="#", ndmin=2)
        if arr.shape[1] != 2:
            raise ValueError(f"path: expected two columns (raw force), got {arr.shape[1]}")
        raw, force = arr[:, :1], arr[:, 1:]
        dt = header_dt if dt is None else dt
    if raw.ndim == 1:
        raw, force = raw[:, None], force[:, None]
    if raw.shape != force.shape or raw.ndim != 2:
        raise ValueError(
            f"path: raw {raw.shape} and force {force.shape} must both be [T] or [T, N]"
        )
    if raw.shape[0] < 2:
        raise ValueError("path: expected at least two samples (empty time range)")
    if not (np.all(np.isfinite(raw)) and np.all(np.isfinite(force))):
        raise ValueError("path: non-finite readings in the log")
    if dt is None or not dt > 0:
        raise ValueError(
            f"dt: expected the sample period (s) > 0, from the log or the argument, got {dt}"
        )
    return RawLog(raw, force, float(dt))


def raw_to_force(
    params: dict, raw: Array, dt: float, softness: float = 20.0, ref_counts: float = 1000.0
) -> Array:
    """Forces ``[T, N]`` (N) of raw counts ``raw [T, N]``; ``params`` entries are ``[N]``:
    ``offset`` (counts), ``force_at_ref`` (N), ``exponent``, ``hysteresis_strength``,
    ``hysteresis_tau`` (s)."""
    x = smooth_relu(raw - params["offset"][None], softness) / ref_counts
    F = params["force_at_ref"][None] * jnp.exp(
        params["exponent"][None] * jnp.log(jnp.maximum(x, 1e-30))
    )
    a = jnp.exp(-dt / params["hysteresis_tau"])

    def step(carry, f):
        xi, prev = carry
        xi = a * xi + (f - prev)
        return (xi, f), f + params["hysteresis_strength"] * xi

    zeros = jnp.zeros_like(F[0])
    _, y = jax.lax.scan(step, (zeros, zeros), F)
    return y


class RawFit(NamedTuple):
    """Fitted per-taxel parameters, their Gauss-Newton standard deviations, the residual std
    on the training part, and the fit history."""

    params: dict
    std: dict
    residual_std: np.ndarray
    result: object


def fit_raw_model(
    log: RawLog, *, steps: int = 1500, learning_rate: float = 0.03, train_fraction: float = 1.0
) -> RawFit:
    """Fit the raw-reading model to ``log`` (all taxels at once, independent parameters).

    Only the first ``train_fraction`` of the samples are used (hold the rest back to validate).
    Initial values: offset at the 5th percentile of the raw counts, exponent 1, a linear curve
    matching the force range, weak hysteresis.
    """
    T = log.raw.shape[0]
    n_train = max(2, int(round(T * train_fraction)))
    raw = jnp.asarray(log.raw[:n_train])
    force = jnp.asarray(log.force[:n_train])
    N = raw.shape[1]
    c0 = np.percentile(log.raw[:n_train], 5, axis=0)
    span = np.maximum(log.raw[:n_train].max(0) - c0, 1.0)
    # the offset is optimised in thousands of counts so that Adam's per-step move (~lr) suits it
    init = {
        "offset": jnp.asarray(c0) / 1000.0,
        "force_at_ref": jnp.asarray(
            np.maximum(np.abs(log.force[:n_train]).max(0), 1e-6) * 1000.0 / span
        ),
        "exponent": jnp.ones(N),
        "hysteresis_strength": jnp.full(N, 0.05),
        "hysteresis_tau": jnp.full(N, 10 * log.dt),
    }
    fscale = float(np.abs(log.force[:n_train]).max()) or 1.0

    def unscale(p):
        return {**p, "offset": p["offset"] * 1000.0}

    def loss(p, _):
        return jnp.mean((raw_to_force(unscale(p), raw, log.dt) - force) ** 2) / fscale**2

    r = fit(
        loss,
        init,
        steps=steps,
        learning_rate=learning_rate,
        transforms={k: "log" for k in _POSITIVE},
        log_every=50,
    )
    params = unscale(r.params)
    res = np.asarray(raw_to_force(params, raw, log.dt) - force)
    std, _ = gauss_newton_std(lambda p: (raw_to_force(p, raw, log.dt) - force).reshape(-1), params)
    return RawFit(params, std, res.std(0), r)
