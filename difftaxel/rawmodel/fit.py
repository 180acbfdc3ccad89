"""Fitting the raw-reading model to one log or several, and saved parameters."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..calibrate import fit, gauss_newton_std, levenberg_marquardt, sandwich_std
from .logs import RawLog, Saturation, detect_saturation, detect_sign
from .model import REF_COUNTS, SOFTNESS, raw_to_force

Array = jax.Array

__all__ = ["RawFit", "predict", "fit_raw_model", "save_raw_params", "load_raw_params"]


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
    from .._files import atomic_write

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
