"""Excitation that adapts: plan the next presses where taxels are not identified, and the loop
plan -> record -> fit that stops at a target identified fraction or a press budget.

A press plan designed from a nominal layout presses where taxels *should* be; a taxel several
millimetres from its nominal site is then missed or barely touched, and stays unidentified.
:func:`next_presses` looks at a fit and its readings and, per taxel that is not identified:

* **excited** (its reading rose above the noise in some press): its site is estimated as the
  reading-weighted mean of those presses' contact centres (each indenter centre projected onto
  the taxel's current tangent plane), started a press depth inside the surface (so that the
  presses that touched it touch it in the model, which gives the fit its gradient), and :func:`~difftaxel.skin.press_plan`'s pattern (centred and offset
  presses at several depths) is pressed there;
* **never excited**: it lies outside every contact patch so far. Its prior site is its initial
  position moved by the median displacement of its identified neighbours (skins are often
  misplaced by modules); a hexagonal grid of single presses covers a disc around it whose radius
  is the larger of ``search_radius`` and the largest displacement identified, at a spacing that
  leaves no gap between contact patches. The grid's points lie on the local surface (the plane
  of the nearest identified taxel) and press along its normal; points whose contact centre a
  press so far already covered are left out (they did not touch it). :func:`calibrate_adaptively`
  doubles the disc each round a taxel stays untouched.

Given the ``sensor``, an excited taxel's start is then the best of a grid of sites around that
estimate by the residual of its readings so far (a local fit from millimetres off can settle
in a wrong minimum). Presses within 0.1 mm of one already planned are merged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from ..geometry import Bodies, Sphere
from .fit import LayoutFit, calibrate_layout
from .layout import LinkLayout, LinkScene, press_plan

__all__ = ["AdaptiveFit", "next_presses", "calibrate_adaptively", "concat_scenes", "press_scene"]


def press_scene(centres, radius: float, dt: float = 0.01) -> LinkScene:
    """A press scene: one sphere of ``radius`` (m) at each of ``centres [T, 3]`` (m, link frame),
    the link static at the identity, frame period ``dt`` (s)."""
    c = np.asarray(centres, float).reshape(-1, 3)
    T = c.shape[0]
    poses = np.concatenate([c, np.tile([0.0, 0.0, 0.0, 1.0], (T, 1))], 1)[:, None]
    bodies = Bodies((Sphere(radius=float(radius), body=0),), poses[0]).with_state(
        jnp.asarray(poses), jnp.zeros((T, 1, 6), jnp.asarray(poses).dtype)
    )
    link = jnp.asarray(np.tile([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], (T, 1)))
    return LinkScene(link, bodies, dt)


def _press_geometry(scene: LinkScene) -> tuple[np.ndarray, float]:
    """Sphere centres ``[T, 3]`` (link frame) and radius of a press scene."""
    b = scene.bodies
    if len(b.shapes) != 1 or not isinstance(b.shapes[0], Sphere):
        raise ValueError("scene: expected a press scene (one sphere, e.g. from press_plan)")
    link = np.asarray(scene.T_world_link, float)
    if not np.allclose(link, [0, 0, 0, 0, 0, 0, 1.0], atol=1e-12):
        raise ValueError("scene: expected a press scene with the link at the identity")
    return np.asarray(b.poses, float)[:, 0, :3], float(b.shapes[0].radius)


def concat_scenes(*scenes: LinkScene) -> LinkScene:
    """Press scenes one after the other (same sphere radius and frame period)."""
    cs, rs = zip(*(_press_geometry(s) for s in scenes))
    if not np.allclose(rs, rs[0]) or not np.allclose([s.dt for s in scenes], scenes[0].dt):
        raise ValueError("scenes: expected the same sphere radius and frame period in each")
    return press_scene(np.concatenate(cs), rs[0], scenes[0].dt)


def _hex_disc(radius: float, spacing: float) -> np.ndarray:
    """Points ``[K, 2]`` of a hexagonal grid of ``spacing`` within ``radius`` of the origin."""
    n = int(np.ceil(radius / spacing)) + 1
    i, j = np.meshgrid(np.arange(-n, n + 1), np.arange(-n, n + 1), indexing="ij")
    xy = np.stack([spacing * (i + 0.5 * j), spacing * (np.sqrt(3) / 2) * j], -1).reshape(-1, 2)
    return xy[np.linalg.norm(xy, axis=1) <= radius + 1e-12]


def next_presses(
    fit: LayoutFit,
    initial: LinkLayout,
    scene: LinkScene,
    measured,
    *,
    depths=(1e-3, 2e-3),
    offset: float = 3.5e-3,
    search_depth: float = 2.5e-3,
    search_radius: float = 10e-3,
    noise_sigmas: float = 4.0,
    sensor=None,
) -> tuple[LinkScene, dict]:
    """The next presses for the taxels ``fit`` did not identify (see the module docstring).

    Args:
      fit: a :class:`LayoutFit` of ``measured`` on ``scene``.
      initial: the layout the fit started from (the prior of taxels never excited).
      scene: the press scene fitted (one sphere; :func:`press_plan`, :func:`press_scene`).
      measured: its readings ``[T, N]`` (normal) or ``[T, N, 3]`` (taxel axes; compression is
        negative z).
      depths, offset: the pattern pressed at an excited taxel's estimated site
        (:func:`press_plan`'s, with the scene's sphere).
      search_depth: depth (m) of the search presses for taxels never excited; their contact
        patches have radius ``sqrt(2 r d - d^2)`` and the grid spacing is ``sqrt(3)`` times
        that, times 0.9.
      search_radius: least radius (m) of the disc searched around a never-excited taxel's prior
        (the initial layout's errors can reach this far).
      noise_sigmas: a reading counts as a touch above this many ``fit.noise_std``.
      sensor: the force model of the fit; given, each excited taxel starts at the best site of
        a grid around its estimate (by the residual of its readings so far).

    Returns ``(scene, info)``: the planned press scene (zero frames when every taxel is
    identified) and ``info`` with ``start`` (the :class:`LinkLayout` to fit from next: the
    fitted taxels as fitted, the others at their estimated sites), ``targeted`` and
    ``searched`` (bool ``[N]``).
    """
    centres, r = _press_geometry(scene)
    meas = np.asarray(measured, float)
    if meas.ndim == 3:
        meas = meas[..., 2]
    N = initial.n_taxels
    if meas.shape != (centres.shape[0], N):
        raise ValueError(
            f"measured: expected ({centres.shape[0]}, {N}) normal readings, got {meas.shape}"
        )
    for name, v in (("offset", offset), ("search_depth", search_depth)):
        if not 0 < v < r:
            raise ValueError(f"{name}: expected a value in (0, {r}) (the sphere radius), got {v}")
    lay = fit.layout
    idf = np.asarray(fit.identified, bool)
    w = np.clip(-meas - noise_sigmas * float(fit.noise_std), 0.0, None)  # compression: -z
    touched = w.sum(0) > 0
    targeted = ~idf & touched
    searched = ~idf & ~touched
    pos, nrm = lay.positions.copy(), lay.normals.copy()
    # excited: the reading-weighted contact centre (each press's centre projected onto the
    # taxel's current tangent plane: where along the surface it pressed)
    if targeted.any():
        wt = w[:, targeted] / w[:, targeted].sum(0)
        n_t, p_t = nrm[None, targeted], pos[None, targeted]
        rel = centres[:, None, :] - p_t  # [T, n, 3]
        contact = p_t + rel - np.sum(rel * n_t, -1, keepdims=True) * n_t
        # started a press depth inside the surface: every press that touched it then touches
        # it in the model too (a taxel started outside its presses has no gradient)
        pos[targeted] = np.einsum("tn,tnk->nk", wt, contact) - max(depths) * nrm[targeted]
    # never excited: the prior moved with its identified neighbours, then a searched disc
    plans = []
    if targeted.any():
        sites = LinkLayout.make(pos[targeted], nrm[targeted], lay.tangents[targeted])
        plans.append(_press_geometry(press_plan(sites, r, depths, offset, scene.dt))[0])
    if searched.any():
        moved = lay.positions - initial.positions
        ref_p = lay.positions[idf] if idf.any() else initial.positions
        ref_n = lay.normals[idf] if idf.any() else initial.normals
        reach = max(
            search_radius, float(np.linalg.norm(moved[idf], axis=1).max()) if idf.any() else 0.0
        )
        a = np.sqrt(2 * r * search_depth - search_depth**2)  # contact-patch radius
        disc = _hex_disc(reach, 0.9 * np.sqrt(3) * a)
        for i in np.flatnonzero(searched):  # host-side planning, a few taxels
            p0 = initial.positions[i]
            if idf.any():
                near = np.argsort(np.linalg.norm(initial.positions[idf] - p0, axis=1))[:6]
                p0 = p0 + np.median(moved[idf][near], axis=0)
            pos[i] = p0
            t0 = lay.tangents[i]
            t1 = np.cross(nrm[i], t0)
            pts = p0 + disc[:, :1] * t0 + disc[:, 1:] * t1
            j = np.argmin(np.linalg.norm(pts[:, None] - ref_p[None], axis=2), axis=1)
            n_j = ref_n[j]
            on = pts - np.sum((pts - ref_p[j]) * n_j, 1, keepdims=True) * n_j  # onto the surface
            done = np.min(np.linalg.norm(on[:, None] - (centres - r * n_j[:1])[None], axis=2), 1)
            plans.append((on + n_j * (r - search_depth))[done > a / 2])
    planned = np.concatenate(plans) if plans else np.zeros((0, 3))
    planned = _merge(planned, 1e-4)  # a press within 0.1 mm of another repeats it
    if sensor is not None and targeted.any():
        pos[targeted] = _best_start(sensor, scene, meas, pos, nrm, lay.tangents, targeted)
    start = LinkLayout.make(pos, nrm, lay.tangents)
    return press_scene(planned, r, scene.dt), {
        "start": start,
        "targeted": targeted,
        "searched": searched,
    }


def _best_start(sensor, scene, meas, pos, nrm, tan, which, reach=4e-3, step=1e-3):
    """Each ``which`` taxel's start: the best of a grid of sites (``step`` m apart, within
    ``reach`` m along its tangent plane, at depths 0 to 2 mm inside) by the residual of its
    readings so far. A local fit from a site millimetres off can settle in a wrong minimum;
    this global step over the few unidentified taxels costs one batched reading."""
    idx = np.flatnonzero(which)
    g = np.arange(-reach, reach + 1e-12, step)
    U, V, D = np.meshgrid(g, g, [0.0, 1e-3, 2e-3], indexing="ij")
    u, v, dpt = U.ravel(), V.ravel(), D.ravel()
    K = u.size
    t0 = tan[idx]
    t1 = np.cross(nrm[idx], t0)
    cand = (
        pos[idx, None]
        + u[None, :, None] * t0[:, None]
        + v[None, :, None] * t1[:, None]
        - dpt[None, :, None] * nrm[idx, None]
    )  # [n, K, 3]
    n = idx.size
    flat = cand.reshape(-1, 3)
    rep = lambda a: np.repeat(a[idx], K, axis=0)  # noqa: E731
    s = sensor.replace(probe_local_pos=np.zeros((n * K, 3)))
    pred = np.asarray(
        scene.readings(s, jnp.asarray(flat), jnp.asarray(rep(nrm)), jnp.asarray(rep(tan)))
    )
    pred = pred[..., 2].reshape(-1, n, K)
    cost = np.sum((pred - meas[:, idx, None]) ** 2, axis=0)  # [n, K]
    return cand[np.arange(n), np.argmin(cost, 1)]


def _merge(c: np.ndarray, tol: float) -> np.ndarray:
    """Drop presses within ``tol`` (m) of an earlier one (order kept)."""
    if c.shape[0] < 2:
        return c
    d = np.linalg.norm(c[:, None] - c[None], axis=2)
    keep = ~np.any(np.tril(d < tol, -1), axis=1)
    return c[keep]


class AdaptiveFit(NamedTuple):
    """Result of :func:`calibrate_adaptively`.

    Attributes:
      fit: the last :class:`LayoutFit` (on every press recorded).
      scene, measured: every press recorded and its readings.
      history: one ``(presses, identified fraction)`` per round, the first being the initial plan.
      stopped: why the loop stopped: ``"target"``, ``"budget"`` or ``"no progress"``.
    """

    fit: LayoutFit
    scene: LinkScene
    measured: np.ndarray
    history: list
    stopped: str

    def report(self) -> str:
        """Presses against identified fraction per round, why the loop stopped, the last fit."""
        rounds = ", ".join(f"{p} presses: {100 * f:.1f} %" for p, f in self.history)
        return f"identified per round ({rounds}); stopped: {self.stopped}\n" + self.fit.report()


def calibrate_adaptively(
    sensor,
    layout: LinkLayout,
    record: Callable[[LinkScene], np.ndarray],
    *,
    channels="normal",
    target: float = 0.95,
    max_presses: int | None = None,
    max_rounds: int = 6,
    first: LinkScene | None = None,
    plan_options: dict | None = None,
    progress: Callable[[str], None] | None = None,
    **fit_options,
) -> AdaptiveFit:
    """Plan, record, fit, until ``target`` of the taxels are identified or the budget is spent.

    Args:
      sensor: the force model (:class:`~difftaxel.sensors.KinematicTaxel` options).
      layout: the initial layout (link frame).
      record: ``record(scene) -> readings`` ``[T, N]`` or ``[T, N, 3]`` for a press scene: a
        simulation, or a function that runs the presses on the rig and returns the readings.
      channels: the channels read (see :func:`calibrate_layout`).
      target: identified fraction at which to stop (0 < target <= 1).
      max_presses: press budget over all rounds (default three times the first plan).
      max_rounds: most fits.
      first: the first plan (default :func:`press_plan` of ``layout``).
      plan_options: keyword arguments of :func:`next_presses`.
      progress: called with a line per round.
      **fit_options: passed to :func:`calibrate_layout` (``key``, ``holdout``, ...).

    A round whose plan would exceed the budget is cut to fit it (targeted presses first). Every
    fit starts from the previous round's estimates and uses every press so far.
    """
    if not 0 < float(target) <= 1:
        raise ValueError(f"target: expected a fraction in (0, 1], got {target}")
    scene = press_plan(layout) if first is None else first
    budget = 3 * scene.n_frames if max_presses is None else int(max_presses)
    if budget < scene.n_frames:
        raise ValueError(f"max_presses: {budget} is fewer than the first plan's {scene.n_frames}")
    meas = np.asarray(record(scene), float)
    start, history, stopped = layout, [], "rounds"
    opts = dict(plan_options or {})
    reach = float(opts.pop("search_radius", 10e-3))
    for k in range(int(max_rounds)):
        fit = calibrate_layout(sensor, start, scene, meas, channels=channels, **fit_options)
        frac = float(fit.identified.mean())
        history.append((scene.n_frames, frac))
        if progress:
            progress(f"round {k + 1}: {scene.n_frames} presses, {100 * frac:.1f} % identified")
        if frac >= target:
            stopped = "target"
            break
        if k + 1 == max_rounds:
            break
        nxt, info = next_presses(
            fit, layout, scene, meas, search_radius=reach, sensor=sensor, **opts
        )
        if info["searched"].any():
            reach *= 2.0  # the disc grows each round a taxel stays untouched
        room = budget - scene.n_frames
        if nxt.n_frames == 0:
            stopped = "no progress"
            break
        if room <= 0:
            stopped = "budget"
            break
        if nxt.n_frames > room:
            c, rad = _press_geometry(nxt)
            nxt = press_scene(c[:room], rad, nxt.dt)
        meas = np.concatenate([meas, np.asarray(record(nxt), float)])
        scene = concat_scenes(scene, nxt)
        start = info["start"]
    return AdaptiveFit(fit, scene, meas, history, stopped)
