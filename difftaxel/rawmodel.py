"""Raw-reading model of a real glove or skin: per-taxel ADC counts -> newtons, fitted to real logs.

The model, per taxel::

    x_k = smooth_relu(s (c_{k+d} - c0), w) / c_ref           (counts; s = +1 or -1)
    F_k = F_ref x_k^p                                          (static curve, N)
    xi_k = a xi_{k-1} + (F_k - F_{k-1}),  a = exp(-dt / tau)   (one Maxwell element)
    y_k = F_k + h xi_k                                         (predicted force, N)

* ``s`` is the **sign** of the response: counts rise with force (+1, a piezoresistive divider
  on the high side) or fall with it (-1). It is detected from the data (rank correlation) or
  declared; a declaration the data contradicts is an error, and data with no monotone response
  is an error, never a silently wrong fit.
* ``c0`` is the **offset** (counts), one per log when several logs are fitted together (the
  same element under different covers or re-seated: the curve is shared, the rest level is
  not); ``F_ref > 0`` is the force ``c_ref`` counts past the offset (``c_ref`` = 1000 keeps
  gain and exponent decorrelated); ``p > 0`` the exponent; ``w`` a fixed softness in counts.
* ``d`` is an optional **channel delay** in samples (signed, fractional; linear
  interpolation, clamped at the ends): a delay between the ADC and the load cell is fitted as
  such instead of being absorbed by the hysteresis.
* ``h``, ``tau``: hysteresis strength and time constant (s, or samples without ``dt``). ``tau``
  is bounded below by one sample: a shorter time constant only mimics a delay.
* **Saturation**: samples whose counts sit on the ADC's floor or ceiling carry no force
  information beyond a bound. Their levels are detected (or declared) and the samples are
  *censored* (they cost only when the prediction is on the wrong side of the bound) or masked.

:func:`fit_raw_model` fits all of this per taxel with optional per-sample weights, and reports
sandwich (autocorrelation-consistent) standard deviations next to the Gauss-Newton ones: on real
logs the residuals are not white, and Gauss-Newton is then over-confident.

Logs: plain text with two columns ``raw force`` or three ``time raw force`` (time in s;
``#`` comments; optional header line ``# dt = 0.01``), or NPZ with ``raw [T]`` or ``[T, N]``,
``force`` (same shape) and optionally ``dt`` or ``time [T]``. Without any time information the
log is in **sample units** (``dt = None``): ``tau`` is then in samples.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._numerics import smooth_relu
from .calibrate import fit, gauss_newton_std, levenberg_marquardt, sandwich_std

Array = jax.Array

__all__ = [
    "RawLog",
    "RawFit",
    "Saturation",
    "load_raw_log",
    "raw_to_force",
    "detect_sign",
    "detect_saturation",
    "fit_raw_model",
    "save_raw_params",
    "load_raw_params",
]

SOFTNESS = 20.0
REF_COUNTS = 1000.0
_CURVE = ("force_at_ref", "exponent", "hysteresis_strength", "hysteresis_tau", "delay")


class RawLog(NamedTuple):
    """``raw [T, N]`` counts, ``force [T, N]`` N (reference), ``dt`` s (None: sample units)."""

    raw: np.ndarray
    force: np.ndarray
    dt: float | None = None


class Saturation(NamedTuple):
    """Per-taxel ADC limits ``lo [N]``, ``hi [N]`` (counts; NaN where there is none)."""

    lo: np.ndarray
    hi: np.ndarray

    def masks(self, raw: np.ndarray, tol: float = 0.0):
        """``(at_lo, at_hi)`` bool ``[T, N]``: samples at or beyond each limit (within ``tol``)."""
        raw = np.asarray(raw, float)
        with np.errstate(invalid="ignore"):
            at_lo = np.isfinite(self.lo)[None] & (raw <= self.lo[None] + tol)
            at_hi = np.isfinite(self.hi)[None] & (raw >= self.hi[None] - tol)
        return at_lo, at_hi


_DT_HEADER = re.compile(r"^#\s*dt\s*[=:]\s*([-+0-9.eE]+)\s*(s)?\s*$")


def _dt_from_time(p, time) -> float:
    d = np.diff(np.asarray(time, float))
    if d.size == 0 or not np.all(np.isfinite(d)) or np.any(d <= 0):
        raise ValueError(f"{p}: time: expected strictly increasing sample times (s)")
    return float(np.median(d))


def load_raw_log(path, dt: float | None = None) -> RawLog:
    """Read a text or NPZ log (see the module docstring).

    ``dt`` (s), if given, overrides the log's own; without a time column, a ``# dt`` header or
    an NPZ ``dt``/``time``, the log is in sample units (``RawLog.dt is None``). Every problem
    raises a ``ValueError`` starting with the file's name.
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise ValueError(f"{p}: no such file")
    if os.path.isdir(p):
        raise ValueError(f"{p}: is a folder, expected a log file")
    file_dt = None
    if p.endswith(".npz"):
        try:
            with np.load(p, allow_pickle=False) as z:
                for k in ("raw", "force"):
                    if k not in z.files:
                        raise ValueError(f"{p}: NPZ log lacks '{k}' (see the log format)")
                raw, force = np.asarray(z["raw"], float), np.asarray(z["force"], float)
                if "dt" in z.files:
                    file_dt = float(z["dt"])
                elif "time" in z.files:
                    file_dt = _dt_from_time(p, z["time"])
        except (OSError, EOFError, zipfile.BadZipFile, TypeError) as e:
            raise ValueError(f"{p}: not a readable NPZ log ({e})") from None
    else:
        rows, width = [], None
        try:
            with open(p, encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    s = line.strip()
                    if not s:
                        continue
                    if s.startswith("#"):
                        m = _DT_HEADER.match(s)
                        if m:
                            file_dt = float(m.group(1))
                        continue
                    parts = s.replace(",", " ").split()
                    try:
                        vals = [float(v) for v in parts]
                    except ValueError:
                        raise ValueError(
                            f"{p}: line {n}: expected numbers 'raw force' or 'time raw force', "
                            f"got {s[:60]!r}"
                        ) from None
                    if len(vals) not in (2, 3) or (width is not None and len(vals) != width):
                        raise ValueError(
                            f"{p}: line {n}: expected two columns (raw force) or three (time raw "
                            f"force) on every line, got {len(vals)}"
                        )
                    width = len(vals)
                    rows.append(vals)
        except UnicodeDecodeError:
            raise ValueError(f"{p}: not a text log (use .npz for an NPZ log)") from None
        arr = np.asarray(rows, float).reshape(-1, width or 2)
        if width == 3:
            if np.all(np.isfinite(arr[:, 0])):
                file_dt = _dt_from_time(p, arr[:, 0])
            arr = arr[:, 1:]
        raw, force = arr[:, :1], arr[:, 1:]
    if raw.ndim == 1:
        raw, force = raw[:, None], force[:, None]
    if raw.shape != force.shape or raw.ndim != 2:
        raise ValueError(f"{p}: raw {raw.shape} and force {force.shape} must both be [T] or [T, N]")
    if raw.shape[0] < 2:
        raise ValueError(f"{p}: expected at least two samples, got {raw.shape[0]}")
    if not (np.all(np.isfinite(raw)) and np.all(np.isfinite(force))):
        raise ValueError(f"{p}: non-finite readings in the log")
    dt = file_dt if dt is None else dt
    if dt is not None and (not dt > 0 or not np.isfinite(dt)):
        raise ValueError(f"{p}: dt: expected the sample period (s) > 0, got {dt}")
    return RawLog(raw, force, None if dt is None else float(dt))


# ----------------------------------------------------------------------------- the model


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


# ----------------------------------------------------------------------------- detection


def _ranks(x: np.ndarray) -> np.ndarray:
    r = np.empty_like(x, dtype=float)
    order = np.argsort(x, axis=0, kind="stable")
    np.put_along_axis(r, order, np.arange(x.shape[0], dtype=float)[:, None], axis=0)
    return r


def _rank_corr(raw: np.ndarray, force: np.ndarray, keep: np.ndarray) -> np.ndarray:
    out = np.zeros(raw.shape[1])
    for i in range(raw.shape[1]):  # host-side, once per fit
        k = keep[:, i]
        if k.sum() < 3:
            continue
        a, b = _ranks(raw[k, i][:, None])[:, 0], _ranks(force[k, i][:, None])[:, 0]
        a, b = a - a.mean(), b - b.mean()
        den = np.sqrt(np.sum(a * a) * np.sum(b * b))
        out[i] = np.sum(a * b) / den if den > 0 else 0.0
    return out


def detect_saturation(
    raw: np.ndarray, force: np.ndarray, min_fraction: float = 0.01, min_spread: float = 0.05
) -> Saturation:
    """ADC limits from a log: ``raw``, ``force`` ``[T, N]``.

    A taxel's lowest (highest) count is a saturation level when at least ``min_fraction`` of
    the samples (and at least 3) sit on it while the reference force there spreads over more
    than ``min_spread`` of the force's range (standard deviation): a stuck channel under a
    changing load. A rest level (the force constant there, to its noise) is not a limit.
    """
    raw, force = np.asarray(raw, float), np.asarray(force, float)
    T, N = raw.shape
    lo, hi = np.full(N, np.nan), np.full(N, np.nan)
    need = max(3, int(np.ceil(min_fraction * T)))
    for i in range(N):  # host-side, once per fit
        rng = np.ptp(force[:, i])
        for level, out in ((raw[:, i].min(), lo), (raw[:, i].max(), hi)):
            on = raw[:, i] == level
            if on.sum() >= need and rng > 0 and force[on, i].std() > min_spread * rng:
                out[i] = level
    return Saturation(lo, hi)


def detect_sign(raw: np.ndarray, force: np.ndarray, keep: np.ndarray | None = None, min_corr=0.3):
    """``(sign [N], rank correlation [N])`` of counts against force over the ``keep`` samples.

    Raises ``ValueError`` naming the taxels whose |rank correlation| is below ``min_corr``: the
    counts do not move monotonically with the force, and no sign fits them.
    """
    raw, force = np.asarray(raw, float), np.asarray(force, float)
    keep = np.ones(raw.shape, bool) if keep is None else keep
    rho = _rank_corr(raw, force, keep)
    weak = np.flatnonzero(np.abs(rho) < min_corr)
    if weak.size:
        raise ValueError(
            f"raw: taxel(s) {weak.tolist()} do not move monotonically with the force (rank "
            f"correlation {np.round(rho[weak], 3).tolist()}, need |rho| >= {min_corr}); "
            "no raw model fits them"
        )
    return np.where(rho > 0, 1.0, -1.0), rho


# ----------------------------------------------------------------------------- fitting


class RawFit(NamedTuple):
    """Result of :func:`fit_raw_model`.

    Attributes:
      params: fitted parameters, ``[N]`` each; ``offset`` is ``[N]`` for one log, ``[L, N]``
        for ``L`` logs.
      std: sandwich (autocorrelation-consistent) standard deviations, same structure.
      std_gauss_newton: the Gauss-Newton ones (right only for white residuals).
      sign: ``[N]`` +1 (counts rise with force) or -1.
      saturation: the :class:`Saturation` limits used.
      residual_std: ``[N]`` residual std (N) on the uncensored training samples.
      held_out_rmse: ``[N]`` RMSE (N) on the uncensored held-back samples, or None.
      n_censored: ``[N]`` samples at a saturation limit (all logs).
      settle: samples masked after each saturated run.
      dt: the logs' sample period (s) or None (sample units).
      result: the :class:`~difftaxel.calibrate.FitResult`.
    """

    params: dict
    std: dict
    std_gauss_newton: dict
    sign: np.ndarray
    saturation: Saturation
    residual_std: np.ndarray
    held_out_rmse: np.ndarray | None
    n_censored: np.ndarray
    settle: int
    dt: float | None
    result: object

    def predict(self, log: RawLog, log_index: int = 0) -> np.ndarray:
        """Predicted forces ``[T, N]`` (N) of ``log``'s counts with log ``log_index``'s offset."""
        return predict(self.params, self.sign, log, log_index)


def predict(params: dict, sign, log: RawLog, log_index: int = 0) -> np.ndarray:
    """Forces ``[T, N]`` (N) predicted from ``log.raw`` by fitted ``params`` (see :class:`RawFit`)."""
    off = jnp.asarray(params["offset"])
    if off.ndim == 2:
        if not 0 <= log_index < off.shape[0]:
            raise ValueError(f"log_index: expected 0..{off.shape[0] - 1}, got {log_index}")
        off = off[log_index]
    if np.shape(log.raw)[1:] != tuple(off.shape):
        raise ValueError(
            f"raw: the log has {np.shape(log.raw)[1:]} taxels, the parameters {off.shape}"
        )
    p = {**{k: jnp.asarray(v) for k, v in params.items()}, "offset": off}
    return np.asarray(raw_to_force(p, jnp.asarray(log.raw, float), log.dt, jnp.asarray(sign)))


def _as_logs(logs) -> list[RawLog]:
    if isinstance(logs, RawLog):
        return [logs]
    if not isinstance(logs, Sequence) or not logs or not all(isinstance(g, RawLog) for g in logs):
        raise TypeError("logs: expected a RawLog or a non-empty sequence of RawLog")
    N = logs[0].raw.shape[1]
    for i, g in enumerate(logs):
        if g.raw.shape[1] != N:
            raise ValueError(f"logs[{i}]: {g.raw.shape[1]} taxels, logs[0] has {N}")
        if (g.dt is None) != (logs[0].dt is None):
            raise ValueError(f"logs[{i}]: mixes sample units (dt None) with seconds")
    return list(logs)


def _check_weights(weights, logs):
    if weights is None:
        return [np.ones(g.raw.shape) for g in logs]
    ws = [weights] if len(logs) == 1 and not isinstance(weights, (list, tuple)) else weights
    if len(ws) != len(logs):
        raise ValueError(f"weights: expected one array per log ({len(logs)}), got {len(ws)}")
    out = []
    for i, (w, g) in enumerate(zip(ws, logs)):
        w = np.asarray(w, float)
        if w.ndim == 1:
            w = w[:, None]
        try:
            w = np.broadcast_to(w, g.raw.shape).copy()
        except ValueError:
            raise ValueError(
                f"weights[{i}]: expected [T] or [T, N] = {g.raw.shape}, got {np.shape(w)}"
            ) from None
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"weights[{i}]: expected finite non-negative weights")
        out.append(w)
    return out


