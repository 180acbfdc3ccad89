"""Layout calibration: smoothing stages, a per-taxel Levenberg-Marquardt, the report."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..calibrate import FitResult, fit, scaled_inverse
from ..sensors import KinematicTaxel
from .layout import LinkLayout, channel_mask

Array = jax.Array

__all__ = ["LayoutFit", "calibrate_layout"]


class LayoutFit(NamedTuple):
    """Result of :func:`calibrate_layout`.

    Attributes:
      layout: the calibrated :class:`LinkLayout` (taxels not identified keep their initial
        values).
      gains: ``[N]`` fitted gains (1 where not identified) or None.
      excited: ``[N]`` bool, the taxel read a non-zero value in some training frame.
      identified: ``[N]`` bool, excited and its parameters' standard deviations within limits.
      std_position: ``[N, 3]`` m, std of each position coordinate (layout frame).
      std_normal_deg: ``[N]`` deg, std of the normal's direction (the larger tangent-plane axis).
      std_tangent_deg: ``[N]`` deg, std of the tangent's angle about the normal (NaN when no
        tangential channel is read: the tangent then only follows the normal).
      noise_std: residual std (reading units) on the training frames: the median over taxels
        of each taxel's residual variance (robust to taxels that did not converge).
      train_rmse, holdout_rmse, holdout_rmse_initial: RMSE over the selected channels of the
        training frames, of the held-out frames, and of the held-out frames before the fit
        (None without held-out frames).
      holdout: ``[T]`` bool, the held-out frames.
      results: the :class:`~difftaxel.calibrate.FitResult` of each smoothing stage.
      explained: ``[N]`` bool, the taxel's training residuals are within the noise (a chi-square
        test at ~4 sigma); a taxel that is not explained is never identified (it sits in a
        wrong local minimum, whatever its standard deviations say).
    """

    layout: LinkLayout
    gains: np.ndarray | None
    excited: np.ndarray
    identified: np.ndarray
    std_position: np.ndarray
    std_normal_deg: np.ndarray
    std_tangent_deg: np.ndarray
    noise_std: float
    train_rmse: float
    holdout_rmse: float | None
    holdout_rmse_initial: float | None
    holdout: np.ndarray
    results: list
    explained: np.ndarray | None = None

    def report(self) -> str:
        """A few lines for people: what was identified, what was not, and the checks."""
        N = self.excited.size
        lines = [
            f"{int(self.identified.sum())} of {N} taxels identified; "
            f"{int((~self.excited).sum())} never excited, "
            f"{int((self.excited & ~self.identified).sum())} excited but not identifiable "
            "(kept at their initial layout)"
        ]
        if self.explained is not None and (self.excited & ~self.explained).any():
            lines[0] += (
                f", of which {int((self.excited & ~self.explained).sum())} with residuals above "
                "the noise (a wrong local minimum: press them again)"
            )
        idf = self.identified
        if idf.any():
            lines.append(
                f"identified taxels: median std position {np.median(self.std_position[idf].max(1)) * 1e3:.3f} mm, "
                f"normal {np.median(self.std_normal_deg[idf]):.2f} deg"
            )
        if self.holdout_rmse is not None:
            lines.append(
                f"held-out frames: RMSE {self.holdout_rmse:.4g} (initial layout "
                f"{self.holdout_rmse_initial:.4g}), training {self.train_rmse:.4g}, "
                f"noise estimate {self.noise_std:.4g}"
            )
        return "\n".join(lines)


def _geometry(q, base, length_scale):
    """Positions, normals and reference tangents from per-taxel parameters: a position offset
    (``length_scale`` m per unit), a tilt of the normal along the initial tangents and a spin
    of the tangent about the normal (rad)."""
    p0, n0, t0, t1 = base
    p = p0 + length_scale * q["dpos"]
    n = n0 + q["tilt"][:, :1] * t0 + q["tilt"][:, 1:2] * t1
    n = n / jnp.linalg.norm(n, axis=-1, keepdims=True)
    t = t0
    if "spin" in q:
        t = jnp.cos(q["spin"])[:, None] * t0 + jnp.sin(q["spin"])[:, None] * t1
    return p, n, t


def _host_rng(key):
    seed = 0 if key is None else int(jax.random.randint(key, (), 0, 2**30))
    return np.random.default_rng(seed)


def calibrate_layout(
    sensor: KinematicTaxel,
    layout: LinkLayout,
    scene,
    measured,
    *,
    channels="xyz",
    fit_gains: bool = False,
    holdout: float = 0.2,
    key=None,
    smoothing_schedule=(5e-4, 1e-4, 0.0),
    steps_per_stage: int = 200,
    learning_rate: float = 5e-3,
    length_scale: float = 0.01,
    lm_steps: int = 15,
    max_std_position: float = 0.5e-3,
    max_std_normal_deg: float = 3.0,
    progress: bool = False,
) -> LayoutFit:
    """Fit each taxel's position and normal (its tangent too when a tangential channel is
    read, and optionally a gain) to recorded readings.

    Args:
      sensor: the force model (:class:`~difftaxel.sensors.KinematicTaxel` options).
      layout: the initial layout (:class:`LinkLayout`), in the rig's frame.
      scene: the rig: a :class:`LinkScene` (a rigid link; layout in the link frame) or a
        :class:`SkinnedScene` (a skinned hand; layout = bind poses in the wrist root frame).
      measured: readings ``[T, N, 3]`` in taxel axes, or ``[T, N]`` normal readings (then
        ``channels`` may select only the normal channel); entries outside ``channels`` are
        ignored.
      channels: ``"xyz"``, ``"normal"`` or a bool mask ``[3]`` / ``[N, 3]`` (taxel axes).
      fit_gains: also fit a positive gain per taxel (pressure readings, unknown sensitivity).
      holdout: fraction of frames (drawn with ``key``) kept out of the fit to check it.
      smoothing_schedule, steps_per_stage, learning_rate: the first-order stages (Adam, each
        with its contact smoothing in m: a taxel out of contact has no gradient otherwise).
      length_scale: m per unit of position parameter (sets position against angle steps).
      lm_steps: per-taxel Levenberg-Marquardt iterations at the exact model (0: none).
      max_std_position, max_std_normal_deg: a taxel is *identified* when every position std is
        within the first (m) and its normal's (and tangent's) std within the second (deg);
        others keep their initial values and are reported.

    Returns a :class:`LayoutFit`. A taxel is identified only with at least as many non-zero
    readings as it has parameters and a Jacobian of full rank at its dtype's resolution
    (:func:`~difftaxel.calibrate.scaled_inverse`); others keep their initial values with
    infinite standard deviations. Errors name the argument (shapes, non-finite readings, a
    channel mask that selects nothing, all-zero readings, normal readings of the opposite sign
    to the model's: compression is negative z in taxel axes).
    """
    N = layout.n_taxels
    mask = channel_mask(channels, N)
    meas = np.asarray(measured, float)
    T = scene.n_frames
    if meas.shape == (T, N):
        if mask[:, :2].any():
            raise ValueError("measured: [T, N] readings are normal only; use channels='normal'")
        meas = np.stack([np.zeros_like(meas), np.zeros_like(meas), meas], -1)
    if meas.shape != (T, N, 3):
        raise ValueError(f"measured: expected ({T}, {N}, 3) or ({T}, {N}), got {meas.shape}")
    if not np.all(np.isfinite(meas[:, mask])):
        raise ValueError("measured: non-finite readings in the selected channels")
    if not 0.0 <= float(holdout) < 1.0:
        raise ValueError(f"holdout: expected a fraction in [0, 1), got {holdout}")
    hold = np.zeros(T, bool)
    n_hold = int(round(holdout * T))
    if n_hold:
        hold[_host_rng(key).choice(T, n_hold, replace=False)] = True
    train = ~hold
    if train.sum() < 1:
        raise ValueError("holdout: leaves no training frame")
    normal = meas[train][..., 2][:, mask[:, 2]]
    pos, neg = float(np.sum(np.clip(normal, 0, None))), float(np.sum(np.clip(-normal, 0, None)))
    if pos > 9.0 * neg:
        raise ValueError(
            "measured: the normal readings are positive (compression read as +, as most skins "
            "report pressure); the model reads compression as negative z in taxel axes (+z "
            "outward): pass -measured"
        )
    scale = float(np.abs(meas[train][:, mask]).max())
    if not scale > 0:
        raise ValueError("measured: every selected training reading is zero; nothing to fit")
    dtype = jnp.result_type(float)
    p0, n0, t0 = (jnp.asarray(a, dtype) for a in layout)
    base = (p0, n0, t0, jnp.cross(n0, t0))
    m_j = jnp.asarray(mask, dtype)
    w_train = jnp.asarray(train, dtype)[:, None, None] * m_j[None]
    meas_j = jnp.asarray(meas, dtype)
    sub = scene.subset(np.flatnonzero(train))
    meas_tr = meas_j[train]

    def readings(q, s, sc):
        p, n, t = _geometry(q, base, length_scale)
        return sc.readings(s, p, n, t, q.get("gain"))

    sizes = {"dpos": 3, "tilt": 2}
    if mask[:, :2].any():
        sizes["spin"] = 1
    if fit_gains:
        sizes["gain"] = 1
    params = {k: jnp.zeros((N, m) if m > 1 else (N,), dtype) for k, m in sizes.items()}
    if fit_gains:
        params["gain"] = jnp.ones(N, dtype)
    n_sel = float(m_j.sum()) * float(train.sum())
    results: list[FitResult] = []
    for sm in smoothing_schedule:
        s = sensor.replace(smoothing=float(sm))

        def loss(q, _, s=s):
            r = (readings(q, s, sub) - meas_tr) * m_j[None]
            return jnp.sum(r * r) / (n_sel * scale**2)

        r = fit(
            loss,
            params,
            steps=steps_per_stage,
            learning_rate=learning_rate,
            transforms={"gain": "log"} if fit_gains else None,
            log_every=max(1, min(50, steps_per_stage)),
            progress=progress,
        )
        params = {k: jnp.asarray(v) for k, v in r.params.items()}
        results.append(r)

    exact = sensor.replace(smoothing=0.0)
    P = sum(sizes.values())

    def unpack(v):  # [N, P] -> params
        out, i = {}, 0
        for k, m in sizes.items():
            out[k] = v[:, i : i + m] if m > 1 else v[:, i]
            i += m
        return out

    def pack(q):
        return jnp.concatenate([q[k] if m > 1 else q[k][:, None] for k, m in sizes.items()], 1)

    def res(v):
        r = (readings(unpack(v), exact, scene) - meas_j) * w_train
        return jnp.moveaxis(r, 1, 0).reshape(N, -1)  # [N, T*3]: taxel i's own residuals

    @jax.jit
    def blocks(v):
        """Residuals ``[N, T*3]`` and Jacobian blocks ``[N, T*3, P]``: taxel ``i``'s readings
        depend on its own parameters only, so P forward-mode products give every block."""
        outs = [jax.jvp(res, (v,), (jnp.zeros_like(v).at[:, k].set(1.0),)) for k in range(P)]
        return outs[0][0], jnp.stack([t for _, t in outs], -1)  # the primal comes with them

    cost_of = jax.jit(lambda v: jnp.sum(res(v) ** 2, 1))
    v = pack(params)
    lam = jnp.full(N, 1e-3, dtype)
    stalled = 0
    for _ in range(int(lm_steps)):  # a few iterations on the host; every taxel at once
        r, J = blocks(v)
        A = jnp.einsum("nrp,nrq->npq", J, J)
        g = jnp.einsum("nrp,nr->np", J, r)
        d = jnp.diagonal(A, axis1=1, axis2=2)
        damp = lam[:, None] * (d + 1e-9 * jnp.max(d, 1, keepdims=True)) + 1e-30
        step = -jnp.linalg.solve(A + jax.vmap(jnp.diag)(damp), g[..., None])[..., 0]
        c_old = jnp.sum(r * r, 1)
        c_new = cost_of(v + step)
        ok = jnp.isfinite(c_new) & (c_new < c_old)
        v = jnp.where(ok[:, None], v + step, v)
        lam = jnp.where(ok, lam / 3.0, lam * 10.0)
        gain = jnp.sum(jnp.where(ok, c_old - c_new, 0.0)) / jnp.maximum(jnp.sum(c_old), 1e-300)
        stalled = stalled + 1 if float(gain) < 1e-7 else 0
        if stalled >= 3:  # converged: three tries (lam x1000) and no taxel's cost falls
            break

    r, J = blocks(v)
    q = unpack(v)
    predict = jax.jit(lambda q: readings(q, exact, scene))  # shared by the fit and the start
    pred = np.asarray(predict(q))
    # the noise is the median over taxels of each one's residual variance: one taxel that did
    # not converge (started far off) must not inflate every other taxel's uncertainty
    rss_i = np.sum(np.asarray(r, np.float64) ** 2, 1)
    dof_i = mask.sum(1) * float(train.sum()) - P
    ok_i = dof_i > 0
    if ok_i.any():
        noise = float(np.sqrt(np.median(rss_i[ok_i] / dof_i[ok_i])))
    else:  # fewer readings than parameters per taxel: pooled (no taxel is identified anyway)
        noise = float(
            np.sqrt(np.sum(rss_i) / max(float(mask.sum()) * float(train.sum()) - N * P, 1.0))
        )
    A = np.asarray(jnp.einsum("nrp,nrq->npq", J, J), np.float64)
    excited = np.any((np.abs(meas[train]) > 0) & mask[None], axis=(0, 2))
    # a taxel with fewer non-zero readings than parameters is never identified, whatever the
    # rounding of its Jacobian says; the rank test itself follows the Jacobian's dtype
    n_read = np.sum((np.abs(meas[train]) > 0) & mask[None], axis=(0, 2))
    Hinv, undetermined = scaled_inverse(A, dtype=J.dtype)
    var = noise**2 * np.diagonal(Hinv, axis1=1, axis2=2)
    var = np.where(undetermined | ~(excited & (n_read >= P))[:, None], np.inf, var)
    var = np.clip(var, 0.0, None)
    std_pos = length_scale * np.sqrt(var[:, :3])
    std_n = np.degrees(np.sqrt(var[:, 3:5].max(1)))
    std_t = np.degrees(np.sqrt(var[:, 5])) if "spin" in sizes else np.full(N, np.nan)
    # a taxel whose residuals exceed the noise (a chi-square excess at ~4 sigma) sits in a wrong
    # local minimum, however sharp: its small standard deviations would be a lie
    explained = ok_i & (
        rss_i / np.maximum(dof_i, 1) <= noise**2 * (1.0 + 4.0 * np.sqrt(2.0 / np.maximum(dof_i, 1)))
    )
    identified = (
        excited
        & explained
        & (std_pos.max(1) <= max_std_position)
        & (std_n <= max_std_normal_deg)
        & (np.isnan(std_t) | (std_t <= max_std_normal_deg))
    )
    p_fit, n_fit, t_fit = (np.asarray(a) for a in _geometry(q, base, length_scale))
    keep = identified[:, None]
    new = LinkLayout.make(
        np.where(keep, p_fit, layout.positions),
        np.where(keep, n_fit, layout.normals),
        np.where(keep, t_fit, layout.tangents),
    )
    gains = None if "gain" not in q else np.where(identified, np.asarray(q["gain"]), 1.0)

    def rmse(pr, frames):
        if not frames.any():
            return None
        d = (pr[frames] - meas[frames])[:, mask]
        return float(np.sqrt(np.mean(d * d)))

    init_rmse = None
    if hold.any():
        q0 = {k: jnp.ones_like(a) if k == "gain" else jnp.zeros_like(a) for k, a in q.items()}
        init_rmse = rmse(np.asarray(predict(q0)), hold)
    return LayoutFit(
        layout=new,
        gains=gains,
        excited=excited,
        identified=identified,
        std_position=std_pos,
        std_normal_deg=std_n,
        std_tangent_deg=std_t,
        noise_std=noise,
        train_rmse=rmse(pred, train),
        holdout_rmse=rmse(pred, hold),
        holdout_rmse_initial=init_rmse,
        holdout=hold,
        results=results,
        explained=explained,
    )
