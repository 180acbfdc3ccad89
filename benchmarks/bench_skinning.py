"""Skinning throughput and the latency of one glove frame.

1. Skinning: 2 hands x 1000 taxels (blended, 4 segments each) x 1024 environments, jitted:
   skinned taxels per second (positions and frames).
2. Glove frame: 2 hands x 80 fingertip taxels of the default glove, on one environment:
   skinning (frames) + KinematicTaxel against a sphere + imperfections (hysteresis, noise,
   bias, quantisation), jitted; median latency per frame. A real glove streams at 100 Hz.

Usage: python benchmarks/bench_skinning.py
Last line: {"glove_frame_s": ..., "skinned_taxels_per_s": ...}
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import emit, time_jitted  # noqa: E402

import difftaxel as dt  # noqa: E402
from difftaxel.hands import default_glove, default_hand  # noqa: E402
from difftaxel.sensors import KinematicTaxel, make_inputs  # noqa: E402
from difftaxel.skinning import LBS, skin_frames  # noqa: E402


def random_lbs(side, n, rng):
    B = default_hand(side)
    idx = rng.integers(0, 26, (n, 4)).astype(np.int32)
    w = rng.uniform(0, 1, (n, 4))
    w /= w.sum(1, keepdims=True)
    T = np.concatenate([rng.uniform(-0.05, 0.05, (n, 3)), np.tile([0, 0, 0, 1.0], (n, 1))], 1)
    return LBS(segment_bind_poses=B, taxel_bind_poses=T, weights=w, segment_indices=idx)


def main():
    rng = np.random.default_rng(0)
    E = 1024
    hands = [random_lbs("right", 1000, rng), random_lbs("left", 1000, rng)]
    joints = jnp.asarray(
        np.stack([np.tile(h.segment_bind_poses, (E, 1, 1)) for h in hands]), jnp.float32
    )

    def skin_all(joints):
        return [jax.vmap(lambda C, h=h: skin_frames(h, C))(joints[i]) for i, h in enumerate(hands)]

    c, t = time_jitted(skin_all, joints)
    rate = 2 * 1000 * E / t
    print(f"skinning: {rate:.3e} skinned taxels/s (2 x 1000 x {E}), compile {c:.2f} s")

    # one glove frame: 2 hands x 80 fingertip taxels
    gloves = [default_glove(s) for s in ("right", "left")]
    subs = []
    for g in gloves:
        lbs = g.geometry_mapping
        subs.append(
            LBS(
                segment_bind_poses=np.asarray(lbs.segment_bind_poses),
                taxel_bind_poses=np.asarray(lbs.taxel_bind_poses)[:80],
                weights=np.asarray(lbs.weights)[:80],
                segment_indices=lbs.indices[:80],
            )
        )
    imp = dt.Imperfections(
        hysteresis_strength=0.3, hysteresis_tau=0.05, noise=1e-3, bias=1e-4, resolution=1e-3
    )
    sensor = KinematicTaxel(
        probe_local_pos=np.zeros((80, 3)),
        probe_radius=0.003,
        normal_stiffness=2000.0,
        normal_exponent=1.5,
        imperfections=imp,
    )
    bodies = dt.Bodies((dt.Sphere(radius=0.03),), np.array([[0.0, -0.04, -0.15, 0, 0, 0, 1]]))
    inp = make_inputs(np.array([0.0, 0, 0, 0, 0, 0, 1]), bodies, dt=0.01)
    states = [sensor.init_state(jax.random.key(i)) for i in range(2)]

    def frame(states, joints, key):
        out = []
        for i, lbs in enumerate(subs):
            fr = skin_frames(lbs, joints[i])
            s = sensor.replace(probe_local_pos=fr[:, :3])
            st, r = s.step(states[i], inp, jax.random.fold_in(key, i))
            out.append((st, r.measured.force))
        return [o[0] for o in out], [o[1] for o in out]

    j1 = jnp.stack([jnp.asarray(s.segment_bind_poses) for s in subs]).astype(jnp.float32)
    f = jax.jit(frame)
    key = jax.random.key(0)
    t0 = time.perf_counter()
    jax.block_until_ready(f(states, j1, key))
    comp = time.perf_counter() - t0
    lat = []
    for k in range(300):
        t0 = time.perf_counter()
        states_new, forces = f(states, j1, jax.random.fold_in(key, k))
        jax.block_until_ready(forces)
        lat.append(time.perf_counter() - t0)
    glove = float(np.median(lat))
    print(
        f"glove frame (2 x 80 taxels): median {glove * 1e3:.3f} ms, p90 "
        f"{np.percentile(lat, 90) * 1e3:.3f} ms, compile {comp:.2f} s"
    )
    emit(
        {
            "glove_frame_s": glove,
            "skinned_taxels_per_s": rate,
            "glove_frame_p90_s": float(np.percentile(lat, 90)),
            "dtype": "float32",
        }
    )


if __name__ == "__main__":
    main()