def fit_raw_model(
    logs,
    *,
    sign: str = "auto",
    saturation="auto",
    censor: str = "censor",
    delay: bool = False,
    weights=None,
    steps: int = 1500,
    learning_rate: float = 0.03,
    train_fraction: float = 1.0,
    settle="auto",
    lm_steps: int = 30,
) -> RawFit:
    """Fit the raw-reading model (module docstring) to one log or several.

    Args:
      logs: a :class:`RawLog` or a sequence of them (same taxels); the curve, exponent,
        hysteresis and delay are shared across logs, each log has its own ``offset``.
      sign: ``"auto"`` (rank correlation of counts and force), ``"increasing"`` or
        ``"decreasing"`` (checked against the data: a contradiction raises).
      saturation: ``"auto"`` (:func:`detect_saturation` over all logs), ``None`` (no limits) or
        ``(lo, hi)`` counts (scalars or ``[N]``; ``None`` or NaN for no limit on that side).
      censor: ``"censor"``: a sample at a limit costs only if the prediction is on the wrong
        side of the force the limit bounds (a count stuck at the high-force end says "at least
        this much force"); ``"mask"``: such samples cost nothing.
      delay: also fit a channel delay (samples).
      weights: per-sample weights ``[T]`` or ``[T, N]`` (a list, one per log), non-negative.
      steps, learning_rate: Adam on the loss (mean weighted squared error / force range^2).
      settle: samples after a saturated run that are masked as well (the hysteresis state is
        unknown after a stretch of unobserved force); ``"auto"``: fit once without, then again
        with ``ceil(3 tau)`` samples (only when some sample is saturated).
      lm_steps: Levenberg-Marquardt iterations that polish Adam's result (0: none).
      train_fraction: the first fraction of each log is fitted, the rest held back
        (``held_out_rmse``).

    Errors (``ValueError`` naming the argument): a constant channel, counts not monotone in the
    force, a declared ``sign`` the data contradicts, bad weights or limits.
    """
    logs = _as_logs(logs)
    if isinstance(settle, str):
        if settle != "auto":
            raise ValueError(f"settle: expected 'auto' or an int >= 0, got {settle!r}")
        kw = dict(
            sign=sign,
            saturation=saturation,
            censor=censor,
            delay=delay,
            weights=weights,
            steps=steps,
            learning_rate=learning_rate,
            train_fraction=train_fraction,
            lm_steps=lm_steps,
        )
        first = fit_raw_model(logs, settle=0, **kw)
        if not first.n_censored.any():
            return first
        dt_unit = 1.0 if first.dt is None else float(min(g.dt for g in logs))
        n = int(np.ceil(3.0 * float(np.max(first.params["hysteresis_tau"])) / dt_unit))
        return fit_raw_model(logs, settle=n, **kw)
    if not (isinstance(settle, (int, np.integer)) and settle >= 0):
        raise ValueError(f"settle: expected 'auto' or an int >= 0, got {settle!r}")
    if not 0.0 < float(train_fraction) <= 1.0:
        raise ValueError(f"train_fraction: expected a fraction in (0, 1], got {train_fraction}")
    if sign not in ("auto", "increasing", "decreasing"):
        raise ValueError(f"sign: expected 'auto', 'increasing' or 'decreasing', got {sign!r}")
    if censor not in ("censor", "mask"):
        raise ValueError(f"censor: expected 'censor' or 'mask', got {censor!r}")
    ws = _check_weights(weights, logs)
    N, L = logs[0].raw.shape[1], len(logs)
    n_tr = [max(2, int(round(g.raw.shape[0] * train_fraction))) for g in logs]
    raw_all = np.concatenate([g.raw for g in logs])
    force_all = np.concatenate([g.force for g in logs])

    if isinstance(saturation, str):
        if saturation != "auto":
            raise ValueError(f"saturation: expected 'auto', None or (lo, hi), got {saturation!r}")
        sat = detect_saturation(raw_all, force_all)
    elif saturation is None:
        sat = Saturation(np.full(N, np.nan), np.full(N, np.nan))
    else:
        try:
            lo, hi = saturation
        except (TypeError, ValueError):
            raise ValueError(f"saturation: expected (lo, hi), got {saturation!r}") from None
        lo, hi = (
            np.broadcast_to(np.nan if v is None else np.asarray(v, float), (N,)).copy()
            for v in (lo, hi)
        )
        if np.any(lo >= hi):
            raise ValueError(f"saturation: expected lo < hi, got {lo} and {hi}")
        sat = Saturation(lo, hi)
    masks = [sat.masks(g.raw) for g in logs]
    free = [~(a | b) for a, b in masks]
    for f in free:
        recent = ~f
        for k in range(1, int(settle) + 1):  # host-side mask, once per fit
            f[k:] &= ~recent[:-k]

    tr = [slice(0, n) for n in n_tr]
    flat = np.zeros(N, bool)
    for g, s, f in zip(logs, tr, free):
        flat |= np.array(
            [np.ptp(g.raw[s, i][f[s, i]]) == 0 if f[s, i].any() else True for i in range(N)]
        )
    if np.any(flat):
        raise ValueError(
            f"raw: taxel(s) {np.flatnonzero(flat).tolist()} read a constant over the "
            "unsaturated training samples: the curve is not identifiable from them"
        )
    keep = np.concatenate([f[s] for f, s in zip(free, tr)])
    raw_tr = np.concatenate([g.raw[s] for g, s in zip(logs, tr)])
    force_tr = np.concatenate([g.force[s] for g, s in zip(logs, tr)])
    sgn, rho = detect_sign(raw_tr, force_tr, keep)
    if sign != "auto":
        want = 1.0 if sign == "increasing" else -1.0
        bad = np.flatnonzero(sgn != want)
        if bad.size:
            raise ValueError(
                f"sign: declared {sign!r}, but the counts of taxel(s) {bad.tolist()} move the "
                f"other way with force (rank correlation {np.round(rho[bad], 3).tolist()})"
            )
    # high-force end of each taxel's range: the ceiling when counts rise with force
    hi_force = [np.where(sgn[None] > 0, b, a) for a, b in masks]
    lo_force = [np.where(sgn[None] > 0, a, b) for a, b in masks]

    dt_unit = 1.0 if logs[0].dt is None else float(min(g.dt for g in logs))
    inits = []
    for g, s, f in zip(logs, tr, free):
        r = np.where(f[s], g.raw[s], np.nan)
        inits.append(
            np.where(sgn > 0, np.nanpercentile(r, 5, axis=0), np.nanpercentile(r, 95, axis=0))
        )
    c0 = np.stack(inits)
    span = np.maximum(np.nanmax(np.abs(np.where(keep, raw_tr, np.nan) - c0[0]), 0), 1.0)
    fmax = np.maximum(np.nanmax(np.abs(np.where(keep, force_tr, np.nan)), 0), 1e-6)
    init = {
        "offset": jnp.asarray(c0) / 1000.0,
        "force_at_ref": jnp.asarray(fmax * REF_COUNTS / span),
        "exponent": jnp.ones(N),
        "hysteresis_strength": jnp.full(N, 0.05),
        "hysteresis_tau_excess": jnp.full(N, 9.0 * dt_unit),
    }
    if delay:
        init["delay"] = jnp.zeros(N)
    fscale = float(np.abs(force_tr[keep]).max()) if keep.any() else 1.0
    fscale = fscale or 1.0
    sgn_j = jnp.asarray(sgn)
    # settling samples (neither free nor at a limit) weigh nothing
    ws = [np.where(f | a | b, w, 0.0) for w, f, (a, b) in zip(ws, free, masks)]
    data = [
        (
            jnp.asarray(g.raw[s]),
            jnp.asarray(g.force[s]),
            jnp.asarray(w[s]),
            jnp.asarray(h[s]),
            jnp.asarray(lw[s]),
            g.dt,
        )
        for g, s, w, h, lw in zip(logs, tr, ws, hi_force, lo_force)
    ]

    def public(p):
        out = {k: v for k, v in p.items() if k != "hysteresis_tau_excess"}
        out["offset"] = p["offset"] * 1000.0
        out["hysteresis_tau"] = dt_unit + p["hysteresis_tau_excess"]
        return out

    def residuals(q, censored=True):
        res = []
        for li, (raw, force, _, h, lw, dt) in enumerate(data):
            y = raw_to_force({**q, "offset": q["offset"][li]}, raw, dt, sgn_j)
            r = y - force
            if censored and censor == "censor":
                r = jnp.where(h, jnp.maximum(r, 0.0), jnp.where(lw, jnp.minimum(r, 0.0), r))
            elif censored:
                r = jnp.where(h | lw, 0.0, r)
            res.append(r)
        return res

    wsum = sum(float(d[2].sum()) for d in data)
    if not wsum > 0:
        raise ValueError("weights: every training sample has weight 0")

    def loss(p, _):
        rs = residuals(public(p))
        return sum(jnp.sum(d[2] * r * r) for d, r in zip(data, rs)) / (wsum * fscale**2)

    r = fit(
        loss,
        init,
        steps=steps,
        learning_rate=learning_rate,
        transforms={"force_at_ref": "log", "exponent": "log", "hysteresis_tau_excess": "log"},
        log_every=50,
    )

    def weighted(q):
        rs = residuals(q)
        return jnp.concatenate([jnp.sqrt(d[2]) * r for d, r in zip(data, rs)])

    # Adam finds the basin; Levenberg-Marquardt (a few dozen parameters) lands on the minimum,
    # which Adam's fixed step size only approaches to a fraction of the noise floor
    pos = ("force_at_ref", "exponent", "hysteresis_tau_excess")
    u0 = {k: jnp.log(v) if k in pos else v for k, v in r.params.items()}
    u, _ = levenberg_marquardt(
        lambda u: weighted(public({k: jnp.exp(v) if k in pos else v for k, v in u.items()})),
        u0,
        steps=lm_steps,
    )
    params = public({k: jnp.exp(v) if k in pos else v for k, v in u.items()})

    std, _, _ = sandwich_std(weighted, params)
    std_gn, _ = gauss_newton_std(lambda q: weighted(q).reshape(-1), params)
    rs = np.concatenate([np.asarray(x) for x in residuals(params, censored=False)])
    res_std = np.array([rs[keep[:, i], i].std() if keep[:, i].any() else np.nan for i in range(N)])
    held = None
    if any(n < g.raw.shape[0] for n, g in zip(n_tr, logs)):
        sq, cnt = np.zeros(N), np.zeros(N)
        for li, (g, n, f) in enumerate(zip(logs, n_tr, free)):
            pred = predict(params, sgn, g, li)
            m = f[n:]
            sq += np.sum(np.where(m, (pred[n:] - g.force[n:]) ** 2, 0.0), 0)
            cnt += m.sum(0)
        held = np.sqrt(sq / np.maximum(cnt, 1))
    if L == 1:
        params["offset"] = params["offset"][0]
        std["offset"] = std["offset"][0]
        std_gn["offset"] = std_gn["offset"][0]
    n_cens = sum((a | b).sum(0) for a, b in masks)
    to_np = lambda d: {k: np.asarray(v) for k, v in d.items()}  # noqa: E731
    return RawFit(
        to_np(params),
        to_np(std),
        to_np(std_gn),
        sgn,
        sat,
        res_std,
        held,
        np.asarray(n_cens),
        int(settle),
        logs[0].dt,
        r,
    )


