"""Synthetic stand-ins with known answers for three-axis raw models.

:func:`magnetic_array` simulates a small magnetic (Hall-effect) skin: taxels that report three
field components (uT) each, respond to their neighbours' loads, drift between sessions, creep,
and are pressed one at a time over a six-axis force/torque sensor logged on its own clock, at
another rate, with a lag that differs between sessions. It returns the logs a user would have
and the truth a test scores against.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .vector import VectorLog, WrenchLog

__all__ = ["MagneticTruth", "magnetic_array", "write_example_files"]


class MagneticTruth(NamedTuple):
    """What :func:`magnetic_array` simulated (per session ``s``).

    Attributes:
      forces: list of ``[T_s, N, 3]`` true taxel forces (N, taxel axes) at the raw times.
      lags: ``[S]`` s, the reference clock's lag (its timestamps minus the raw clock's).
      offsets: ``[S, N, 3]`` uT, each session's no-load field.
      gain: ``[3N, 3N]`` uT/N, the linear response (field of taxel-channel i to force j).
      noise_raw, noise_force, noise_torque: the noise standard deviations (uT, N, N m).
      pressed: list of ``[T_s]`` int, the taxel pressed at each raw time (-1 at rest).
    """

    forces: list
    lags: np.ndarray
    offsets: np.ndarray
    gain: np.ndarray
    noise_raw: float
    noise_force: float
    noise_torque: float
    pressed: list


def _profile(t, t0, rise, hold):
    """A press envelope in [0, 1]: raised-cosine rise, hold, raised-cosine fall."""
    u = np.clip((t - t0) / rise, 0, 1)
    v = np.clip((t - t0 - rise - hold) / rise, 0, 1)
    return 0.5 * (1 - np.cos(np.pi * u)) - 0.5 * (1 - np.cos(np.pi * v))


def magnetic_array(
    seed: int = 0,
    *,
    sessions: int = 4,
    duration: float = 40.0,
    raw_rate: float = 88.0,
    ref_rate: float = 115.0,
    lag: float = 0.06,
    lag_spread: float = 0.01,
    pitch: float = 6e-3,
    height: float = 5e-3,
    coupling: float = 0.05,
    drift: float = 200.0,
    creep: float = 0.08,
    creep_tau: float = 0.5,
    quadratic: float = 0.03,
    max_force: float = 10.0,
    noise_raw: float = 20.0,
    noise_force: float = 0.03,
    noise_torque: float = 3e-4,
    noise_ar: float = 0.0,
    grid: tuple = (2, 2),
):
    """A three-axis magnetic array (``grid`` rows x columns, 2 x 2 by default) over a
    force/torque sensor: ``(raws, refs, positions, truth)``.

    ``raws``: one :class:`VectorLog` per session (``[T, N, 3]`` uT at ``raw_rate`` Hz with 1 %
    timing jitter); ``refs``: one :class:`WrenchLog` per session (Fx Fy Fz N, Tx Ty Tz N m in the
    sensor frame at ``ref_rate`` Hz, its clock late by the session's lag: ``lag`` +- up to
    ``lag_spread`` s); ``positions [N, 3]`` (m): taxel centres in the sensor frame (``pitch``
    apart at ``height``), taxel axes along the sensor's; ``truth``: :class:`MagneticTruth`.

    The fields are ``o_s + G (f - q(f) + creep * m)``: ``m`` a Maxwell element of time constant
    ``creep_tau`` s driven by the force (the elastomer creeps), ``q`` a stiffening of
    ``quadratic`` (relative) at ``max_force`` in the normal direction, ``G`` each taxel's own
    response (about 300/300/700 uT per N in x/y/z, turned by a few degrees) plus ``coupling``
    times it from each neighbour. The raw noise is AR(1) with coefficient ``noise_ar`` (0: white)
    and standard deviation ``noise_raw``. Each session starts with 1 s at rest, then presses one
    taxel at a time: normal force up to ``max_force`` N (compression is +z here, pushing into the
    array as the sensor reads it), shear up to 30 % of it, 0.4 s rise, 0.2-0.6 s hold.
    """
    rng = np.random.default_rng(seed)
    rows, cols = (int(v) for v in grid)
    N = rows * cols
    X, Y = np.meshgrid(
        (np.arange(rows) - (rows - 1) / 2) * pitch,
        (np.arange(cols) - (cols - 1) / 2) * pitch,
        indexing="ij",
    )
    pos = np.stack([X.ravel(), Y.ravel(), np.full(N, height)], -1)
    G = np.zeros((3 * N, 3 * N))
    own = []
    for i in range(N):
        a = rng.normal(0, np.radians(4), 3)
        K = np.diag([300.0, 300.0, 700.0]) * rng.uniform(0.9, 1.1, 3)
        R = _rot(a)
        own.append(R @ K)
        G[3 * i : 3 * i + 3, 3 * i : 3 * i + 3] = own[i]
    for i in range(N):
        for j in range(N):
            if i != j:
                share = coupling * (1.0 if np.linalg.norm(pos[i] - pos[j]) < 1.5 * pitch else 0.4)
                G[3 * i : 3 * i + 3, 3 * j : 3 * j + 3] = (
                    share * own[i] @ _rot(rng.normal(0, 0.3, 3))
                )
    offsets = rng.normal(0, drift, (sessions, N, 3)) + rng.normal(0, 2000, (1, N, 3))
    lags = lag + rng.uniform(-lag_spread, lag_spread, sessions)
    raws, refs, forces, pressed_all = [], [], [], []
    for s in range(sessions):
        presses, t0 = [], 1.0
        while t0 < duration - 1.5:
            hold = rng.uniform(0.2, 0.6)
            fz = rng.uniform(1.0, max_force)
            sh = rng.uniform(0, 0.3) * fz
            ph = rng.uniform(0, 2 * np.pi)
            presses.append(
                (t0, hold, int(rng.integers(N)), np.array([sh * np.cos(ph), sh * np.sin(ph), fz]))
            )
            t0 += 0.8 + hold + rng.uniform(0.2, 0.5)

        def load(t, presses=presses):
            f = np.zeros((t.size, N, 3))
            who = np.full(t.size, -1)
            for t_p, hold, k, F in presses:
                e = _profile(t, t_p, 0.4, hold)
                f[:, k] += e[:, None] * F
                who[e > 0] = k
            return f, who

        n_raw = int(duration * raw_rate)
        t_raw = np.arange(n_raw) / raw_rate + rng.normal(0, 0.01 / raw_rate, n_raw)
        t_raw.sort()
        f, who = load(t_raw)
        # creep: a Maxwell element of the force, sampled at the raw times
        a = np.exp(-np.diff(t_raw, prepend=t_raw[0]) / creep_tau)
        m = np.zeros_like(f)
        for k in range(1, n_raw):  # the simulation's own time loop (host, once)
            m[k] = a[k] * m[k - 1] + (f[k] - f[k - 1])
        stiff = quadratic / max_force * np.stack([0 * f[..., 2], 0 * f[..., 2], f[..., 2] ** 2], -1)
        u = f - stiff + creep * m
        b = offsets[s] + (u.reshape(n_raw, -1) @ G.T).reshape(n_raw, N, 3)
        e = rng.normal(0, noise_raw * np.sqrt(1 - noise_ar**2), b.shape)
        for k in range(1, n_raw):  # AR(1) raw noise (stationary std noise_raw), host, once
            e[k] += noise_ar * e[k - 1]
        b = b + e
        n_ref = int(duration * ref_rate)
        t_true = np.arange(n_ref) / ref_rate
        fr, _ = load(t_true)
        F = fr.sum(1)
        Tq = np.cross(pos[None], fr).sum(1)
        w = np.concatenate(
            [F + rng.normal(0, noise_force, F.shape), Tq + rng.normal(0, noise_torque, Tq.shape)], 1
        )
        raws.append(VectorLog(t_raw, b, f"session{s}_raw"))
        refs.append(WrenchLog(t_true + lags[s], w, f"session{s}_ft"))
        forces.append(f)
        pressed_all.append(who)
    truth = MagneticTruth(
        forces, lags, offsets, G, noise_raw, noise_force, noise_torque, pressed_all
    )
    return raws, refs, pos, truth


def _rot(a) -> np.ndarray:
    """Rotation matrix of the rotation vector ``a [3]`` (rad)."""
    th = float(np.linalg.norm(a))
    if th < 1e-12:
        return np.eye(3)
    k = np.asarray(a) / th
    Kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(th) * Kx + (1 - np.cos(th)) * Kx @ Kx


def write_example_files(out_dir, seed: int = 0, sessions: int = 4) -> list[str]:
    """Write :func:`magnetic_array`'s sessions as the files ``difftaxel identify --reference``
    reads: ``session{k}_raw.txt`` (time, 12 field values, uT), ``session{k}_ft.txt`` (time,
    wrench) and ``positions.txt`` (m) into ``out_dir`` (created if missing; each file written
    beside and renamed). Returns the paths written."""
    import os

    from .._files import atomic_write, check_output_dir

    out = check_output_dir(out_dir, "out_dir")
    raws, refs, pos, _ = magnetic_array(seed, sessions=sessions)
    paths = []

    def put(name, header, arr):
        path = os.path.join(out, name)
        atomic_write(path, lambda fh: np.savetxt(fh, arr, fmt="%.6g", header=header), "w")
        paths.append(path)

    cols = " ".join(f"b{i + 1}{c}" for i in range(pos.shape[0]) for c in "xyz")
    for k, (r, f) in enumerate(zip(raws, refs)):
        put(
            f"session{k}_raw.txt",
            f"time {cols} (s, uT)",
            np.column_stack([r.time, r.raw.reshape(r.time.size, -1)]),
        )
        put(
            f"session{k}_ft.txt",
            "time Fx Fy Fz Tx Ty Tz (s, N, N m)",
            np.column_stack([f.time, f.wrench]),
        )
    put("positions.txt", "x y z (m, sensor frame)", pos)
    return paths
