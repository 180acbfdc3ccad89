"""Three-axis raw models: per-taxel vector raw readings -> three-axis force in taxel axes,
fitted against a six-axis force/torque reference logged on its own clock.

The model is physical in direction: loads make fields. Per session ``s`` (a recording; the array
may have been re-seated, its no-load readings drift)::

    u_t = f_t / c                                (taxel forces [N, 3], taxel axes, scaled)
    m_t = a_t m_{t-1} + (u_t - u_{t-1}),  a_t = exp(-(t_t - t_{t-1}) / tau)   (creep)
    psi_t = [u_t, poly_d(u_t), m_t]              (features)
    b_t = o_s + W psi_t                          (raw readings [N, 3])

* ``o_s`` is the session's **offset** (its no-load readings), fitted per training session; the
  **response** ``W`` is shared. A new session needs only its first ``tare`` seconds at rest
  (their median is its offset).
* **Coupling**: every taxel's channels respond to every taxel's load (a magnet's field reaches
  its neighbours' sensors), or only to taxels within ``coupling_radius``.
* **Flexible part**: ``poly_d`` are each taxel's own force monomials of degree 2..d; ``d`` and
  the creep time constant ``tau`` are chosen by validation on the last ``validation`` fraction
  of each session (raw RMS), then the model is refitted on everything.
* **Hysteresis**: one Maxwell element per force channel (``m_t``): the elastomer creeps.

Forces are predicted by inverting the model sample by sample (Newton's method from the linear
solution, inside one ``lax.scan``): :func:`predict_triaxial`. Fitting in the physical direction
keeps the raw noise where it is (in the fitted outputs): an inverse regression on noisy raw
features learns to smooth the noise and trades that smoothing against the clocks' lag.

The reference: the wrench at skin time ``t`` is the force/torque log's at ``t + lag_s`` (one lag
per session: coarse by cross-correlation, then refined inside the fit by golden-section search
on its profile). Taxel forces come from the wrench:

* ``pressed="infer"`` (default): one taxel is loaded at a time (one wrench under the whole
  array, the pressed taxel unknown); it is the taxel whose position best explains the torque
  (``tau = p_k x F``); every other taxel's force is zero; a sample below ``rest_force``
  (where the torque cannot tell) belongs to the nearest sample above it.
* ``pressed=[...]``: the pressed taxel per skin sample of each session, when known.

Standard deviations are **sandwich** estimates over blocks of consecutive samples (blocks four
times the residuals' correlation length, each block's residuals corrected to what they would be
had it been left out: the clustered jackknife, CR3): honest when residuals are correlated in
time, as they are at 100 Hz, and when a weight is informed by few blocks; the Gauss-Newton (white-noise) ones are reported beside them. Both
are invariant to the parameters' units (:func:`~difftaxel.calibrate.scaled_inverse`); a
parameter the data does not determine gets an infinite std and is named.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._blocks import block_covariance, nonlinear_derivatives
from .vector import (
    VectorLog,
    WrenchLog,
    checked_vector_log,
    checked_wrench_log,
    coarse_lag,
    wrench_at,
)

__all__ = ["TriaxialModel", "TriaxialFit", "fit_triaxial", "tare_offset"]

_GOLD = (np.sqrt(5) - 1) / 2


class TriaxialModel(NamedTuple):
    """A fitted three-axis raw model, as saved: ``weights [3N, F]`` (raw units per feature),
    ``degree``, ``tau`` (s; None: no creep), ``scale [3N]`` (N per feature unit),
    ``positions [N, 3]`` (m, sensor frame), ``rotations [N, 3, 3]`` (taxel axes as columns, in
    the sensor frame), ``tare`` (s), ``coupling [N, N]`` bool (taxel i's channels respond to
    taxel j's load)."""

    weights: np.ndarray
    degree: int
    tau: float | None
    scale: np.ndarray
    positions: np.ndarray
    rotations: np.ndarray
    tare: float
    coupling: np.ndarray

    @property
    def n_taxels(self) -> int:
        """``N``, the taxels the model reads."""
        return self.positions.shape[0]


class TriaxialFit(NamedTuple):
    """Result of :func:`fit_triaxial`.

    Attributes:
      model: the :class:`TriaxialModel` (predict with :func:`predict_triaxial`).
      lags, lag_std: ``[S]`` s, each session's reference lag and its (sandwich) std.
      offsets, offset_std: ``[S, N, 3]`` raw units, each session's no-load readings.
      tau_std: s, the creep time constant's std (None without creep).
      weights_std, weights_std_white: ``[3N, F]`` sandwich and Gauss-Newton stds of the weights
        (inf where undetermined).
      validation: ``{(degree, tau): raw RMS}`` on the validation part, every candidate tried.
      rmse: training raw RMS; ``block``: the sandwich's block length (samples).
      undetermined: parameters the data does not determine, by name.
      warnings: what limits the fit, in words (e.g. a taxel pressed in fewer than three
        independent directions in the part that chooses the model).
    """

    model: TriaxialModel
    lags: np.ndarray
    lag_std: np.ndarray
    offsets: np.ndarray
    offset_std: np.ndarray
    tau_std: float | None
    weights_std: np.ndarray
    weights_std_white: np.ndarray
    validation: dict
    rmse: float
    block: int
    undetermined: list
    warnings: tuple = ()

    def report(self) -> str:
        """A few lines for people: the model chosen, each session's lag with its std, the fit."""
        m = self.model
        lags = ", ".join(
            f"{1e3 * v:.1f} +- {1e3 * s:.2f} ms" for v, s in zip(self.lags, self.lag_std)
        )
        tau = "none" if m.tau is None else f"{m.tau:.3g} +- {self.tau_std:.2g} s"
        lines = [
            f"{m.n_taxels} taxels x 3 channels; degree {m.degree}, creep tau {tau} "
            f"(chosen on validation among {len(self.validation)} candidates)",
            f"reference lag per session: {lags}",
            f"training raw RMS {self.rmse:.4g}; sandwich block {self.block} samples",
        ]
        if self.undetermined:
            lines.append(
                f"{len(self.undetermined)} parameters not determined by the data (infinite std), "
                f"e.g. {', '.join(self.undetermined[:4])}"
            )
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


# ----------------------------------------------------------------------------- features


@jax.jit
def _maxwell(u: jax.Array, a: jax.Array) -> jax.Array:
    """``m_t = a_t m_{t-1} + (u_t - u_{t-1})``, ``m_0 = 0``: ``u [T, C]``, ``a [T]``."""
    du = jnp.concatenate([jnp.zeros_like(u[:1]), jnp.diff(u, axis=0)])

    def step(m, inp):
        m = inp[0] * m + inp[1]
        return m, m

    return jax.lax.scan(step, jnp.zeros_like(u[0]), (a, du))[1]


def _combos(n, d, start=0):
    if d == 0:
        yield ()
        return
    for i in range(start, n):
        for rest in _combos(n, d - 1, i):
            yield (i,) + rest


def _monomials(v, degree: int):
    """Each taxel's own monomials of degree 2..``degree`` in its variables ``v [..., N, n]``
    (numpy or jnp): ``[..., N, k]``."""
    xp = jnp if isinstance(v, jax.Array) else np
    n = v.shape[-1]
    cols = [v[..., list(c)].prod(-1) for d in range(2, degree + 1) for c in _combos(n, d)]
    return xp.stack(cols, -1) if cols else v[..., :0]


class _Spec(NamedTuple):
    """What the features need: polynomial ``degree``, creep ``tau`` (s or None), ``scale [3N]``."""

    degree: int
    tau: float | None
    scale: np.ndarray


def _decay(time, tau):
    """The Maxwell element's per-sample decay ``exp(-dt / tau)`` ``[T]`` (1 at the first sample)."""
    return np.exp(-np.diff(time, prepend=time[0]) / tau)


def features(spec, forces: np.ndarray, time: np.ndarray) -> np.ndarray:
    """Features ``psi [T, F]`` of taxel forces ``[T, N, 3]`` (N) at ``time [T]`` (s)."""
    T = forces.shape[0]
    u = forces.reshape(T, -1) / spec.scale
    m = None
    if spec.tau is not None:
        m = np.asarray(_maxwell(jnp.asarray(u), jnp.asarray(_decay(time, spec.tau))))
    cols = [u, _monomials(u.reshape(T, -1, 3), spec.degree).reshape(T, -1)]
    return np.concatenate(cols + ([] if m is None else [m]), 1)


def _feature_taxel(spec, N: int) -> np.ndarray:
    """The taxel each feature belongs to ``[F]``."""
    k = sum(1 for d in range(2, spec.degree + 1) for _ in _combos(3, d))
    own = [np.repeat(np.arange(N), 3), np.repeat(np.arange(N), k)]
    if spec.tau is not None:
        own.append(np.repeat(np.arange(N), 3))
    return np.concatenate(own)


def tare_offset(log: VectorLog, tare: float) -> np.ndarray:
    """A session's no-load raw values ``[N, 3]``: the median over its first ``tare`` seconds."""
    t = log.time
    first = t <= t[0] + tare
    if first.sum() < 2 or t[-1] - t[0] < tare:
        raise ValueError(f"{log.name or 'raw log'}: shorter than the tare ({tare} s at rest)")
    return np.median(log.raw[first], axis=0)


# ----------------------------------------------------------------------------- targets


class _Session(NamedTuple):
    log: VectorLog
    ref: WrenchLog
    pressed: np.ndarray | None  # [T] given, or None (inferred)


def _taxel_forces(sess, lag, positions, rotations, rest_force):
    """Taxel forces ``[T, N, 3]`` (taxel axes) from the reference at ``lag``, and the usable
    samples ``[T]`` (the reference spans them)."""
    w, inside = wrench_at(sess.ref, sess.log.time, lag)
    T, N = w.shape[0], positions.shape[0]
    F, Tq = w[:, :3], w[:, 3:]
    if sess.pressed is not None:
        k = sess.pressed
    else:
        miss = np.linalg.norm(Tq[:, None] - np.cross(positions[None], F[:, None]), axis=-1)
        k = _nearest_fill(np.where(np.linalg.norm(F, axis=1) > rest_force, np.argmin(miss, 1), -1))
    f = np.zeros((T, N, 3))
    on = k >= 0
    f[on, k[on]] = np.einsum("tij,ti->tj", rotations[k[on]], F[on])  # R_k^T F: taxel axes
    return f, inside


def _nearest_fill(k: np.ndarray) -> np.ndarray:
    """Each -1 entry takes the nearest assigned entry's value (a load below the rest force, as
    a press starts or ends, belongs to that press; at rest the force it carries is ~0)."""
    on = np.flatnonzero(k >= 0)
    if on.size == 0:
        return np.zeros_like(k)
    i = np.arange(k.size)
    j = np.searchsorted(on, i)
    j0, j1 = on[np.clip(j - 1, 0, on.size - 1)], on[np.clip(j, 0, on.size - 1)]
    return k[np.where(np.abs(i - j0) <= np.abs(j1 - i), j0, j1)]


def _lstsq(PtP, PtY, mask):
    """Weights ``[K, F]`` of ``y ~ W psi`` with ``W[k, f] = 0`` where ``mask`` is False, solved in
    unit-diagonal coordinates dropping only directions below rounding."""
    K, F = mask.shape
    W = np.zeros((K, F))
    for cols in {tuple(np.flatnonzero(m)) for m in mask}:  # one solve per coupling pattern
        c = list(cols)
        rows = np.flatnonzero(np.all(mask[:, c], 1) & (mask.sum(1) == len(c)))
        H = PtP[np.ix_(c, c)]
        d = np.sqrt(np.where(np.diagonal(H) > 0, np.diagonal(H), 1.0))
        lam, V = np.linalg.eigh(H / np.outer(d, d))
        inv = np.where(lam > 1e-8 * lam.max(), 1.0 / np.where(lam > 0, lam, 1.0), 0.0)
        W[np.ix_(rows, c)] = ((V * inv) @ (V.T @ (PtY[c][:, rows] / d[:, None])) / d[:, None]).T
    return W


# ----------------------------------------------------------------------------- the fit


def fit_triaxial(
    raws,
    refs,
    positions,
    *,
    rotations=None,
    pressed="infer",
    degrees=(1, 2, 3),
    taus="auto",
    tare: float = 0.5,
    validation: float = 0.25,
    rest_force: float | None = None,
    max_lag: float = 0.5,
    coupling_radius: float | None = None,
    lag_iterations: int = 3,
) -> TriaxialFit:
    """Fit a three-axis raw model to sessions of raw logs and their force/torque references.

    Args:
      raws: :class:`~difftaxel.rawmodel.VectorLog` per session (``raw [T, N, 3]``, own clock).
      refs: :class:`~difftaxel.rawmodel.WrenchLog` per session (``wrench [S, 6]``, own clock).
      positions: ``[N, 3]`` m, taxel centres in the force/torque sensor's frame.
      rotations: ``[N, 3, 3]`` taxel axes (columns) in the sensor frame; default identity.
      pressed: ``"infer"`` or a list of ``[T_s]`` int per session (-1 at rest; module doc).
      degrees: polynomial degrees to choose from (1: linear; at most 3).
      taus: creep time constants (s) to choose from, ``"auto"`` (a grid from ten skin samples
        to 5 s, refined by golden section) or ``()`` (no creep). Shorter than ten samples, a
        Maxwell element only mimics a delay.
      tare: s at the start of a new session at rest (its offset in :func:`predict_triaxial`).
      validation: the last fraction of each session that chooses the degree and ``tau``.
      rest_force: N, below which the torque cannot tell the pressed taxel (default 5 % of the
        largest reference force).
      max_lag: s, the largest lag searched.
      coupling_radius: m; None: every taxel's channels respond to every taxel's load.
      lag_iterations: alternations of lag refinement (golden section per session) and weights.

    Returns a :class:`TriaxialFit`. Errors name the argument or the file.
    """
    raws = [checked_vector_log(r) for r in (raws if isinstance(raws, (list, tuple)) else [raws])]
    refs = [checked_wrench_log(r) for r in (refs if isinstance(refs, (list, tuple)) else [refs])]
    if len(raws) != len(refs) or not raws:
        raise ValueError(f"refs: expected one reference per raw log ({len(raws)}), got {len(refs)}")
    N = raws[0].n_taxels
    for r in raws:
        if r.n_taxels != N:
            raise ValueError(f"{r.name}: {r.n_taxels} taxels, the first log has {N}")
    pos = np.asarray(positions, float)
    if pos.shape != (N, 3) or not np.all(np.isfinite(pos)):
        raise ValueError(f"positions: expected finite [{N}, 3] (m, sensor frame), got {pos.shape}")
    rot = np.tile(np.eye(3), (N, 1, 1)) if rotations is None else np.asarray(rotations, float)
    if rot.shape != (N, 3, 3) or not np.allclose(
        np.einsum("nji,njk->nik", rot, rot), np.eye(3), atol=1e-6
    ):
        raise ValueError(
            f"rotations: expected [{N}, 3, 3] rotation matrices (taxel axes as columns)"
        )
    if isinstance(pressed, str):
        if pressed != "infer":
            raise ValueError(f"pressed: expected 'infer' or a list of arrays, got {pressed!r}")
        given = [None] * len(raws)
    else:
        given = [np.asarray(p, int) for p in pressed]
        if len(given) != len(raws) or any(g.shape != r.time.shape for g, r in zip(given, raws)):
            raise ValueError("pressed: expected one [T] int array per session (its raw samples)")
        if any(np.any((g < -1) | (g >= N)) for g in given):
            raise ValueError(f"pressed: expected taxel indices in 0..{N - 1} or -1 (rest)")
    if not 0 < validation < 1:
        raise ValueError(f"validation: expected a fraction in (0, 1), got {validation}")
    degrees = tuple(int(d) for d in degrees)
    if not degrees or min(degrees) < 1 or max(degrees) > 3:
        raise ValueError(f"degrees: expected values among 1, 2, 3, got {degrees}")
    if not (np.isfinite(tare) and tare > 0):
        raise ValueError(f"tare: expected a positive time (s), got {tare}")
    for r in raws:
        tare_offset(r, tare)  # every session starts with its tare
    if coupling_radius is None:
        coupling = np.ones((N, N), bool)
    else:
        coupling = np.linalg.norm(pos[:, None] - pos[None], axis=-1) <= float(coupling_radius)
    sessions = [_Session(r, f, g) for r, f, g in zip(raws, refs, given)]
    S = len(sessions)
    lags = np.array([coarse_lag(s.log, s.ref, max_lag) for s in sessions])
    f_max = max(float(np.abs(s.ref.wrench[:, :3]).max()) for s in sessions)
    rest = 0.05 * f_max if rest_force is None else float(rest_force)
    scale = np.full(3 * N, max(f_max, 1e-12))
    dts = float(np.median(np.concatenate([np.diff(s.log.time) for s in sessions])))

    def session_design(spec, i, lag):
        """Session ``i`` at ``lag``: features with session columns ``[T, S + F]``, raw
        ``[T, 3N]``, usable samples ``[T]``."""
        s = sessions[i]
        f, ok = _taxel_forces(s, lag, pos, rot, rest)
        psi = features(spec, f, s.log.time)
        ind = np.zeros((psi.shape[0], S))
        ind[:, i] = 1.0
        return np.concatenate([ind, psi], 1), s.log.raw.reshape(psi.shape[0], -1), ok

    def design(spec, which, lag_list=None):
        """Every session's :func:`session_design`, its usable samples restricted to ``which``:
        'train' (the head of each session), 'valid' (the tail) or 'all'."""
        out = []
        for i in range(S):
            X, y, ok = session_design(spec, i, (lags if lag_list is None else lag_list)[i])
            T = X.shape[0]
            k = np.arange(T)
            cut = int(round((1 - validation) * T))
            part = {"train": k < cut, "valid": k >= cut}.get(which, np.ones(T, bool))
            out.append((X, y, ok & part))
        return out

    def mask_for(spec):
        ft = _feature_taxel(spec, N)
        own = np.repeat(np.arange(N), 3)
        return np.concatenate([np.ones((3 * N, S), bool), coupling[own][:, ft]], 1)

    def solve(spec, parts):
        F = parts[0][0].shape[1]
        PtP, PtY = np.zeros((F, F)), np.zeros((F, 3 * N))
        for X, y, ok in parts:
            PtP += X[ok].T @ X[ok]
            PtY += X[ok].T @ y[ok]
        return _lstsq(PtP, PtY, mask_for(spec))

    def rms(W, parts):
        e = np.concatenate([(X @ W.T - y)[ok] for X, y, ok in parts])
        return float(np.sqrt(np.mean(e * e))) if e.size else np.inf

    def normal_eq(spec, i, lag):
        """Session ``i``'s share of the normal equations at ``lag`` (every sample)."""
        X, y, ok = session_design(spec, i, lag)
        X, y = X[ok], y[ok]
        return X.T @ X, X.T @ y, float(np.sum(y * y))

    def profile(spec, eqs):
        """Total RSS with the weights solved (variable projection) from normal equations."""
        PtP, PtY, yy = (sum(e[k] for e in eqs) for k in range(3))
        W = _lstsq(PtP, PtY, mask_for(spec))
        return yy - 2 * np.sum(W.T * PtY) + np.sum((PtP @ W.T) * W.T)

    def refine_tau(spec):
        """The creep time constant by golden section on the profile (log scale, within 2x)."""
        if spec.tau is None:
            return spec

        def cost(v):
            sp = spec._replace(tau=float(np.exp(v)))
            return profile(sp, [normal_eq(sp, i, lags[i]) for i in range(S)])

        v = np.log(spec.tau)
        return spec._replace(
            tau=float(np.exp(_golden(cost, v - np.log(2), v + np.log(2), tol=1e-3)))
        )

    def refine_lags(spec):
        """Each session's lag by golden section on the profile: the weights re-solved at every
        trial lag (variable projection), the other sessions' lags held."""
        eqs = [normal_eq(spec, i, lags[i]) for i in range(S)]
        for i in range(S):
            rest_eq = [e for j, e in enumerate(eqs) if j != i]

            def cost(lag, i=i, rest_eq=rest_eq):
                return profile(spec, rest_eq + [normal_eq(spec, i, lag)])

            lags[i] = _golden(cost, lags[i] - 2 * dts, lags[i] + 2 * dts, tol=dts * 1e-3)
            eqs[i] = normal_eq(spec, i, lags[i])

    if isinstance(taus, str):
        if taus != "auto":
            raise ValueError(
                f"taus: expected 'auto', () or a sequence of time constants (s), got {taus!r}"
            )
        grid, refine = list(np.geomspace(10 * dts, 5.0, 7)), True
    else:
        grid, refine = [float(t) for t in taus], False
        if any(not (np.isfinite(t) and t > 0) for t in grid):
            raise ValueError(f"taus: expected positive time constants (s), got {grid}")
    # 1. a linear model aligns the clocks roughly, with a creep element when one may be chosen
    # (unmodelled creep delays the field behind the load, and the lag would absorb it: the
    # choice below would then compare models at lags biased against the creep)
    spec = _Spec(1, float(np.exp(np.mean(np.log(grid)))) if grid else None, scale)
    for _ in range(int(lag_iterations)):
        spec = refine_tau(spec)
        refine_lags(spec)
    # 2. degree and tau are chosen on validation; a taxel pressed in fewer than three
    # independent directions before the split has a 3 x 3 response the split cannot judge
    warnings = []
    thin = _thin_taxels(sessions, lags, pos, rot, rest, 1 - validation)
    if thin:
        warnings.append(
            f"taxels {thin} are pressed in fewer than three independent force directions in the "
            f"first {100 * (1 - validation):.0f} % of the sessions, which choose the model: "
            "record more presses per taxel (the degree and creep chosen may be wrong)"
        )
    scores = {}

    def score(deg, tau):
        key = (deg, None if tau is None else float(tau))
        if key not in scores:
            sp = _Spec(deg, key[1], scale)
            scores[key] = rms(solve(sp, design(sp, "train")), design(sp, "valid"))
        return scores[key]

    def choose():
        scores.clear()
        for deg in degrees:
            score(deg, None)
            if grid:
                best = min(grid, key=lambda t: score(deg, t))
                if refine:
                    i = grid.index(best)
                    lo, hi = np.log(grid[max(i - 1, 0)]), np.log(grid[min(i + 1, len(grid) - 1)])
                    u = _golden(lambda u, d=deg: score(d, float(np.exp(u))), lo, hi, tol=0.02)
                    score(deg, float(np.exp(u)))
        return min(scores, key=scores.get)

    # 3. choose, realign with the chosen model, choose again at the new lags, realign
    # (tau, chosen on the validation split, is then refined with the lags on every sample: the
    # lag and tau trade against each other, so neither is left at a grid or split's value)
    for _ in range(2):
        deg, tau = choose()
        spec = _Spec(deg, tau, scale)
        for _ in range(int(lag_iterations)):
            spec = refine_tau(spec)
            refine_lags(spec)
    parts = design(spec, "all")
    W = solve(spec, parts)
    std, std_white, block = block_covariance(
        W, parts, mask_for(spec), nonlinear_derivatives(spec, lags, design)
    )
    K = W.shape[0]
    model = TriaxialModel(W[:, S:], spec.degree, spec.tau, scale, pos, rot, float(tare), coupling)
    wnames = np.array(
        [
            [
                f"offset[session {j}, channel {k}]" if j < S else f"w[{k}, {j - S}]"
                for j in range(W.shape[1])
            ]
            for k in range(K)
        ]
    )
    P = W.size
    undetermined = [str(n) for n, v in zip(wnames.reshape(-1), std[:P]) if np.isinf(v)]
    undetermined += [f"lag[{s}]" for s in range(S) if np.isinf(std[P + s])]
    tau_std = float(std[P + S] * spec.tau) if spec.tau is not None else None
    Wstd, Wstd_white = std[:P].reshape(W.shape), std_white[:P].reshape(W.shape)
    return TriaxialFit(
        model,
        lags.copy(),
        std[P : P + S],
        W[:, :S].T.reshape(S, N, 3),
        Wstd[:, :S].T.reshape(S, N, 3),
        tau_std,
        Wstd[:, S:],
        Wstd_white[:, S:],
        dict(scores),
        rms(W, parts),
        block,
        undetermined,
        tuple(warnings),
    )


def _thin_taxels(sessions, lags, pos, rot, rest, head: float) -> list:
    """Taxels whose loads in the first ``head`` of every session span fewer than three
    directions (the smallest singular value of their stacked forces under 5 % of the largest)."""
    N = pos.shape[0]
    stacks = [[] for _ in range(N)]
    for s, lag in zip(sessions, lags):
        f, ok = _taxel_forces(s, lag, pos, rot, rest)
        f = f[: int(round(head * f.shape[0]))][ok[: int(round(head * f.shape[0]))]]
        for i in range(N):  # host, once per fit
            stacks[i].append(f[:, i][np.linalg.norm(f[:, i], axis=1) > rest])
    thin = []
    for i in range(N):
        a = np.concatenate(stacks[i])
        sv = np.linalg.svd(a, compute_uv=False) if a.shape[0] >= 3 else np.zeros(3)
        if sv.size < 3 or sv[-1] < 0.05 * max(sv[0], 1e-300):
            thin.append(i)
    return thin


def _golden(f, lo, hi, tol):
    """Minimum of a unimodal ``f`` on ``[lo, hi]`` by golden-section search."""
    a, b = float(lo), float(hi)
    c, d = b - _GOLD * (b - a), a + _GOLD * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - _GOLD * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + _GOLD * (b - a)
            fd = f(d)
    return 0.5 * (a + b)
