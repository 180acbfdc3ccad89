"""Standard deviations of the three-axis fit: block sandwiches whose blocks' residuals are
corrected as if each block had been left out (the clustered jackknife, CR3), over the linear
weights and the nonlinear parameters (lags, the creep time constant) together."""

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
    """Sandwich (batch means) and Gauss-Newton stds of ``W`` (row-major) then of the nonlinear
    parameters ``extra`` (see :func:`nonlinear_derivatives`)."""
    K, F = W.shape
    P, E = W.size, len(extra)
    res = [(y - X @ W.T)[ok] for X, y, ok in parts]
    block = int(min(4 * correlation_length(res), max(1, min(r.shape[0] for r in res) // 8)))
    H = np.zeros((P + E, P + E))
    XtX = sum(X[ok].T @ X[ok] for X, _, ok in parts)
    scores, n_res, rss = [], 0, 0.0
    for s, ((X, _, ok), e) in enumerate(zip(parts, res)):
        Xs = X[ok]
        H[:P, :P] += np.kron(np.eye(K), Xs.T @ Xs)
        # d prediction / d parameter [T, K] (residual derivatives are these negated, as are
        # the weights' own: the signs cancel in H and in the sandwich)
        dp = [None if d[s] is None else d[s][ok] @ W.T for d in extra]
        for a, da in enumerate(dp):
            if da is None:
                continue
            c = (da.T @ Xs).reshape(-1)
            H[:P, P + a] += c
            H[P + a, :P] += c
            for b, db in enumerate(dp):
                if db is not None:
                    H[P + a, P + b] += float(np.sum(da * db))
        n_res += e.size
        rss += float(np.sum(e * e))
        for b0 in range(0, e.shape[0], block):  # host: one score per block
            sl = slice(b0, b0 + block)
            # the block's residuals as if it had been left out of the fit (a weight informed by
            # few blocks is fitted to them, and their residuals understate its noise): the
            # clustered jackknife's correction, CR3, applied to the shared linear part
            xb = Xs[sl]
            eb = e[sl] + xb @ np.linalg.lstsq(XtX - xb.T @ xb, xb.T @ e[sl], rcond=1e-12)[0]
            g = np.zeros(P + E)
            g[:P] = (eb.T @ xb).reshape(-1)
            for a, da in enumerate(dp):
                if da is not None:
                    g[P + a] = float(np.sum(da[sl] * eb))
            scores.append(g)
    G = np.asarray(scores)
    sel = np.concatenate([mask.reshape(-1), np.ones(E, bool)])
    Hinv, und = scaled_inverse(H[np.ix_(sel, sel)])
    V = Hinv @ (G[:, sel].T @ G[:, sel]) @ Hinv
    sigma2 = rss / max(n_res - int(sel.sum()), 1)
    std, white = np.full(P + E, np.inf), np.full(P + E, np.inf)
    std[sel] = np.where(und, np.inf, np.sqrt(np.clip(np.diagonal(V), 0, None)))
    white[sel] = np.where(und, np.inf, np.sqrt(np.clip(sigma2 * np.diagonal(Hinv), 0, None)))
    std[~sel] = white[~sel] = 0.0  # structurally zero weights (outside the coupling radius)
    return std, white, block
