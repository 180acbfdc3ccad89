"""Fitting the raw-reading model to one log or several, and saved parameters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..calibrate import fit, gauss_newton_std, levenberg_marquardt, sandwich_std
from .logs import RawLog, Saturation, detect_saturation, detect_sign
from .model import SOFT_FRACTION, raw_to_force
from .params import RawParams, predict

Array = jax.Array

__all__ = ["RawFit", "fit_raw_model", "dead_band_warnings"]

#: parameters that are positive by construction (fitted in log space)
_POSITIVE = ("force_at_ref", "exponent", "hysteresis_tau")


class RawFit(NamedTuple):
    """Result of :func:`fit_raw_model`.

    Attributes:
      params: fitted parameters, ``[N]`` each; ``offset`` is ``[N]`` for one log, ``[L, N]``
        for ``L`` logs.
      std: sandwich (autocorrelation-consistent) standard deviations, same structure; ``inf``
        where the data does not determine a parameter (see ``undetermined``).
      std_gauss_newton: the Gauss-Newton ones (right only for white residuals).
      sign: ``[N]`` +1 (counts rise with force) or -1.
      saturation: the :class:`Saturation` limits used.
      residual_std: ``[N]`` residual std (N) on the uncensored training samples.
      held_out_rmse: ``[N]`` RMSE (N) on the uncensored held-back samples, or None.
      n_censored: ``[N]`` samples at a saturation limit (all logs).
      settle: samples masked after each saturated run.
      dt: the logs' sample period (s) or None (sample units).
      result: the :class:`~difftaxel.calibrate.FitResult`.
      scale: ``{"ref_counts": [N], "softness": [N]}`` in raw units, chosen from the data (the
        span of the raw values past the offset, and ``SOFT_FRACTION`` of it): the fit does
        not depend on the raw values' units (counts, volts).
      undetermined: names of the parameters (``"name[i]"``, taxel ``i``) the data does not
        determine (infinite std): a flat direction, or a positive parameter whose std exceeds
        ``1 / sqrt(eps)`` times its value (a run-away time constant).
      warnings: what a person should know about the data (a dead band at the rest end, a
        parameter known only to its order of magnitude), one sentence each.
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
    scale: dict
    undetermined: tuple = ()
    warnings: tuple = ()

    @property
    def model(self) -> RawParams:
        """The fit as :class:`RawParams` (what :func:`save_raw_params` writes)."""
        return RawParams(self.params, self.sign, self.dt, self.saturation, self.scale)

    def predict(self, log: RawLog, log_index: int | None = None) -> np.ndarray:
        """Predicted forces ``[T, N]`` (N) of ``log``'s counts (:func:`predict`)."""
        return predict(self.model, log, log_index)


def _as_logs(logs) -> list[RawLog]:
    if isinstance(logs, RawLog):
        return [logs]
    if not isinstance(logs, Sequence) or not logs or not all(isinstance(g, RawLog) for g in logs):
        raise TypeError("logs: expected a RawLog or a non-empty sequence of RawLog")
    N = logs[0].raw.shape[1]
    first = _name(logs[0], 0)
    for i, g in enumerate(logs):
        if g.raw.shape[1] != N:
            raise ValueError(f"{_name(g, i)}: {g.raw.shape[1]} taxels, {first} has {N}")
        if (g.dt is None) != (logs[0].dt is None):
            timed = first if logs[0].dt is not None else _name(g, i)
            raise ValueError(
                f"{_name(g, i)}: has no time information and {timed} has (or the other way "
                "round): give every log a time column or '# dt', or pass --dt"
            )
    return list(logs)


