"""Every sensor's full default step, as a user runs it, on the Genesis parity scene.

Scene: a pad with an 11 x 11 probe grid at 3 mm, a 1 cm sphere pressed 0.5 - 1.5 mm (a random
depth and offset per environment), sliding at 8 cm/s and spinning at 1 rad/s. One jitted,
vmapped step per sensor with its state carried (the elastomer's anchors exist: the state comes
from a first step), float32, timed round-robin so the machine's drift hits every sensor alike.

Sensors (default options unless named):

* ``depth``: ContactDepthProbe; ``contact``: ContactProbe;
* ``kinematic``: KinematicTaxel; ``kinematic_chain``: KinematicTaxel with gain resampling,
  hysteresis, a 3 x 3 crosstalk kernel and white noise (hash generator);
* ``elastomer``: ElastomerTaxel, FFT grid, shear on (the sensor's own pad as its surface), 400
  tracked sphere points;
* ``proximity``: ProximityTaxel, 2000 tracked sphere points, every point against every probe;
  ``proximity_capacity``: the same with ``max_candidates=256``.

Usage: python benchmarks/bench_sensors.py [--envs 64 1024] [--rounds 5]
Last line: {"seconds_per_step": {envs: {sensor: s}}, "compile_s": {...}}
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import emit, time_interleaved  # noqa: E402

import difftaxel as dt  # noqa: E402
from difftaxel.sensors import (  # noqa: E402
    ContactDepthProbe,
    ContactProbe,
    ElastomerTaxel,
    KinematicTaxel,
    ProximityTaxel,
    TrackedPoints,
    make_inputs,
)

R_SPHERE = 0.01


def sensors():
    grid = dt.generate_grid_points_on_plane(
        (-0.015, -0.015, 0), (0.015, 0.015, 0), (0, 0, 1), 11, 11
    )
    import trimesh

    sphere = trimesh.creation.icosphere(3, R_SPHERE)
    p400, _ = dt.sample_surface_points(sphere, 400)
    p2000, _ = dt.sample_surface_points(sphere, 2000)
    pad = dt.Box(size=[0.036, 0.036, 0.004], T_body_shape=[0, 0, -0.002, 0, 0, 0, 1])
    kx = np.full((3, 3), 0.05)
    kx[1, 1] = 0.6
    return {
        "depth": ContactDepthProbe(probe_local_pos=grid, probe_radius=0.002),
        "contact": ContactProbe(probe_local_pos=grid, probe_radius=0.002),
        "kinematic": KinematicTaxel(probe_local_pos=grid, probe_radius=0.002),
        "kinematic_chain": KinematicTaxel(
            probe_local_pos=grid,
            probe_radius=0.002,
            probe_gain_resample_range=(0.9, 1.1),
            imperfections=dt.Imperfections(
                hysteresis_strength=0.3,
                hysteresis_tau=0.05,
                crosstalk_kernel=kx,
                noise=0.01,
                noise_generator="hash",
            ),
        ),
        "elastomer": ElastomerTaxel(
            probe_local_pos=grid,
            track_points=TrackedPoints(p400, segments=((0, 400),)),
            elastomer_shapes=(pad,),
            probe_radius=0.002,
        ),
        "proximity": ProximityTaxel(
            probe_local_pos=grid, track_points=TrackedPoints(p2000, segments=((0, 2000),))
        ),
        "proximity_capacity": ProximityTaxel(
            probe_local_pos=grid,
            track_points=TrackedPoints(p2000, segments=((0, 2000),)),
            max_candidates=256,
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", nargs="+", default=None, help="a subset of the sensors")
    a = ap.parse_args()
    sens = sensors()
    if a.only:
        sens = {k: v for k, v in sens.items() if k in a.only}
    bodies = dt.Bodies(
        (dt.Sphere(radius=R_SPHERE),),
        np.array([[0, 0, R_SPHERE - 0.001, 0, 0, 0, 1.0]]),
        np.array([[0.08, 0, 0, 0, 0, 1.0]]),
    )
    inp = make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), bodies, dt=0.005)
    out, comp = {}, {}
    for E in a.envs:
        rng = np.random.default_rng(0)
        poses = np.tile(bodies.poses[0], (E, 1))
        poses[:, :2] += rng.uniform(-0.005, 0.005, (E, 2))
        poses[:, 2] = R_SPHERE - rng.uniform(0.0005, 0.0015, E)
        poses = jnp.asarray(poses, jnp.float32)
        keys = jax.random.split(jax.random.key(0), E)
        cases = {}
        for name, s in sens.items():

            def step(sensor, states, poses, keys):
                def one(st, pose, k):
                    b = inp.bodies.with_state(pose[None])
                    return sensor.step(st, inp.replace(bodies=b), k)

                return jax.vmap(one)(states, poses, keys)

            states = jax.vmap(s.init_state)(keys)
            states = jax.jit(step)(s, states, poses, keys)[0]  # anchors exist
            cases[name] = (step, (s, states, poses, keys))
        c, med, _ = time_interleaved(cases, rounds=a.rounds)
        out[str(E)] = med
        comp[str(E)] = c
        for name in cases:
            print(
                f"{E:5d} envs  {name:20s} {med[name] * 1e3:9.3f} ms/step  (compile {c[name]:.1f} s)"
            )
    emit({"seconds_per_step": out, "compile_s": comp})


if __name__ == "__main__":
    main()
