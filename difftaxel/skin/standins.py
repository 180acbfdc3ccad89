"""Synthetic stand-ins with known answers for skin calibration.

Real skin layouts and their older published estimates are not redistributed with difftaxel;
:func:`forearm_skin` builds a layout of the same kind (276 normal-reading taxels on one rigid,
curved link, in modules of 12) and an initial estimate whose errors follow a given
distribution, so a calibration can be scored against the truth.
"""

from __future__ import annotations

import numpy as np

from .layout import LinkLayout

__all__ = ["forearm_skin", "quantile_draws"]


def quantile_draws(rng, n: int, quantiles) -> np.ndarray:
    """``n`` positive values whose distribution interpolates ``quantiles``: pairs ``(q, value)``
    with ``q`` rising from 0 to 1 (piecewise-linear inverse CDF), e.g. ``((0, 0), (0.5, 3),
    (0.9, 6.4), (1, 9))`` for a median of 3 and a 90th percentile of 6.4. The draws are
    stratified (one per ``1/n`` of probability, shuffled), so their sample quantiles match."""
    q = np.asarray(quantiles, float)
    if (
        q.ndim != 2
        or q.shape[1] != 2
        or q[0, 0] != 0
        or q[-1, 0] != 1
        or np.any(np.diff(q[:, 0]) <= 0)
    ):
        raise ValueError("quantiles: expected (q, value) pairs with q rising from 0 to 1")
    u = (np.arange(n) + 0.5) / n
    return rng.permutation(np.interp(u, q[:, 0], q[:, 1]))


def forearm_skin(
    seed: int = 0,
    *,
    rings: int = 23,
    per_ring: int = 12,
    pitch: float = 4.5e-3,
    radius: float = 0.04,
    position_quantiles=((0, 0.3e-3), (0.5, 3.2e-3), (0.9, 6.4e-3), (1, 8.9e-3)),
    normal_quantiles_deg=((0, 1.0), (0.5, 12.0), (0.9, 20.0), (1, 26.0)),
) -> tuple[LinkLayout, LinkLayout]:
    """A true layout and an initial estimate of it: ``(true, initial)``.

    ``rings * per_ring`` taxels (276 by default) at ``pitch`` (m) on a cylinder of ``radius``
    (m) about the link's z axis, outward normals; a module is one ring of ``per_ring``. The
    initial estimate displaces each taxel tangentially to the surface by a distance drawn from
    ``position_quantiles`` (m; by default median 3.2 mm, 90th percentile 6.4 mm, worst 8.9 mm)
    in a direction that is half its module's and half its own, and tilts its normal by an angle
    drawn from ``normal_quantiles_deg`` (median 12 deg by default). Deterministic in ``seed``.
    """
    rng = np.random.default_rng(seed)
    ang = (np.arange(per_ring) - (per_ring - 1) / 2) * pitch / radius
    z = (np.arange(rings) - (rings - 1) / 2) * pitch
    Z, A = np.meshgrid(z, ang, indexing="ij")  # ring-major: a module is a row
    pos = np.stack([radius * np.cos(A), radius * np.sin(A), Z], -1).reshape(-1, 3)
    nrm = np.stack([np.cos(A), np.sin(A), 0 * A], -1).reshape(-1, 3)
    true = LinkLayout.make(pos, nrm)
    N = pos.shape[0]
    e_ang = np.stack([-np.sin(A), np.cos(A), 0 * A], -1).reshape(-1, 3)  # surface tangents
    e_z = np.tile([0.0, 0.0, 1.0], (N, 1))
    module = np.repeat(rng.uniform(0, 2 * np.pi, rings), per_ring)
    own = rng.uniform(0, 2 * np.pi, N)
    phi = np.angle(np.exp(1j * module) + np.exp(1j * own))
    d = quantile_draws(rng, N, position_quantiles)
    p0 = pos + d[:, None] * (np.cos(phi)[:, None] * e_ang + np.sin(phi)[:, None] * e_z)
    # the displaced point back onto the cylinder, its normal the cylinder's there, then tilted
    r_xy = np.linalg.norm(p0[:, :2], axis=1, keepdims=True)
    p0[:, :2] *= radius / r_xy
    n_surf = np.concatenate([p0[:, :2] / radius, np.zeros((N, 1))], 1)
    tilt = np.radians(quantile_draws(rng, N, normal_quantiles_deg))
    psi = rng.uniform(0, 2 * np.pi, N)
    t_a = np.cross(e_z, n_surf)
    axis = np.cos(psi)[:, None] * t_a + np.sin(psi)[:, None] * e_z
    n0 = np.cos(tilt)[:, None] * n_surf + np.sin(tilt)[:, None] * axis
    return true, LinkLayout.make(p0, n0)
