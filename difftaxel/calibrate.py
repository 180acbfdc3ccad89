"""Gradient-based fitting with optax: parameter transforms, masks, time windows, early stopping.

:func:`fit` minimises ``loss_fn(params, batch)`` over a pytree of parameters:

* **transforms** (a pytree matching ``params``, or a dict of top-level names): ``None``
  (unconstrained), ``"log"`` / ``"softplus"`` (positive parameters optimised in log or inverse
  softplus space), ``"se3"`` (poses ``[..., 7]`` updated in the se(3) tangent space:
  ``T = T0 * exp(xi)``, so quaternions stay unit);
* **mask** (same structure, bools): False freezes a parameter (zero update);
* **batches**: an optional array whose leading axis indexes minibatches (e.g. start indices of
  time windows); each step draws one with an explicit key;
* **early stopping**: stop when the loss has not improved by ``min_delta`` (relative) for
  ``patience`` logged checks;
* the step is jitted once and scanned ``log_every`` steps at a time; the history of losses
  (every step) and parameters (every ``log_every`` steps) is returned.

Also: :func:`huber` (robust loss for real data), :func:`gauss_newton_std` (parameter
uncertainty from the Gauss-Newton / Fisher approximation ``sigma^2 (J^T J)^-1``, right when the
residuals are white) and :func:`sandwich_std` (the heteroscedasticity- and
autocorrelation-consistent sandwich, right when they are not: a misspecified model on a real
log leaves correlated residuals, and Gauss-Newton is then over-confident).
"""

from __future__ import annotations

import sys
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from . import pose as _pose

Array = jax.Array

__all__ = [
    "FitResult",
    "fit",
    "huber",
    "gauss_newton_std",
    "sandwich_std",
    "scaled_inverse",
    "undetermined_std",
    "levenberg_marquardt",
    "default_optimizer",
]


def huber(residual: Array, delta: float = 1.0) -> Array:
    """Elementwise Huber loss: quadratic below ``delta``, linear above (robust to outliers)."""
    return optax.huber_loss(residual, delta=delta)


def default_optimizer(steps: int, learning_rate: float = 1e-2) -> optax.GradientTransformation:
    """Adam with a cosine-decayed learning rate (from ``learning_rate`` to 1 % of it)."""
    sched = optax.cosine_decay_schedule(learning_rate, max(steps, 1), alpha=0.01)
    return optax.adam(sched)


# ----------------------------------------------------------------------------- transforms


def _inv_softplus(x):
    return x + jnp.log(-jnp.expm1(-x))


_FORWARD = {
    None: lambda u, base: u,
    "log": lambda u, base: jnp.exp(u),
    "softplus": lambda u, base: jax.nn.softplus(u),
    "se3": lambda u, base: _pose.compose(base, _pose.se3_exp(u)),
}


def _se3_forward(length_scale):
    def f(u, base):
        sc = jnp.concatenate([jnp.full(3, length_scale, u.dtype), jnp.ones(3, u.dtype)])
        return _pose.compose(base, _pose.se3_exp(u * sc.reshape((1,) * (u.ndim - 1) + (6,))))

    return f


def _to_unconstrained(kind, x):
    if kind is None:
        return x, None
    if kind == "log":
        return jnp.log(x), None
    if kind == "softplus":
        return _inv_softplus(x), None
    if kind == "se3":
        return jnp.zeros(x.shape[:-1] + (6,), x.dtype), x
    raise ValueError(f"transforms: unknown transform {kind!r} (None, 'log', 'softplus', 'se3')")


def _check_positive(kind, name, x):
    if kind in ("log", "softplus") and not np.all(np.asarray(x) > 0):
        raise ValueError(
            f"params[{name}]: a '{kind}' parameter must start > 0, got {np.asarray(x)}"
        )
    if kind == "se3" and np.shape(x)[-1:] != (7,):
        raise ValueError(
            f"params[{name}]: an 'se3' parameter must be poses (..., 7), got {np.shape(x)}"
        )


