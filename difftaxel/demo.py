"""The main job: a synthetic glove session, then calibration and identification.

``difftaxel demo`` (see :func:`run_demo`):

1. builds the default right glove's 80 fingertip taxels on the default hand and a session in
   which a sphere presses each fingertip pad in turn (holds and slides);
2. records taxel forces (N, taxel axes) with realistic imperfections: Hertz-like stiffness,
   Maxwell hysteresis and white noise;
3. perturbs the bind poses (3 mm, 10 degrees per taxel) and the sensor parameters;
4. fits everything jointly by gradient descent (bind poses in se(3), stiffness through the
   force at a 1 mm reference depth, exponent, hysteresis strength and time constant), with
   staged contact smoothing so taxels starting out of contact still get a gradient;
5. prints true vs initial vs recovered values and writes to the output folder: plots (loss
   curve, tactile images, taxels on the hand before/after), ``results.json``, ``fit.npz`` (the
   loss curve and bind poses) and ``session.npz``, the session as a recording that
   ``difftaxel calibrate`` reads (:func:`difftaxel.io.write_recording`).
"""

from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from . import pose as _pose
from ._files import atomic_write, check_output_dir, publish, staging_dir
from .calibrate import fit
from .geometry import Bodies, Sphere
from .glove import GloveScene, glove_forces, pose_errors
from .hands import default_glove
from .imperfections import Imperfections
from .io import write_recording
from .sensors import KinematicTaxel
from .skinning import LBS, TactileMetadata

__all__ = ["make_session", "run_demo"]

P_REF = 3e-3  # m, reference penetration of the stiffness parameterisation (inside the data)


def _hysteresis(F, s, tau, dt):
    """Maxwell element along time of ``F [T, ...]`` (per channel)."""
    a = jnp.exp(-dt / tau)

    def step(c, f):
        xi, prev = c
        xi = a * xi + (f - prev)
        return (xi, f), f + s * xi

    z = jnp.zeros_like(F[0])
    return jax.lax.scan(step, (z, z), F)[1]


def make_session(frames_per_pad: int = 12, seed: int = 0):
    """The default glove's fingertip taxels and a sphere pressing each pad in turn.

    Returns ``(lbs, scene, sensor, truth)`` with ``truth`` the sensor parameters used.
    """
    g = default_glove("right").geometry_mapping
    sel = slice(0, 80)
    lbs = LBS(
        segment_bind_poses=np.asarray(g.segment_bind_poses),
        taxel_bind_poses=np.asarray(g.taxel_bind_poses)[sel],
        weights=np.asarray(g.weights)[sel],
        segment_indices=g.indices[sel],
    )
    tb = np.asarray(lbs.taxel_bind_poses)
    rng = np.random.default_rng(seed)
    R = 0.008
    centers, vels = [], []
    for pad in range(5):
        t = tb[16 * pad : 16 * pad + 16]
        c = t[:, :3].mean(0)
        n = np.asarray(_pose.quat_rotate(jnp.asarray(t[0, 3:]), jnp.array([0.0, 0, 1])))
        t1 = np.cross(n, [0.0, 0, 1.0]) if abs(n[2]) < 0.9 else np.cross(n, [1.0, 0, 0])
        t1 /= np.linalg.norm(t1)
        t2 = np.cross(n, t1)
        for k in range(frames_per_pad):
            a, b = rng.uniform(-0.006, 0.006, 2)
            depth = 0.003 * np.sin(np.pi * (k + 0.5) / frames_per_pad) ** 2 + 0.0002
            centers.append(c + a * t1 + b * t2 + n * (R - depth))
            u, v = rng.uniform(-0.03, 0.03, 2)  # sliding: shear reveals the in-plane axes
            vels.append(u * t1 + v * t2)
    T = len(centers)
    poses = np.concatenate([np.asarray(centers), np.tile([0, 0, 0, 1.0], (T, 1))], 1)[:, None]
    twists = np.concatenate([np.asarray(vels), np.zeros((T, 3))], 1)[:, None]
    bodies = Bodies((Sphere(radius=R),), poses[0]).with_state(
        jnp.asarray(poses), jnp.asarray(twists)
    )
    scene = GloveScene(
        T_world_root=jnp.tile(jnp.array([0.0, 0, 0, 0, 0, 0, 1]), (T, 1)),
        T_root_joints=jnp.tile(lbs.segment_bind_poses, (T, 1, 1)),
        bodies=bodies,
        dt=0.01,
    )
    truth = {
        "normal_stiffness": 3000.0,
        "normal_exponent": 1.4,
        "hysteresis_strength": 0.3,
        "hysteresis_tau": 0.05,
    }
    sensor = KinematicTaxel(
        probe_local_pos=np.zeros((80, 3)),
        probe_radius=0.002,
        normal_stiffness=1.0,
        normal_exponent=1.0,
        normal_damping=0.0,
        shear_scalar=15.0,
        twist_scalar=0.0,
        imperfections=Imperfections(),
    )
    return lbs, scene, sensor, truth


