"""Three-axis raw logs and force/torque references, each on its own clock.

A **vector log** holds a skin's raw readings: ``time [T]`` (s, the skin's clock) and ``raw [T,
N, 3]``, three raw channels per taxel (e.g. the field components Bx, By, Bz of a Hall-effect
taxel, uT; any unit). A **wrench log** holds a six-axis force/torque sensor's readings under the
array: ``time [S]`` (s, its own clock) and ``wrench [S, 6]``: force Fx Fy Fz (N) then torque Tx
Ty Tz (N m) about the sensor's origin, in the sensor frame; the wrench is the load the
environment applies to the array (negate a sensor that reports the reaction).

The two clocks differ by a **lag**: the reference's timestamps run late by ``lag`` s, so the
wrench at skin time ``t`` is the reference's sample at ``t + lag`` (:func:`wrench_at`).
:func:`coarse_lag` estimates it by cross-correlating the two logs' activity; the fit refines it
(:func:`difftaxel.rawmodel.fit_triaxial`).

Files (one session each):

* vector log, text: a line per sample ``time b1x b1y b1z b2x b2y b2z ...`` (s, then 3N raw
  values), ``#`` comments; NPZ: ``time [T]``, ``raw [T, N, 3]``.
* wrench log, text: a line per sample ``time Fx Fy Fz Tx Ty Tz`` (s, N, N m), ``#`` comments;
  NPZ: ``time [S]``, ``wrench [S, 6]``.
"""

from __future__ import annotations

import os
import zipfile
from typing import NamedTuple

import numpy as np

__all__ = [
    "VectorLog",
    "WrenchLog",
    "load_vector_log",
    "load_wrench_log",
    "wrench_at",
    "coarse_lag",
]


class VectorLog(NamedTuple):
    """``time [T]`` s (strictly increasing), ``raw [T, N, 3]`` raw units, ``name`` (for messages)."""

    time: np.ndarray
    raw: np.ndarray
    name: str | None = None

    @property
    def n_taxels(self) -> int:
        """``N``, the taxels in the log."""
        return self.raw.shape[1]


class WrenchLog(NamedTuple):
    """``time [S]`` s (its own clock), ``wrench [S, 6]`` (Fx Fy Fz N, Tx Ty Tz N m, sensor frame),
    ``name``."""

    time: np.ndarray
    wrench: np.ndarray
    name: str | None = None


def _check_time(name, t):
    t = np.asarray(t, float)
    if t.ndim != 1 or t.size < 2:
        raise ValueError(f"{name}: time: expected [T] with T >= 2 samples, got {t.shape}")
    if not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
        raise ValueError(f"{name}: time: expected finite, strictly increasing times (s)")
    return t


def checked_vector_log(log: VectorLog) -> VectorLog:
    """The log with its arrays checked (shapes, finite values), named in every error."""
    name = log.name or "raw log"
    t = _check_time(name, log.time)
    raw = np.asarray(log.raw, float)
    if raw.ndim != 3 or raw.shape[0] != t.size or raw.shape[2] != 3 or raw.shape[1] < 1:
        raise ValueError(f"{name}: raw: expected [{t.size}, N, 3], got {raw.shape}")
    if not np.all(np.isfinite(raw)):
        i = int(np.argmax(~np.isfinite(raw).all(axis=(1, 2))))
        raise ValueError(f"{name}: raw: non-finite values at sample {i} (drop the sample)")
    return VectorLog(t, raw, name)


def checked_wrench_log(log: WrenchLog) -> WrenchLog:
    """The log with its arrays checked (time, ``[S, 6]`` finite wrenches), named in errors."""
    name = log.name or "reference log"
    t = _check_time(name, log.time)
    w = np.asarray(log.wrench, float)
    if w.shape != (t.size, 6):
        raise ValueError(
            f"{name}: wrench: expected [{t.size}, 6] (Fx Fy Fz Tx Ty Tz), got {w.shape}"
        )
    if not np.all(np.isfinite(w)):
        i = int(np.argmax(~np.isfinite(w).all(axis=1)))
        raise ValueError(f"{name}: wrench: non-finite values at sample {i} (drop the sample)")
    return WrenchLog(t, w, name)


