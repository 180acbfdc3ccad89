"""Bind-pose fit of an 80-taxel glove over 500 frames, 200 optimiser steps (not a timed test).

The session of `difftaxel demo` (a sphere pressed and slid over each fingertip pad of the
default glove, ~100 frames per pad), bind poses perturbed by 3 mm / 10 deg; the fit is
`calibrate_bind_poses` with two smoothing stages of 100 steps (one compilation each), sensor
parameters known. Reports wall time (compile included) and the recovered errors.

Usage: python benchmarks/bench_calibration.py [--frames-per-pad 100] [--steps 200]
Last line: {"bind_pose_fit_s": ..., "median_position_error_m": ..., "median_angle_error_deg": ...}
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)  # a benchmark script may choose float64
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import emit  # noqa: E402

from difftaxel import pose as P  # noqa: E402
from difftaxel.demo import make_session  # noqa: E402
from difftaxel.glove import calibrate_bind_poses, glove_forces, pose_errors  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames-per-pad", type=int, default=100)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    lbs, scene, sensor, truth = make_session(a.frames_per_pad, seed=0)
    sensor = sensor.replace(
        normal_stiffness=jnp.asarray(truth["normal_stiffness"]),
        normal_exponent=jnp.asarray(truth["normal_exponent"]),
    )
    tb = np.asarray(lbs.taxel_bind_poses)
    clean = glove_forces(sensor, lbs, scene)
    rng = np.random.default_rng(1)
    meas = clean + 0.01 * float(jnp.abs(clean).max()) * jnp.asarray(
        rng.standard_normal(clean.shape)
    )
    seen = np.abs(np.asarray(clean)).max(axis=(0, 2)) > 0
    d = rng.standard_normal((80, 3))
    ang = rng.standard_normal((80, 3))
    xi = np.concatenate(
        [
            0.003 * d / np.linalg.norm(d, axis=1, keepdims=True),
            np.radians(10) * ang / np.linalg.norm(ang, axis=1, keepdims=True),
        ],
        1,
    )
    init = np.asarray(P.compose(jnp.asarray(tb), P.se3_exp(jnp.asarray(xi))))
    T = scene.T_root_joints.shape[0]
    print(f"{lbs.n_taxels} taxels, {T} frames, {a.steps} steps")
    t0 = time.perf_counter()
    est, _, res = calibrate_bind_poses(
        sensor,
        lbs.replace(taxel_bind_poses=jnp.asarray(init)),
        scene,
        meas,
        smoothing_schedule=(5e-4, 0.0),
        steps_per_stage=a.steps // 2,
        learning_rate=5e-3,
    )
    jax.block_until_ready(est)
    secs = time.perf_counter() - t0
    d1, a1 = pose_errors(est, tb)
    print(
        f"fit {secs:.1f} s (compile included; {sum(r.compiles for r in res)} compilations); "
        f"median error {np.median(d1[seen]) * 1e3:.3f} mm, {np.median(a1[seen]):.2f} deg"
    )
    emit(
        {
            "bind_pose_fit_s": secs,
            "median_position_error_m": float(np.median(d1[seen])),
            "median_angle_error_deg": float(np.median(a1[seen])),
            "frames": int(T),
            "taxels": int(lbs.n_taxels),
            "steps": a.steps,
        }
    )


if __name__ == "__main__":
    main()
