"""Bind-pose calibration: taxel bind poses perturbed by 3 mm / 10 deg are recovered from a
recording of a sphere pressed over a fingertip pad of the default glove (noisy forces)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import difftaxel as dt
from difftaxel import pose as P
from difftaxel.glove import GloveScene, calibrate_bind_poses, glove_forces, pose_errors
from difftaxel.hands import default_glove
from difftaxel.sensors import KinematicTaxel
from difftaxel.skinning import LBS


def pad_scene(T=40, seed=0, pad=slice(16, 32)):
    g = default_glove("right").geometry_mapping
    lbs = LBS(
        segment_bind_poses=np.asarray(g.segment_bind_poses),
        taxel_bind_poses=np.asarray(g.taxel_bind_poses)[pad],
        weights=np.asarray(g.weights)[pad],
        segment_indices=g.indices[pad],
    )
    rng = np.random.default_rng(seed)
    tb = np.asarray(lbs.taxel_bind_poses)
    c = tb[:, :3].mean(0)
    n_out = np.asarray(P.quat_rotate(jnp.asarray(tb[0, 3:]), jnp.array([0.0, 0, 1])))
    t1 = np.cross(n_out, [1.0, 0, 0])
    t1 /= np.linalg.norm(t1)
    t2 = np.cross(n_out, t1)
    R = 0.008
    centers = [
        c + a * t1 + b * t2 + n_out * (R - d)
        for a, b, d in zip(*rng.uniform(-0.007, 0.007, (2, T)), rng.uniform(5e-4, 2e-3, T))
    ]
    poses = np.concatenate([np.asarray(centers), np.tile([0, 0, 0, 1.0], (T, 1))], 1)[:, None]
    bodies = dt.Bodies((dt.Sphere(radius=R),), poses[0]).with_state(
        jnp.asarray(poses), jnp.zeros((T, 1, 6))
    )
    scene = GloveScene(
        T_world_root=jnp.tile(jnp.array([0.0, 0, 0, 0, 0, 0, 1]), (T, 1)),
        T_root_joints=jnp.tile(lbs.segment_bind_poses, (T, 1, 1)),
        bodies=bodies,
        dt=0.01,
    )
    sensor = KinematicTaxel(
        probe_local_pos=np.zeros((lbs.n_taxels, 3)),
        probe_radius=0.002,
        normal_stiffness=500.0,
        normal_damping=0.0,
        shear_scalar=0.0,
        twist_scalar=0.0,
    )
    return lbs, scene, sensor


def perturb(tb, rng, pos=0.003, ang=0.17453292519943295):  # 10 deg
    n = tb.shape[0]
    d = rng.standard_normal((n, 3))
    a = rng.standard_normal((n, 3))
    xi = np.concatenate(
        [
            pos * d / np.linalg.norm(d, axis=1, keepdims=True),
            ang * a / np.linalg.norm(a, axis=1, keepdims=True),
        ],
        1,
    )
    return np.asarray(P.compose(jnp.asarray(tb), P.se3_exp(jnp.asarray(xi))))


@pytest.mark.slow  # 20+ s; CI runs it with the slow cases
def test_bind_pose_recovery_3mm_10deg_with_noise():
    lbs, scene, sensor = pad_scene()
    truth = np.asarray(lbs.taxel_bind_poses)
    clean = glove_forces(sensor, lbs, scene)
    rng = np.random.default_rng(1)
    scale = float(jnp.abs(clean).max())
    noisy = clean + 0.005 * scale * jnp.asarray(rng.standard_normal(clean.shape))
    seen = np.abs(np.asarray(clean)).max(axis=(0, 2)) > 0
    assert seen.sum() == lbs.n_taxels
    init = perturb(truth, rng)
    d0, a0 = pose_errors(init, truth)
    assert np.median(d0) > 2.9e-3 and np.median(a0) > 9.9
    est, _, results = calibrate_bind_poses(
        sensor,
        lbs.replace(taxel_bind_poses=jnp.asarray(init)),
        scene,
        noisy,
        steps_per_stage=200,
        learning_rate=3e-3,
    )
    assert all(r.compiles == 1 for r in results)
    d, a = pose_errors(est, truth)
    assert np.median(d[seen]) <= 0.3e-3, np.median(d[seen])
    assert np.median(a[seen]) <= 1.0, np.median(a[seen])
    assert np.all(np.isfinite(np.asarray(est)))


def test_bad_input():
    lbs, scene, sensor = pad_scene(T=4)
    with pytest.raises(ValueError, match="measured: expected"):
        calibrate_bind_poses(sensor, lbs, scene, jnp.zeros((4, 3, 3)))
    bad = jnp.zeros((4, lbs.n_taxels, 3)).at[0, 0, 0].set(jnp.nan)
    with pytest.raises(ValueError, match="non-finite"):
        calibrate_bind_poses(sensor, lbs, scene, bad)
    with pytest.raises(ValueError, match="reading is zero"):
        calibrate_bind_poses(sensor, lbs, scene, jnp.zeros((4, lbs.n_taxels, 3)))
    assert jax.tree_util.tree_leaves(scene)
