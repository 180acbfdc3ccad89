"""Standard deviations of the three-axis fit: block sandwiches whose blocks' residuals are
corrected as if each block had been left out (the clustered jackknife, CR3), over the linear
weights and the nonlinear parameters (lags, the creep time constant) together; the inverse is
one block per output bordered by the nonlinear parameters (a Schur complement), so a larger
array costs ``K F^2`` memory, not ``(K F)^2``."""

from __future__ import annotations

import numpy as np

from ..calibrate import scaled_inverse

__all__ = ["block_covariance", "nonlinear_derivatives", "correlation_length"]


def correlation_length(res: list) -> int:
    """Samples until the residuals' mean autocorrelation first drops below 0.05."""
    L = 1
    for e in res:
        e = e - e.mean(0)
        v = np.where(np.sum(e * e, 0) > 0, np.sum(e * e, 0), 1.0)
        k = 1
        for k in range(1, max(e.shape[0] // 4, 2)):  # host: stops at the first small lag
            if np.mean(np.sum(e[k:] * e[:-k], 0) / v) < 0.05:
                break
        L = max(L, k)
    return L


def nonlinear_derivatives(spec, lags, design):
    """Central differences of every session's features in each nonlinear parameter: the lags
    (s; each moves its own session) then ``log tau`` (moves every session). ``[(dX_s or None
    per session), ...]``."""
    S = len(lags)
    out = []
    h = 1e-6  # s: the features are exact (piecewise-linear in the lag), so this is their slope
    for s in range(S):
        up, dn = lags.copy(), lags.copy()
        up[s] += h
        dn[s] -= h
        d = (design(spec, "all", up)[s][0] - design(spec, "all", dn)[s][0]) / (2 * h)
        out.append([d if j == s else None for j in range(S)])
    if spec.tau is not None:
        e = 1e-5
        hi = design(spec._replace(tau=spec.tau * np.exp(e)), "all", lags)
        lo = design(spec._replace(tau=spec.tau * np.exp(-e)), "all", lags)
        out.append([(a[0] - b[0]) / (2 * e) for a, b in zip(hi, lo)])
    return out


def block_covariance(W, parts, mask, extra):
    """Sandwich (block) and Gauss-Newton stds of ``W [K, F]`` (``[K, F]``, 0 where ``mask`` is
    False) and of the nonlinear parameters ``extra`` (``[E]``, see
    :func:`nonlinear_derivatives`); also the block length.

    The Gauss-Newton matrix is one ``[F, F]`` block per output (every output shares the
    features) bordered by the nonlinear parameters; its inverse is taken by a Schur complement
    over them, so memory and time grow with ``K F^2``, not ``(K F)^2``. Each inverse is
    :func:`~difftaxel.calibrate.scaled_inverse`'s (unit-invariant; undetermined -> inf)."""
    K, F = W.shape
    E = len(extra)
    res = [(y - X @ W.T)[ok] for X, y, ok in parts]
    block = int(min(4 * correlation_length(res), max(1, min(r.shape[0] for r in res) // 8)))
    XtX = sum(X[ok].T @ X[ok] for X, _, ok in parts)
    B = np.zeros((K, F, E))  # the weights' rows against the nonlinear parameters
    C = np.zeros((E, E))
    dps, n_res, rss = [], 0, 0.0
    for s, ((X, _, ok), e) in enumerate(zip(parts, res)):
        Xs = X[ok]
        # d prediction / d parameter [T, K] (residual derivatives are these negated, as are
        # the weights' own: the signs cancel in H and in the sandwich)
        dp = [None if d[s] is None else d[s][ok] @ W.T for d in extra]
        for a, da in enumerate(dp):
            if da is None:
                continue
            B[:, :, a] += da.T @ Xs
            for b, db in enumerate(dp):
                if db is not None:
                    C[a, b] += float(np.sum(da * db))
        dps.append(dp)
        n_res += e.size
        rss += float(np.sum(e * e))
    B = B * mask[..., None]
    patterns: dict = {}
    for k in range(K):
        patterns.setdefault(tuple(np.flatnonzero(mask[k])), []).append(k)
    Ainv = np.zeros((K, F, F))
    und_w = ~mask.copy()
    for cols, rows in patterns.items():
        c = list(cols)
        Hi, und = scaled_inverse(XtX[np.ix_(c, c)])
        for k in rows:
            Ainv[k][np.ix_(c, c)] = Hi
            und_w[k, c] = und
    AinvB = np.einsum("kfg,kge->kfe", Ainv, B)
    Sinv, und_e = (
        scaled_inverse(C - np.einsum("kfe,kfg->eg", B, AinvB))
        if E
        else (np.zeros((0, 0)), np.zeros(0, bool))
    )
    var_w, var_e = np.zeros((K, F)), np.zeros(E)
    for s, ((X, _, ok), e) in enumerate(zip(parts, res)):
        Xs, dp = X[ok], dps[s]
        gw, ge = [], []
        for b0 in range(0, e.shape[0], block):  # host: one score per block
            sl = slice(b0, b0 + block)
            # the block's residuals as if it had been left out of the fit (a weight informed by
            # few blocks is fitted to them, and their residuals understate its noise): the
            # clustered jackknife's correction, CR3, applied to the shared linear part
            xb = Xs[sl]
            eb = e[sl] + xb @ np.linalg.lstsq(XtX - xb.T @ xb, xb.T @ e[sl], rcond=1e-12)[0]
            gw.append(eb.T @ xb)
            ge.append([0.0 if da is None else float(np.sum(da[sl] * eb)) for da in dp])
        Gw, Ge = np.asarray(gw) * mask[None], np.asarray(ge).reshape(len(gw), E)
        Y = np.einsum("kfg,bkg->bkf", Ainv, Gw)  # H^-1 g by the Schur complement
        Ue = (Ge - np.einsum("kfe,bkf->be", B, Y)) @ Sinv.T
        Uw = Y - np.einsum("kfe,be->bkf", AinvB, Ue)
        var_w += np.sum(Uw * Uw, 0)
        var_e += np.sum(Ue * Ue, 0)
    sigma2 = rss / max(n_res - int(mask.sum()) - E, 1)
    white_w = sigma2 * (
        np.einsum("kff->kf", Ainv) + np.einsum("kfe,eg,kfg->kf", AinvB, Sinv, AinvB)
    )
    white_e = sigma2 * np.diagonal(Sinv)
    std_w = np.where(und_w, np.inf, np.sqrt(np.clip(var_w, 0, None)))
    std_e = np.where(und_e, np.inf, np.sqrt(np.clip(var_e, 0, None)))
    white_w = np.where(und_w, np.inf, np.sqrt(np.clip(white_w, 0, None)))
    white_e = np.where(und_e, np.inf, np.sqrt(np.clip(white_e, 0, None)))
    std_w[~mask] = white_w[~mask] = 0.0  # structurally zero weights (outside the coupling radius)
    return (
        np.concatenate([std_w.reshape(-1), std_e]),
        np.concatenate([white_w.reshape(-1), white_e]),
        block,
    )