# ----------------------------------------------------------------------------- files


def save_raw_params(path, f: RawFit) -> None:
    """Write a fit's parameters (JSON, atomically: an existing file is replaced whole or kept)."""
    from ._files import atomic_write

    doc = {
        "format": "difftaxel.rawmodel",
        "version": 1,
        "units": {
            "offset": "counts",
            "force_at_ref": "N",
            "hysteresis_tau": "samples" if f.dt is None else "s",
            "delay": "samples",
        },
        "dt": f.dt,
        "softness": SOFTNESS,
        "ref_counts": REF_COUNTS,
        "sign": np.asarray(f.sign).tolist(),
        "saturation": {
            "lo": [None if np.isnan(v) else float(v) for v in f.saturation.lo],
            "hi": [None if np.isnan(v) else float(v) for v in f.saturation.hi],
        },
        "params": {k: np.asarray(v).tolist() for k, v in f.params.items()},
        "std": {k: np.asarray(v).tolist() for k, v in f.std.items()},
    }
    text = json.dumps(doc, indent=1)
    atomic_write(path, lambda fh: fh.write(text), "w")


def load_raw_params(path):
    """Read :func:`save_raw_params`'s file: ``(params dict of arrays, sign [N], dt,
    Saturation)``."""
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: not a raw-model parameter file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != "difftaxel.rawmodel":
        raise ValueError(f"{p}: not a raw-model parameter file (format 'difftaxel.rawmodel')")
    try:
        params = {k: np.asarray(v, float) for k, v in doc["params"].items()}
        sign = np.asarray(doc["sign"], float)
        sat = Saturation(
            *(
                np.asarray([np.nan if v is None else v for v in doc["saturation"][k]], float)
                for k in ("lo", "hi")
            )
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{p}: malformed parameter file ({e})") from None
    missing = {"offset", "force_at_ref", "exponent", "hysteresis_strength", "hysteresis_tau"} - set(
        params
    )
    if missing:
        raise ValueError(f"{p}: parameters lack {sorted(missing)}")
    return params, sign, doc.get("dt"), sat