def _model(sensor, lbs, scene, params, smoothing):
    s = sensor.replace(
        normal_stiffness=params["force_at_ref"] / P_REF ** params["normal_exponent"],
        normal_exponent=params["normal_exponent"],
        smoothing=float(smoothing),
    )
    F = glove_forces(s, lbs, scene, params["bind"])
    return _hysteresis(F, params["hysteresis_strength"], params["hysteresis_tau"], scene.dt)


def _write_session(path, lbs, scene, measured, truth, sensor):
    """The session as a recording that ``difftaxel calibrate`` reads: the true spring stiffness
    and exponent (the recording's hysteresis is not in that model), and ``lbs``'s bind poses
    (the demo's perturbed starting point) as the metadata to calibrate."""
    T = scene.T_root_joints.shape[0]
    meta = TactileMetadata(lbs, default_glove("right").segment_source)
    write_recording(
        path,
        meta,
        np.asarray(measured),
        np.asarray(scene.T_root_joints),
        (np.arange(T) * round(scene.dt * 1e9)).astype(np.int64),
        root_poses=np.asarray(scene.T_world_root),
        objects=[{"kind": "sphere", "radius": float(scene.bodies.shapes[0].radius)}],
        object_poses=np.asarray(scene.bodies.poses),
        object_twists=np.asarray(scene.bodies.twists),
        sensor={
            "probe_radius": float(np.asarray(sensor.probe_radius).max()),
            "normal_stiffness": truth["normal_stiffness"],
            "normal_exponent": truth["normal_exponent"],
            "normal_damping": float(sensor.normal_damping),
            "shear_scalar": float(sensor.shear_scalar),
            "twist_scalar": float(sensor.twist_scalar),
        },
    )


