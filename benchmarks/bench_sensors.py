"""Every sensor's full default step, as a user runs it, on two scenes.

Both scenes: a fixed pad, a box 4 x 4 x 1 cm whose link frame is its centre, an 11 x 11 probe
grid at 3 mm on its top face (z = 5 mm), an object pressed 0.5 - 1.5 mm into the probe plane
(a random depth and +-5 mm offset per environment), sliding at 8 cm/s and spinning at 1 rad/s.

* ``sphere`` (the Genesis parity kit's): a 1 cm sphere, 2 mm probe radius (about 18 % of the
  taxels in contact);
* ``box``: a 4 x 4 x 40 mm peg standing on its small face, 3 mm probe radius (about 9 % in
  contact).

A case whose measured readings are all zero is refused (the scene would be wrong). One jitted,
vmapped step per sensor with its state carried (the elastomer's anchors exist: the state comes
from a first step), float32, timed round-robin so the machine's drift hits every sensor alike.

Sensors (default options unless named):

* ``depth``: ContactDepthProbe; ``contact``: ContactProbe;
* ``kinematic``: KinematicTaxel; ``kinematic_chain``: KinematicTaxel with gain resampling,
  hysteresis, a 3 x 3 crosstalk kernel and white noise (the default generator);
* ``elastomer``: ElastomerTaxel, FFT grid, shear on (the sensor's own pad as its surface), 400
  tracked object points;
* ``proximity``: ProximityTaxel, 2000 tracked object points, every point against every probe
  (the default); ``proximity_capacity``: the same with the best hand-tuned capacity,
  ``max_candidates=352``: at most 347 points lie inside the probes' grown box over the
  benchmark's poses, so no smaller capacity is exact (the script refuses a case whose
  capacity overflows).

Usage: python benchmarks/bench_sensors.py [--envs 64 1024] [--rounds 5] [--scene sphere|box]
Last line: {"seconds_per_step": {envs: {sensor: s}}}
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
from _scenes import BOX, R_SPHERE, SCENES, TOP  # noqa: E402

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


def probe_grid():
    """``[11, 11, 3]`` probe centres on the pad's top face, 3 mm pitch (row index along y)."""
    return dt.generate_grid_points_on_plane(
        (-0.015, -0.015, TOP), (0.015, 0.015, TOP), (0, 0, 1), 11, 11
    )


def object_poses(E: int, scene: str = "sphere", seed: int = 0) -> np.ndarray:
    """``[E, 7]`` object poses: 0.5 - 1.5 mm deep into the probe plane, +-5 mm offsets."""
    rng = np.random.default_rng(seed)
    poses = np.tile([0.0, 0, 0, 0, 0, 0, 1], (E, 1))
    poses[:, :2] = rng.uniform(-0.005, 0.005, (E, 2))
    half = R_SPHERE if SCENES[scene][0] == "sphere" else BOX[2] / 2
    poses[:, 2] = TOP + half - rng.uniform(0.0005, 0.0015, E)
    return poses


def object_shape(scene: str):
    """The scene's object: its difftaxel shape and its trimesh (for the tracked points)."""
    import trimesh

    if SCENES[scene][0] == "sphere":
        return dt.Sphere(radius=R_SPHERE), trimesh.creation.icosphere(3, R_SPHERE)
    return dt.Box(size=list(BOX)), trimesh.creation.box(BOX)


TWIST = np.array([0.08, 0, 0, 0, 0, 1.0])  # sliding at 8 cm/s along x, spinning at 1 rad/s


def sensors(scene: str = "sphere"):
    grid = probe_grid()
    r = SCENES[scene][1]
    mesh = object_shape(scene)[1]
    p400, _ = dt.sample_surface_points(mesh, 400)
    p2000, _ = dt.sample_surface_points(mesh, 2000)
    pad = dt.Box(size=[0.04, 0.04, 0.01])  # the pad itself: link frame = box centre
    kx = np.full((3, 3), 0.05)
    kx[1, 1] = 0.6
    return {
        "depth": ContactDepthProbe(probe_local_pos=grid, probe_radius=r),
        "contact": ContactProbe(probe_local_pos=grid, probe_radius=r),
        "kinematic": KinematicTaxel(probe_local_pos=grid, probe_radius=r),
        "kinematic_chain": KinematicTaxel(
            probe_local_pos=grid,
            probe_radius=r,
            probe_gain_resample_range=(0.9, 1.1),
            imperfections=dt.Imperfections(
                hysteresis_strength=0.3,
                hysteresis_tau=0.05,
                crosstalk_kernel=kx,
                noise=0.01,
            ),
        ),
        "elastomer": ElastomerTaxel(
            probe_local_pos=grid,
            track_points=TrackedPoints(p400, segments=((0, 400),)),
            elastomer_shapes=(pad,),
            probe_radius=r,
        ),
        "proximity": ProximityTaxel(
            probe_local_pos=grid,
            track_points=TrackedPoints(p2000, segments=((0, 2000),)),
            probe_radius=r,
        ),
        "proximity_capacity": ProximityTaxel(
            probe_local_pos=grid,
            probe_radius=r,
            track_points=TrackedPoints(p2000, segments=((0, 2000),)),
            max_candidates=352,
        ),
    }


def sensor_step_case(sensor, E: int, scene: str = "sphere"):
    """``(step, args)``: one jitted vmapped step of ``sensor`` on ``E`` environments of the
    scene, the state carried from a first step (so the elastomer's anchors exist)."""
    bodies = dt.Bodies((object_shape(scene)[0],), object_poses(1, scene), TWIST[None])
    inp = make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), bodies, dt=0.005)
    poses = jnp.asarray(object_poses(E, scene), jnp.float32)
    keys = jax.random.split(jax.random.key(0), E)

    def step(sensor, states, poses, keys):
        def one(st, pose, k):
            b = inp.bodies.with_state(pose[None])
            return sensor.step(st, inp.replace(bodies=b), k)

        return jax.vmap(one)(states, poses, keys)

    states = jax.vmap(sensor.init_state)(keys)
    states = jax.jit(step)(sensor, states, poses, keys)[0]
    reading = jax.jit(step)(sensor, states, poses, keys)[1].measured
    if not any(bool(np.any(np.asarray(x) != 0)) for x in jax.tree.leaves(reading)):
        raise RuntimeError(
            f"{type(sensor).__name__} reads only zeros: the scene is not the one meant"
        )
    if bool(np.any(getattr(states, "candidate_overflow", False))):
        raise RuntimeError(
            f"{type(sensor).__name__}(max_candidates={sensor.max_candidates}) overflows on "
            "this scene: its readings would miss points; raise the capacity"
        )
    return step, (sensor, states, poses, keys)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", nargs="+", default=None, help="a subset of the sensors")
    ap.add_argument("--scene", choices=sorted(SCENES), default="sphere")
    a = ap.parse_args()
    sens = sensors(a.scene)
    if a.scene != "sphere":  # its capacity is the sphere scene's
        sens.pop("proximity_capacity")
    if a.only:
        sens = {k: v for k, v in sens.items() if k in a.only}
    out = {}
    for E in a.envs:
        cases = {name: sensor_step_case(s, E, a.scene) for name, s in sens.items()}
        _, med, _ = time_interleaved(cases, rounds=a.rounds)
        out[str(E)] = med
        for name in cases:
            print(f"{E:5d} envs  {name:20s} {med[name] * 1e3:9.3f} ms/step")
    emit({"scene": a.scene, "seconds_per_step": out})


if __name__ == "__main__":
    main()