def _broadcast_spec(spec, params, default):
    """Expand a dict of top-level names (or None) to a pytree matching ``params``."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    if spec is None:
        return [default] * len(leaves)
    if isinstance(spec, dict) and isinstance(params, dict):
        unknown = set(spec) - set(params)
        if unknown:
            raise ValueError(f"transforms/mask: unknown parameter names {sorted(unknown)}")
        out = []
        for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]:
            out.append(spec.get(path[0].key, default))
        return out
    spec_leaves = treedef.flatten_up_to(spec)
    return [default if s is ... else s for s in spec_leaves]


class FitResult(NamedTuple):
    """Result of :func:`fit`.

    Attributes:
      params: fitted parameters (constrained space, same structure as the input).
      losses: ``[n_steps]`` loss at each step (before its update).
      param_history: list of ``(step, params)`` every ``log_every`` steps.
      n_steps: steps taken; ``stopped_early``: early stopping fired.
      seconds: wall time of the loop (compile included).
      compiles: number of compilations of the jitted chunk (1: no recompilation per step).
    """

    params: Any
    losses: np.ndarray
    param_history: list
    n_steps: int
    stopped_early: bool
    seconds: float
    compiles: int


def fit(
    loss_fn,
    params,
    *,
    steps: int = 200,
    optimizer: optax.GradientTransformation | None = None,
    learning_rate: float = 1e-2,
    transforms=None,
    mask=None,
    batches=None,
    key=None,
    log_every: int = 10,
    patience: int | None = None,
    min_delta: float = 1e-4,
    progress: bool = False,
    se3_length_scale: float = 1.0,
    data=None,
) -> FitResult:
    """Minimise ``loss_fn(params, batch)`` (``batch`` is None without ``batches``), or
    ``loss_fn(params, batch, data)`` when ``data`` is given.

    Args:
      loss_fn: scalar function of the (constrained) parameters and one minibatch.
      params: pytree of float arrays (initial values).
      steps: maximum number of optimiser steps.
      optimizer: any optax transformation (default :func:`default_optimizer`).
      transforms: per-leaf transform (see module docstring), or a dict by top-level name.
      mask: per-leaf bool (True = trained), or a dict by top-level name; at least one True.
      batches: array ``[B, ...]``; step k uses ``batches[i_k]`` with ``i_k`` drawn from ``key``.
      log_every: steps per jitted scan chunk (and per progress line / history entry).
      patience, min_delta: early stopping on the chunk-mean loss (relative improvement).
      progress: print a progress line per chunk to stderr.
      se3_length_scale: metres per unit of the translational tangent coordinates of ``"se3"``
        parameters (Adam moves every coordinate by ~the learning rate per step, so this sets
        how far positions move relative to rotations, in rad).
      data: any pytree of arrays the loss reads (recordings, environments). It and
        ``batches`` reach the jitted step as **arguments**, never as closed-over constants: a
        large array is not baked into the program, and arrays sharded over the devices of
        several processes (``jax.distributed``, non-addressable) work unchanged.
    """
    t_start = time.perf_counter()
    leaves, treedef = jax.tree_util.tree_flatten(params)
    if not leaves:
        raise ValueError("params: expected at least one parameter")
    kinds = _broadcast_spec(transforms, params, None)
    trains = _broadcast_spec(mask, params, True)
    if not any(bool(t) for t in trains):
        raise ValueError("mask: every parameter is frozen; nothing to fit")
    names = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    for kind, name, x in zip(kinds, names, leaves):
        _check_positive(kind, name, x)
    if steps < 1:
        raise ValueError(f"steps: expected >= 1, got {steps}")
    if batches is not None and key is None:
        key = jax.random.key(0)
    unc, bases = [], []
    for kind, x in zip(kinds, leaves):
        u, b = _to_unconstrained(kind, jnp.asarray(x))
        unc.append(u)
        bases.append(b)
    opt = optimizer or default_optimizer(steps, learning_rate)

    fwd = dict(_FORWARD)
    fwd["se3"] = _se3_forward(se3_length_scale)

    def constrained(u_leaves):
        return jax.tree_util.tree_unflatten(
            treedef, [fwd[k](u, b) for k, u, b in zip(kinds, u_leaves, bases)]
        )

    def objective(u_leaves, batch, data):
        if data is None:
            return loss_fn(constrained(u_leaves), batch)
        return loss_fn(constrained(u_leaves), batch, data)

    # strong (not weak) dtypes, so the chunk's inputs and outputs have identical types and the
    # jitted chunk compiles exactly once
    strong = lambda x: jnp.array(x, dtype=jnp.asarray(x).dtype)  # noqa: E731
    unc = [strong(u) for u in unc]
    opt_state = jax.tree_util.tree_map(strong, opt.init(unc))
    n_batches = None if batches is None else jax.tree_util.tree_leaves(batches)[0].shape[0]

    def one_step(carry, xs, all_batches, data):
        k, active = xs
        u, s = carry
        batch = None
        if all_batches is not None:
            i = jax.random.randint(k, (), 0, n_batches)
            batch = jax.tree_util.tree_map(lambda b: b[i], all_batches)
        loss, g = jax.value_and_grad(objective)(u, batch, data)
        g = [gi if t else jnp.zeros_like(gi) for gi, t in zip(g, trains)]
        upd, s_new = opt.update(g, s, u)
        upd = [ui if t else jnp.zeros_like(ui) for ui, t in zip(upd, trains)]
        u_new = optax.apply_updates(u, upd)
        # padded steps of a short last chunk leave everything unchanged (one compiled shape)
        keep = lambda new, old: jnp.where(active, new, old)  # noqa: E731
        u = jax.tree_util.tree_map(keep, u_new, u)
        s = jax.tree_util.tree_map(keep, s_new, s)
        return (u, s), loss

    traces = [0]

    @jax.jit
    def chunk(u, s, keys, active, all_batches, data):
        # counted at trace time: each trace is one compilation (a cache's size is not a count:
        # JAX's shared cache may hold an entry elsewhere or drop it)
        traces[0] += 1
        body = lambda c, xs: one_step(c, xs, all_batches, data)  # noqa: E731
        (u, s), losses = jax.lax.scan(body, (u, s), (keys, active))
        return u, s, losses

    losses, history = [], []
    best, bad = np.inf, 0
    stopped = False
    done = 0
    ckey = jax.random.key(0) if key is None else key
    while done < steps:
        n = min(log_every, steps - done)
        ckey, sub = jax.random.split(ckey)
        keys = jax.random.split(sub, log_every)
        active = jnp.arange(log_every) < n
        unc, opt_state, ls = chunk(unc, opt_state, keys, active, batches, data)
        losses += np.asarray(ls)[:n].tolist()
        done += n
        history.append((done, jax.tree_util.tree_map(np.asarray, constrained(unc))))
        m = float(np.mean(losses[-n:]))
        if progress:
            bar = "#" * int(30 * done / steps)
            print(f"\rfit [{bar:<30}] {done}/{steps} loss {m:.6g}", end="", file=sys.stderr)
        if not np.isfinite(m):
            raise FloatingPointError(f"loss: became {m} at step {done}; lower the learning rate")
        if patience is not None:
            if m < best * (1 - min_delta) or not np.isfinite(best):
                best, bad = m, 0
            else:
                bad += 1
                if bad >= patience:
                    stopped = True
                    break
    compiles = traces[0]
    if progress:
        print(file=sys.stderr)
    return FitResult(
        params=constrained(unc),
        losses=np.asarray(losses),
        param_history=history,
        n_steps=done,
        stopped_early=stopped,
        seconds=time.perf_counter() - t_start,
        compiles=compiles,
    )


def scaled_inverse(H, *, dtype=np.float64, rtol: float | None = None):
    """Inverse of a Gauss-Newton (Fisher) matrix that does not depend on the parameters' units,
    and the parameters the data does not determine.

    ``H [..., P, P]`` (a batch of them allowed) is scaled to unit diagonal, ``C = D^-1 H D^-1``
    with ``D = sqrt(diag H)``: a change of any parameter's units is a diagonal ``D`` and cancels,
    so standard deviations scale with their parameters' units and nothing else (an unscaled
    ``pinv(J^T J)`` drops the weakest direction when the columns' units differ by ~1e8).
    An eigen-direction of ``C`` below ``rtol`` times its largest eigenvalue is not determined by
    the data; every parameter with a visible share in one (squared loading > 1e-6), and every
    parameter with a zero (or non-finite) column, is *undetermined*: its variance is infinite.

    Args:
      H: ``[..., P, P]`` symmetric positive semi-definite.
      dtype: the dtype the Jacobian behind ``H`` was computed in: ``rtol`` follows it.
      rtol: relative eigenvalue tolerance; default ``max(P, 10) * eps(dtype)`` (``H`` squares
        the Jacobian's condition, so an eigenvalue below ``eps`` relative is rounding).

    Returns:
      ``(Hinv [..., P, P], undetermined [..., P] bool)``; ``Hinv``'s rows and columns of
      undetermined parameters are 0 (set their variances to inf with :func:`undetermined_std`).
    """
    H = np.asarray(H, np.float64)
    P = H.shape[-1]
    if rtol is None:
        rtol = max(P, 10) * float(np.finfo(dtype).eps)
    d2 = np.diagonal(H, axis1=-2, axis2=-1)
    ok = np.isfinite(d2) & (d2 > 0) & np.all(np.isfinite(H), axis=-1)
    d = np.sqrt(np.where(ok, d2, 1.0))
    C = np.where(ok[..., :, None] & ok[..., None, :], H / (d[..., :, None] * d[..., None, :]), 0.0)
    C = C + np.where(ok, 0.0, 1.0)[..., None] * np.eye(P)  # dropped parameters: decoupled
    w, V = np.linalg.eigh(C)
    small = w <= rtol * np.max(w, axis=-1, keepdims=True)
    load = np.einsum("...ij,...j->...i", V * V, small.astype(float))
    undetermined = ~ok | (load > 1e-6)
    winv = np.where(small, 0.0, 1.0 / np.where(small, 1.0, w))
    Cinv = np.einsum("...ij,...j,...kj->...ik", V, winv, V)
    keep = ~undetermined
    Hinv = Cinv / (d[..., :, None] * d[..., None, :])
    Hinv = np.where(keep[..., :, None] & keep[..., None, :], Hinv, 0.0)
    return Hinv, undetermined


def undetermined_std(cov, undetermined):
    """``sqrt(diag(cov))`` with ``inf`` for the undetermined parameters (``[..., P]``)."""
    std = np.sqrt(np.clip(np.diagonal(cov, axis1=-2, axis2=-1), 0.0, None))
    return np.where(undetermined, np.inf, std)


def gauss_newton_std(residual_fn, params, noise_std: float | None = None):
    """Parameter standard deviations from the Gauss-Newton approximation.

    ``cov = sigma^2 (J^T J)^-1`` with ``J`` the Jacobian of ``residual_fn(params) [R]`` w.r.t.
    the flattened ``params``; ``sigma`` is ``noise_std`` or, if None, estimated from the
    residuals ``sqrt(|r|^2 / (R - P))``. The inverse is :func:`scaled_inverse`'s (invariant to
    the parameters' units); a parameter the data does not determine has an infinite std.
    Returns ``(std pytree, cov [P, P])`` (rows of undetermined parameters 0 in ``cov``).
    """
    flat, unravel = ravel_pytree(params)
    r = residual_fn(params)
    J = jax.jacfwd(lambda v: residual_fn(unravel(v)))(flat)
    R, Pn = J.shape
    if noise_std is None:
        if R <= Pn:
            raise ValueError("residual_fn: need more residuals than parameters to estimate noise")
        sigma2 = float(jnp.sum(r * r)) / (R - Pn)
    else:
        sigma2 = float(noise_std) ** 2
    Jn = np.asarray(J, np.float64)
    Hinv, und = scaled_inverse(Jn.T @ Jn, dtype=J.dtype)
    cov = sigma2 * Hinv
    return unravel(jnp.asarray(undetermined_std(cov, und), flat.dtype)), cov


def _auto_lags(r: np.ndarray) -> int:
    """Bartlett bandwidth from the residuals ``r [T, K]``: twice the first lag at which the
    mean autocorrelation falls below ``2 / sqrt(T)`` (the white-noise band), at least
    ``ceil(T^(1/3))``'s quarter and at most ``T // 4``."""
    T = r.shape[0]
    x = r - r.mean(0)
    var = np.sum(x * x)
    if not var > 0:
        return 0
    band = 2.0 / np.sqrt(T)
    first = T // 4
    for lag in range(1, T // 4 + 1):
        rho = np.sum(x[lag:] * x[:-lag]) / var
        if rho < band:
            first = lag
            break
    return int(min(T // 4, max(2 * first, int(np.ceil(T ** (1 / 3) / 4)))))


def sandwich_std(residual_fn, params, lags: int | None = None):
    """Parameter standard deviations robust to correlated, heteroscedastic residuals.

    ``residual_fn(params)`` returns residuals ``[T, ...]`` with time (or sample order) first.
    With ``J`` the Jacobian of the residuals w.r.t. the flattened parameters, ``H = J^T J``,
    the per-sample scores ``g_t = sum_k J[t, k]^T r[t, k]`` and Bartlett weights
    ``w_l = 1 - l / (L + 1)`` (Newey-West), the covariance is the sandwich

        ``cov = H^-1 (sum_{|l| <= L} w_l sum_t g_t g_{t-l}^T) H^-1``.

    With white residuals it equals :func:`gauss_newton_std`'s in expectation; with correlated
    residuals (a misspecified model, a sensor's slow drift) it grows with their correlation time
    where Gauss-Newton does not. ``lags`` (L) defaults to twice the first lag at which the
    residuals' autocorrelation falls inside the white-noise band ``2 / sqrt(T)`` (capped at
    ``T // 4``). ``H``'s inverse is :func:`scaled_inverse`'s: invariant to the parameters'
    units, infinite std for a parameter the data does not determine. Returns ``(std pytree,
    cov [P, P], L)``.
    """
    flat, unravel = ravel_pytree(params)
    r = residual_fn(params)
    if r.ndim < 1 or r.shape[0] < 2:
        raise ValueError(f"residual_fn: expected residuals [T, ...] with T >= 2, got {r.shape}")
    T = r.shape[0]
    J = jax.jacfwd(lambda v: residual_fn(unravel(v)).reshape(T, -1))(flat)  # [T, K, P]
    r2 = np.asarray(r, np.float64).reshape(T, -1)
    jac_dtype = J.dtype
    J = np.asarray(J, np.float64)
    if lags is None:
        lags = _auto_lags(r2)
    if not (isinstance(lags, (int, np.integer)) and 0 <= lags < T):
        raise ValueError(f"lags: expected an int in [0, {T}), got {lags!r}")
    g = np.einsum("tkp,tk->tp", J, r2)
    omega = g.T @ g
    for lag in range(1, int(lags) + 1):
        gam = g[lag:].T @ g[:-lag]
        omega += (1.0 - lag / (lags + 1.0)) * (gam + gam.T)
    Jf = J.reshape(-1, J.shape[-1])
    Hinv, und = scaled_inverse(Jf.T @ Jf, dtype=jac_dtype)
    cov = Hinv @ omega @ Hinv
    return unravel(jnp.asarray(undetermined_std(cov, und), flat.dtype)), cov, int(lags)


def levenberg_marquardt(residual_fn, params, *, steps: int = 30, damping: float = 1e-3):
    """Polish ``params`` by Levenberg-Marquardt on ``residual_fn(params)`` (any shape).

    For small, smooth least-squares problems (a few dozen parameters) after a first-order fit
    has found the basin: each iteration solves ``(J^T J + lam diag(J^T J)) delta = -J^T r`` and
    keeps the step only if the sum of squares falls (``lam`` shrinks by 3 on success, grows by
    10 otherwise). Returns ``(params, sum of squares)``.
    """
    flat, unravel = ravel_pytree(params)

    @jax.jit
    def trial(v, lam):
        f = lambda v: residual_fn(unravel(v)).reshape(-1)  # noqa: E731
        r = f(v)
        J = jax.jacfwd(f)(v)
        A = J.T @ J
        d = jnp.diag(A)
        delta = -jnp.linalg.solve(A + lam * jnp.diag(d + 1e-12 * jnp.max(d)), J.T @ r)
        r_new = f(v + delta)
        return jnp.sum(r * r), v + delta, jnp.sum(r_new * r_new)

    lam = float(damping)
    v = flat
    cost = None
    for _ in range(int(steps)):  # host loop: a handful of accepted / rejected steps
        c, v_new, c_new = trial(v, jnp.asarray(lam, flat.dtype))
        cost = float(c) if cost is None else cost
        if np.isfinite(float(c_new)) and float(c_new) < cost:
            v, cost, lam = v_new, float(c_new), max(lam / 3.0, 1e-12)
        else:
            lam *= 10.0
            if lam > 1e10:
                break
    return unravel(v), cost
