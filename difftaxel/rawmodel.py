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
import re
import zipfile
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


_DT_HEADER = re.compile(r"^#\s*dt\s*[=:]\s*([-+0-9.eE]+)\s*(s)?\s*$")


def load_raw_log(path, dt: float | None = None) -> RawLog:
    """Read a two-column text log or an NPZ log (see the module docstring).

    Every problem raises a ``ValueError`` starting with the file's name. In a text log, lines
    starting with ``#`` are comments; ``# dt = 0.01`` (s) gives the sample period.
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise ValueError(f"{p}: no such file")
    if os.path.isdir(p):
        raise ValueError(f"{p}: is a folder, expected a log file")
    if p.endswith(".npz"):
        try:
            with np.load(p, allow_pickle=False) as z:
                for k in ("raw", "force"):
                    if k not in z.files:
                        raise ValueError(f"{p}: NPZ log lacks '{k}' (see the log format)")
                raw, force = np.asarray(z["raw"], float), np.asarray(z["force"], float)
                if "dt" in z.files and dt is None:
                    dt = float(z["dt"])
        except (OSError, EOFError, zipfile.BadZipFile, TypeError) as e:
            raise ValueError(f"{p}: not a readable NPZ log ({e})") from None
    else:
        header_dt, rows = None, []
        try:
            with open(p, encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    s = line.strip()
                    if not s:
                        continue
                    if s.startswith("#"):
                        m = _DT_HEADER.match(s)
                        if m:
                            header_dt = float(m.group(1))
                        continue
                    parts = s.replace(",", " ").split()
                    try:
                        vals = [float(v) for v in parts]
                    except ValueError:
                        raise ValueError(
                            f"{p}: line {n}: expected two numbers 'raw force', got {s[:60]!r}"
                        ) from None
                    if len(vals) != 2:
                        raise ValueError(
                            f"{p}: line {n}: expected two columns (raw force), got {len(vals)}"
                        )
                    rows.append(vals)
        except UnicodeDecodeError:
            raise ValueError(f"{p}: not a text log (use .npz for an NPZ log)") from None
        arr = np.asarray(rows, float).reshape(-1, 2)
        raw, force = arr[:, :1], arr[:, 1:]
        dt = header_dt if dt is None else dt
    if raw.ndim == 1:
        raw, force = raw[:, None], force[:, None]
    if raw.shape != force.shape or raw.ndim != 2:
        raise ValueError(f"{p}: raw {raw.shape} and force {force.shape} must both be [T] or [T, N]")
    if raw.shape[0] < 2:
        raise ValueError(f"{p}: expected at least two samples, got {raw.shape[0]}")
    if not (np.all(np.isfinite(raw)) and np.all(np.isfinite(force))):
        raise ValueError(f"{p}: non-finite readings in the log")
    if dt is None or not dt > 0 or not np.isfinite(dt):
        raise ValueError(
            f"{p}: dt: expected the sample period (s) > 0, from the log or --dt, got {dt}"
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
    if not 0.0 < float(train_fraction) <= 1.0:
        raise ValueError(f"train_fraction: expected a fraction in (0, 1], got {train_fraction}")
    T = log.raw.shape[0]
    n_train = max(2, int(round(T * train_fraction)))
    flat = np.ptp(log.raw[:n_train], axis=0) == 0
    if np.any(flat):
        raise ValueError(
            f"raw: taxel(s) {np.flatnonzero(flat).tolist()} read a constant over the "
            f"{n_train} training samples: the curve is not identifiable from them"
        )
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