def run_demo(
    out_dir: str = "difftaxel-demo",
    steps_per_stage: int = 400,
    frames_per_pad: int = 16,
    noise: float = 0.01,
    seed: int = 0,
    plots: bool = True,
    quiet: bool = False,
    learning_rate: float = 5e-3,
) -> dict:
    """Run the main job; returns the results dict (also written to ``out_dir/results.json``)."""
    t0 = time.perf_counter()
    say = (lambda *a: None) if quiet else print
    check_output_dir(out_dir)  # before the long fit
    lbs, scene, sensor, truth = make_session(frames_per_pad, seed)
    tb = np.asarray(lbs.taxel_bind_poses)
    p_true = {
        "bind": jnp.asarray(tb),
        "force_at_ref": jnp.asarray(truth["normal_stiffness"] * P_REF ** truth["normal_exponent"]),
        "normal_exponent": jnp.asarray(truth["normal_exponent"]),
        "hysteresis_strength": jnp.asarray(truth["hysteresis_strength"]),
        "hysteresis_tau": jnp.asarray(truth["hysteresis_tau"]),
    }
    clean = _model(sensor, lbs, scene, p_true, 0.0)
    rng = np.random.default_rng(seed + 1)
    scale = float(jnp.abs(clean).max())
    measured = clean + noise * scale * jnp.asarray(rng.standard_normal(clean.shape))
    seen = np.abs(np.asarray(clean)).max(axis=(0, 2)) > 0
    say(
        f"session: {lbs.n_taxels} taxels, {scene.T_root_joints.shape[0]} frames, "
        f"{int(seen.sum())} taxels in contact, max force {scale:.3f} N, noise {noise:.0%}"
    )

    n = lbs.n_taxels
    d = rng.standard_normal((n, 3))
    a = rng.standard_normal((n, 3))
    xi = np.concatenate(
        [
            0.003 * d / np.linalg.norm(d, axis=1, keepdims=True),
            np.radians(10) * a / np.linalg.norm(a, axis=1, keepdims=True),
        ],
        1,
    )
    bind0 = np.asarray(_pose.compose(jnp.asarray(tb), _pose.se3_exp(jnp.asarray(xi))))
    init = {
        "normal_stiffness": 2000.0,
        "normal_exponent": 1.2,
        "hysteresis_strength": 0.15,
        "hysteresis_tau": 0.1,
    }
    params = {
        "bind": jnp.asarray(bind0),
        "force_at_ref": jnp.asarray(init["normal_stiffness"] * P_REF ** init["normal_exponent"]),
        "normal_exponent": jnp.asarray(init["normal_exponent"]),
        "hysteresis_strength": jnp.asarray(init["hysteresis_strength"]),
        "hysteresis_tau": jnp.asarray(init["hysteresis_tau"]),
    }
    transforms = {
        "bind": "se3",
        "force_at_ref": "log",
        "normal_exponent": "log",
        "hysteresis_strength": "log",
        "hysteresis_tau": "log",
    }
    losses, stage_ends = [], []
    for sm, lr_factor in ((5e-4, 1.0), (1e-4, 1.0), (0.0, 0.5)):
        say(f"  stage smoothing {sm * 1e3:.2f} mm: {steps_per_stage} steps ...")

        def loss(p, _, sm=sm):
            return jnp.mean((_model(sensor, lbs, scene, p, sm) - measured) ** 2) / scale**2

        r = fit(
            loss,
            params,
            steps=steps_per_stage,
            learning_rate=learning_rate * lr_factor,
            transforms=transforms,
            log_every=min(50, steps_per_stage),
            se3_length_scale=0.01,
            progress=not quiet,
        )
        params = r.params
        losses += r.losses.tolist()
        stage_ends.append((len(losses), f"smoothing {sm * 1e3:.2f} mm"))
        say(
            f"  stage smoothing {sm * 1e3:.2f} mm: loss {r.losses[0]:.3g} -> {r.losses[-1]:.3g} "
            f"({r.n_steps} steps, {r.seconds:.1f} s)"
        )
    est = dict(params)
    est["normal_stiffness"] = est["force_at_ref"] / P_REF ** est["normal_exponent"]
    d0, a0 = pose_errors(bind0, tb)
    d1, a1 = pose_errors(est["bind"], tb)
    rows = [
        (
            "bind position error, median (mm)",
            0.0,
            np.median(d0[seen]) * 1e3,
            np.median(d1[seen]) * 1e3,
        ),
        ("bind angle error, median (deg)", 0.0, np.median(a0[seen]), np.median(a1[seen])),
    ]
    for k in ("normal_stiffness", "normal_exponent", "hysteresis_strength", "hysteresis_tau"):
        rows.append((k, truth[k], init[k], float(est[k])))
    say("")
    say(f"{'quantity':34s} {'true':>10s} {'initial':>10s} {'recovered':>10s} {'error':>8s}")
    worse = []
    for name, tv, iv, rv in rows:
        err = f"{abs(rv / tv - 1):7.2%}" if tv else f"{rv:8.3f}"
        say(f"{name:34s} {tv:10.4g} {iv:10.4g} {rv:10.4g} {err:>8s}")
        if (abs(rv - tv) > abs(iv - tv)) if tv else (rv > iv):
            worse.append(name)
    if worse:
        say(
            f"note: {', '.join(worse)} ended farther from the truth than it started: the fit "
            f"did not converge in {steps_per_stage} steps per stage (run without --quick, or "
            "with more --steps)"
        )
    elapsed = time.perf_counter() - t0
    say(f"\ntotal {elapsed:.1f} s")
    result = {
        "taxels": int(n),
        "frames": int(scene.T_root_joints.shape[0]),
        "taxels_in_contact": int(seen.sum()),
        "median_position_error_m": {
            "initial": float(np.median(d0[seen])),
            "recovered": float(np.median(d1[seen])),
        },
        "median_angle_error_deg": {
            "initial": float(np.median(a0[seen])),
            "recovered": float(np.median(a1[seen])),
        },
        "parameters": {
            k: {"true": truth[k], "initial": init[k], "recovered": float(est[k])} for k in truth
        },
        "seconds": elapsed,
    }
    result["not_converged"] = worse
    # the outputs are written into a staging folder and moved into place together: an
    # interrupted or failed run leaves the previous run's set whole
    with staging_dir(out_dir) as stage:
        atomic_write(
            os.path.join(stage, "results.json"), lambda fh: json.dump(result, fh, indent=1), "w"
        )
        _write_session(
            os.path.join(stage, "session.npz"),
            lbs.replace(taxel_bind_poses=jnp.asarray(bind0, lbs.taxel_bind_poses.dtype)),
            scene,
            measured,
            truth,
            sensor,
        )
        fit_arrays = dict(
            losses=np.asarray(losses),
            bind_true=tb,
            bind_initial=bind0,
            bind_recovered=np.asarray(est["bind"]),
        )
        atomic_write(os.path.join(stage, "fit.npz"), lambda fh: np.savez(fh, **fit_arrays))
        plotted = False
        if plots:
            plotted = _plots(
                stage,
                losses,
                stage_ends,
                np.asarray(measured),
                np.asarray(_model(sensor, lbs, scene, params, 0.0)),
                tb,
                bind0,
                np.asarray(est["bind"]),
                np.asarray(lbs.segment_bind_poses)[:, :3],
            )
        written = publish(stage, out_dir, OUTPUTS)
    if plots:
        say(
            "wrote " + ", ".join(written)
            if plotted
            else "matplotlib not installed (pip install difftaxel[plot]): no plots written"
        )
    return result