def _read_rows(p, what, width_ok, expect):
    if not os.path.exists(p):
        raise ValueError(f"{p}: no such file")
    if os.path.isdir(p):
        raise ValueError(f"{p}: is a folder, expected a {what} file")
    rows, width = [], None
    try:
        with open(p, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                s = line.strip()
                if not s or s.startswith("#"):
                    continue
                try:
                    vals = [float(v) for v in s.replace(",", " ").split()]
                except ValueError:
                    raise ValueError(
                        f"{p}: line {n}: expected numbers '{expect}', got {s[:60]!r}"
                    ) from None
                if not width_ok(len(vals)) or (width is not None and len(vals) != width):
                    raise ValueError(
                        f"{p}: line {n}: expected '{expect}' on every line, got {len(vals)} columns"
                    )
                width = len(vals)
                rows.append(vals)
    except UnicodeDecodeError:
        raise ValueError(f"{p}: not a text {what} (use .npz for NPZ)") from None
    if not rows:
        raise ValueError(f"{p}: no samples")
    return np.asarray(rows, float)


def _read_npz(p, what, keys):
    if not os.path.exists(p):
        raise ValueError(f"{p}: no such file")
    try:
        with np.load(p, allow_pickle=False) as z:
            for k in keys:
                if k not in z.files:
                    raise ValueError(f"{p}: NPZ {what} lacks '{k}' (see the format)")
            return [np.asarray(z[k], float) for k in keys]
    except (OSError, EOFError, zipfile.BadZipFile, TypeError, ValueError) as e:
        if str(e).startswith(p):
            raise
        raise ValueError(f"{p}: not a readable NPZ {what} ({e})") from None


def load_vector_log(path) -> VectorLog:
    """Read a vector log (text or NPZ, see the module docstring); errors name the file."""
    p = os.fspath(path)
    if p.endswith(".npz"):
        t, raw = _read_npz(p, "raw log", ("time", "raw"))
    else:
        a = _read_rows(p, "raw log", lambda w: w >= 4 and (w - 1) % 3 == 0, "time b1x b1y b1z ...")
        t, raw = a[:, 0], a[:, 1:].reshape(a.shape[0], -1, 3)
    return checked_vector_log(VectorLog(t, raw, p))


def load_wrench_log(path) -> WrenchLog:
    """Read a wrench log (text or NPZ, see the module docstring); errors name the file."""
    p = os.fspath(path)
    if p.endswith(".npz"):
        t, w = _read_npz(p, "reference log", ("time", "wrench"))
    else:
        a = _read_rows(p, "reference log", lambda w: w == 7, "time Fx Fy Fz Tx Ty Tz")
        t, w = a[:, 0], a[:, 1:]
    return checked_wrench_log(WrenchLog(t, w, p))


def wrench_at(ref: WrenchLog, times, lag: float) -> tuple[np.ndarray, np.ndarray]:
    """The reference resampled on the skin's clock: ``(wrench [T, 6], inside [T] bool)``.

    The wrench at skin time ``t`` is the reference's at ``t + lag`` (linear interpolation
    between its samples); ``inside`` is False where ``t + lag`` falls outside the reference's
    span (those samples hold the nearest end value and must be left out).
    """
    s = np.asarray(times, float) + float(lag)
    w = np.stack([np.interp(s, ref.time, ref.wrench[:, k]) for k in range(6)], -1)
    return w, (s >= ref.time[0]) & (s <= ref.time[-1])


def _activity(raw: np.ndarray) -> np.ndarray:
    """How far the array is from rest at each sample: the norm of the raw values past their
    per-channel median (most samples of a press log are near rest or near a press)."""
    x = raw.reshape(raw.shape[0], -1)
    return np.linalg.norm(x - np.median(x, 0), axis=1)


def coarse_lag(
    raw: VectorLog, ref: WrenchLog, max_lag: float = 0.5, step: float | None = None
) -> float:
    """The reference's lag (s) by cross-correlation of the two logs' activity.

    The skin's activity (its distance from rest) and the reference's force magnitude are
    resampled on a common grid of ``step`` s (default a quarter of the finer sample period)
    over the overlap, centred, and cross-correlated for lags in ``[-max_lag, max_lag]``; the
    peak is refined by a parabola through its neighbours. Accurate to a fraction of ``step``
    when the response is close to proportional to the load; the fit refines it.
    """
    if not (np.isfinite(max_lag) and max_lag > 0):
        raise ValueError(f"max_lag: expected a positive time (s), got {max_lag}")
    dts = (np.median(np.diff(raw.time)), np.median(np.diff(ref.time)))
    h = float(step) if step is not None else min(dts) / 4
    lo, hi = max(raw.time[0], ref.time[0] - max_lag), min(raw.time[-1], ref.time[-1] + max_lag)
    if hi - lo < 4 * max_lag:
        raise ValueError(
            f"{ref.name or 'reference'}: overlaps the raw log {raw.name or ''} for {max(hi - lo, 0):.3g} s; "
            f"expected at least 4 max_lag ({4 * max_lag:.3g} s)"
        )
    grid = np.arange(lo, hi, h)
    a = np.interp(grid, raw.time, _activity(raw.raw))
    f = np.linalg.norm(ref.wrench[:, :3], axis=1)
    K = int(np.ceil(max_lag / h))
    ext = np.arange(lo - K * h, hi + K * h, h)
    b = np.interp(ext, ref.time, f, left=f[0], right=f[-1])
    a = (a - a.mean()) / (a.std() + 1e-300)
    b = (b - b.mean()) / (b.std() + 1e-300)
    n = grid.size
    c = np.array([np.dot(a, b[k : k + n]) for k in range(2 * K + 1)])  # lag = (k - K) h
    if not np.any(np.isfinite(c)) or np.ptp(c) == 0:
        raise ValueError(
            f"{ref.name or 'reference'}: no load varies in the overlap; cannot align the clocks"
        )
    k = int(np.argmax(c))
    frac = 0.0
    if 0 < k < 2 * K:
        den = c[k - 1] - 2 * c[k] + c[k + 1]
        frac = 0.5 * (c[k - 1] - c[k + 1]) / den if den < 0 else 0.0
    return float((k - K + frac) * h)