def _name(log: RawLog, i: int) -> str:
    """How messages name a log: its file, else its place in the list."""
    return log.name if getattr(log, "name", None) else f"logs[{i}]"


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
    n_par = 6 + int(delay)  # per taxel: offset, curve (2), hysteresis (2), delay; one spare
    few = [i for i, n in enumerate(n_tr) if n < 2 * n_par]
    if few:
        i = few[0]
        raise ValueError(
            f"{_name(logs[i], i)}: {n_tr[i]} training samples ({logs[i].raw.shape[0]} in the "
            f"log, train_fraction {train_fraction:g}) for {n_par - 1} parameters per taxel: "
            f"a fit needs at least {2 * n_par}; record a longer log (or raise train_fraction)"
        )
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
    # the raw values' own scale: the span past the offset (counts, volts: the fit is the same)
    past = np.abs(np.where(keep, raw_tr, np.nan) - c0[0])
    ref = np.nanpercentile(past, 95, axis=0)
    ref = np.where(ref > 0, ref, np.nanmax(past, 0))
    soft = SOFT_FRACTION * ref
    scale = {"ref_counts": ref, "softness": soft}
    scale_j = {k: jnp.asarray(v) for k, v in scale.items()}
    fmax = np.nanmax(np.abs(np.where(keep, force_tr, np.nan)), 0)
    fmax = np.where(fmax > 0, fmax, 1.0)
    init = {
        "offset": jnp.asarray(c0 / ref[None]),
        "force_at_ref": jnp.asarray(fmax),
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
        out["offset"] = p["offset"] * ref[None]
        out["hysteresis_tau"] = dt_unit + p["hysteresis_tau_excess"]
        return out

    def residuals(q, censored=True):
        res = []
        for li, (raw, force, _, h, lw, dt) in enumerate(data):
            y = raw_to_force({**q, **scale_j, "offset": q["offset"][li]}, raw, dt, sgn_j)
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
    model = RawParams(params, sgn, logs[0].dt, sat, scale)
    held = None
    if any(n < g.raw.shape[0] for n, g in zip(n_tr, logs)):
        sq, cnt = np.zeros(N), np.zeros(N)
        for li, (g, n, f) in enumerate(zip(logs, n_tr, free)):
            pred = predict(model, g, li)
            m = f[n:]
            sq += np.sum(np.where(m, (pred[n:] - g.force[n:]) ** 2, 0.0), 0)
            cnt += m.sum(0)
        held = np.sqrt(sq / np.maximum(cnt, 1))
    if L == 1:
        params["offset"] = params["offset"][0]
        std["offset"] = std["offset"][0]
        std_gn["offset"] = std_gn["offset"][0]
    to_np = lambda d: {k: np.asarray(v) for k, v in d.items()}  # noqa: E731
    params, std, std_gn = to_np(params), to_np(std), to_np(std_gn)
    undetermined, warnings = _undetermined(params, std, std_gn)
    warnings += dead_band_warnings(raw_all, force_all, sgn, sat)
    n_cens = sum((a | b).sum(0) for a, b in masks)
    return RawFit(
        params,
        std,
        std_gn,
        sgn,
        sat,
        res_std,
        held,
        np.asarray(n_cens),
        int(settle),
        logs[0].dt,
        r,
        scale,
        tuple(undetermined),
        tuple(warnings),
    )


def _undetermined(params: dict, *stds: dict) -> tuple[list, list]:
    """Parameters the data does not determine (their stds set to inf in place), and warnings.

    A flat direction already reads inf (:func:`~difftaxel.calibrate.scaled_inverse`). A
    positive parameter whose std exceeds ``1 / sqrt(eps)`` times its value is known to no
    digit (a time constant that ran away on a log without hysteresis: ``tau -> inf`` is a flat
    limit): inf as well. One known only to within its own size gets a warning.
    """
    big = 1.0 / np.sqrt(np.finfo(np.float64).eps)
    names, warnings = [], []
    for k in params:
        v = np.abs(np.asarray(params[k], float))
        s = np.asarray(stds[0][k], float)
        runaway = (k in _POSITIVE) & (s > big * v)
        for std in stds:
            std[k] = np.where(runaway, np.inf, std[k])
        s = np.asarray(stds[0][k], float)
        for idx in zip(*np.nonzero(~np.isfinite(s))):
            names.append(f"{k}[{', '.join(str(int(i)) for i in idx)}]")
        loose = np.isfinite(s) & (s > v) & (k in _POSITIVE)
        for idx in zip(*np.nonzero(loose)):
            i = ", ".join(str(int(j)) for j in idx)
            warnings.append(
                f"{k}[{i}] = {float(v[idx]):.4g} +- {float(s[idx]):.3g}: known only to its order "
                "of magnitude (the log hardly excites it)"
            )
    if names:
        warnings.insert(
            0,
            f"not determined by the data (infinite std): {', '.join(names)}; their values are "
            "arbitrary, do not carry them over",
        )
    return names, warnings


def dead_band_warnings(raw, force, sign, saturation: Saturation, min_fraction: float = 0.01):
    """Warnings for a clipped floor at the rest end (a dead band): many samples on one raw
    value at the no-force end of a taxel's range while the reference force moves there.

    ``raw``, ``force`` ``[T, N]``; ``sign [N]``. The rest end is the lowest raw value when
    counts rise with force (the highest otherwise); it is a dead band when at least
    ``min_fraction`` of the samples (and 3) sit on it, it is not already a saturation limit,
    and the force there varies by more than three times the reference's own noise (from its
    second differences). Such samples say only "the force is at most this", and fitted
    as exact they bias the exponent: censor them with a saturation limit at that value.
    """
    raw, force = np.asarray(raw, float), np.asarray(force, float)
    T, N = raw.shape
    need = max(3, int(np.ceil(min_fraction * T)))
    out = []
    for i in range(N):  # host-side, once per fit
        rising = sign[i] > 0
        level = raw[:, i].min() if rising else raw[:, i].max()
        limit = saturation.lo[i] if rising else saturation.hi[i]
        on = raw[:, i] == level
        if on.sum() < need or (np.isfinite(limit) and limit == level):
            continue
        # the reference's noise from second differences (a smooth force cancels in them)
        noise = np.median(np.abs(np.diff(force[:, i], 2))) / (0.6745 * np.sqrt(6.0))
        spread = force[on, i].std()
        if spread > 3.0 * max(noise, 1e-300):
            flag = f"{level:g}," if rising else f",{level:g}"
            out.append(
                f"taxel {i}: {int(on.sum())} samples sit at {level:g} (raw units), the rest end, "
                f"while the reference force there moves (std {spread:.3g} N, noise {noise:.2g} N): "
                f"a dead band or clipped floor; censor it with --saturation {flag} "
                f"(saturation=({level:g}, None)) or the curve's exponent is biased"
                if rising
                else f"taxel {i}: {int(on.sum())} samples sit at {level:g} (raw units), the rest "
                f"end, while the reference force there moves (std {spread:.3g} N, noise "
                f"{noise:.2g} N): a dead band or clipped floor; censor it with --saturation "
                f"{flag} (saturation=(None, {level:g})) or the curve's exponent is biased"
            )
    return out
