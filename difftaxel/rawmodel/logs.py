"""Raw logs on disk, and what is detected in them: the response's sign, ADC saturation."""

from __future__ import annotations

import os
import re
import zipfile
from typing import NamedTuple

import jax
import numpy as np

Array = jax.Array

__all__ = ["RawLog", "Saturation", "load_raw_log", "detect_sign", "detect_saturation"]


class RawLog(NamedTuple):
    """``raw [T, N]`` raw values (counts, volts), ``force [T, N]`` N (reference), ``dt`` s
    (None: sample units), ``name`` (the file it came from, for messages)."""

    raw: np.ndarray
    force: np.ndarray
    dt: float | None = None
    name: str | None = None


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


_DT_LINE = re.compile(r"^#\s*dt\s*[=:]", re.IGNORECASE)
_DT_HEADER = re.compile(r"^#\s*dt\s*[=:]\s*([-+0-9.eE]+)\s*(s|ms|us)?\s*$", re.IGNORECASE)
_DT_UNITS = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}


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
        except (OSError, EOFError, zipfile.BadZipFile, TypeError, ValueError) as e:
            if str(e).startswith(p):
                raise
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
                        if _DT_LINE.match(s):  # a time header is read, or refused: never skipped
                            m = _DT_HEADER.match(s)
                            try:
                                v = float(m.group(1)) if m else np.nan
                            except ValueError:
                                v = np.nan
                            if not (np.isfinite(v) and v > 0):
                                raise ValueError(
                                    f"{p}: line {n}: expected '# dt = PERIOD' with PERIOD > 0 in "
                                    f"s (or ms, us), got {s[:60]!r}"
                                )
                            file_dt = v * _DT_UNITS[m.group(2) and m.group(2).lower()]
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
            file_dt = _dt_from_time(p, arr[:, 0])  # NaN or disordered times are refused
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
    return RawLog(raw, force, None if dt is None else float(dt), p)


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