#: the files a run writes to its folder (a run replaces the whole set: none stays stale)
OUTPUTS = (
    "results.json",
    "session.npz",
    "fit.npz",
    "loss.png",
    "tactile_images.png",
    "taxels_on_hand.png",
)

FINGERS = ("thumb", "index", "middle", "ring", "little")


def _save(fig, path):
    atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=100))


def _loss_figure(plt, losses, stage_ends):
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.semilogy(losses)
    for end, label in stage_ends:
        ax.axvline(end, color="0.6", lw=0.8, ls="--")
        ax.text(end, ax.get_ylim()[1], f" {label}", fontsize=7, va="top", ha="right", rotation=90)
    ax.set_xlabel("step (dashed: end of each smoothing stage)")
    ax.set_ylabel("normalised loss")
    ax.set_title("calibration loss (3 smoothing stages)")
    fig.tight_layout()
    return fig


def _tactile_figure(plt, measured, fitted):
    fig, axes = plt.subplots(2, 5, figsize=(11, 4.8), constrained_layout=True)
    # one colour range for every panel; compression is negative Fz (the force on the sensor
    # points into it, along -z of the taxel axes), so the map shows -Fz (N)
    shown = [-measured[..., 2], -fitted[..., 2]]
    vmax = float(max(np.max(x) for x in shown)) or 1.0
    im = None
    for pad in range(5):
        sl = slice(16 * pad, 16 * pad + 16)
        t = int(np.argmax(np.abs(measured[:, sl, 2]).sum(1)))
        for row, lab in enumerate(("measured", "fitted")):
            im = axes[row, pad].imshow(
                shown[row][t, sl].reshape(4, 4), cmap="viridis", vmin=0.0, vmax=vmax
            )
            axes[row, pad].set_title(f"{FINGERS[pad]} {lab}", fontsize=9)
            axes[row, pad].axis("off")
    fig.colorbar(im, ax=axes, fraction=0.02, label="compression -Fz (N)")
    fig.suptitle("fingertip pads at each pad's strongest frame: compression -Fz (N, taxel axes)")
    return fig


HAND_CHAINS = [[1, 0]] + [[1, *range(f, f + (4 if f == 2 else 5))] for f in (2, 6, 11, 16, 21)]


def _hand_figure(plt, tb, b0, b1, joints):
    fig, ax = plt.subplots(figsize=(5.5, 6.5))
    for c in HAND_CHAINS:  # wrist-palm and the five fingers' bones
        ax.plot(joints[c, 0] * 1e3, joints[c, 2] * 1e3, color="0.75", lw=2, zorder=0)
    ax.scatter(
        joints[:, 0] * 1e3, joints[:, 2] * 1e3, s=10, color="0.6", zorder=0, label="hand joints"
    )
    for data, lab, m in ((tb, "true", "o"), (b0, "initial", "x"), (b1, "recovered", ".")):
        ax.scatter(data[:, 0] * 1e3, data[:, 2] * 1e3, s=12, marker=m, label=lab)
    ax.set_xlabel("x (mm, wrist root)")
    ax.set_ylabel("z (mm, wrist root)")
    ax.set_aspect("equal")
    ax.legend(fontsize=8)
    ax.set_title("taxel bind positions on the hand")
    fig.tight_layout()
    return fig


def _plots(out_dir, losses, stage_ends, measured, fitted, tb, b0, b1, joints):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    figs = {
        "loss.png": _loss_figure(plt, losses, stage_ends),
        "tactile_images.png": _tactile_figure(plt, measured, fitted),
        "taxels_on_hand.png": _hand_figure(plt, tb, b0, b1, joints),
    }
    paths = []
    for name, fig in figs.items():
        paths.append(os.path.join(out_dir, name))
        _save(fig, paths[-1])
        plt.close(fig)
    return paths
