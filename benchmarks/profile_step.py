"""Per-op profile of one jitted, vmapped sensor step (where the time of a step goes).

Runs the compiled step under ``jax.profiler.trace`` and prints the XLA ops (fusions) that
took the most time, in ms per call. The figures quoted from profiles in RESULTS.md come from
this script.

Usage:
  python benchmarks/profile_step.py forward 4096      # bare KinematicTaxel step
  python benchmarks/profile_step.py grad 4096         # value_and_grad w.r.t. object poses
  python benchmarks/profile_step.py chain 1024 [--threefry] [--delay-only]
  python benchmarks/profile_step.py proximity 1024 [--points 500 --capacity 80]
  python benchmarks/profile_step.py sensor 1024 --sensor kinematic [--scene box]  # bench_sensors
Add ``--hlo FILE`` to write the optimised HLO (to read what a fusion contains).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import pathlib
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import kinematic_forward_and_loss, kinematic_scene  # noqa: E402

import difftaxel as dt  # noqa: E402

SKIP = ("$", "Thunk", "Pjit", "Common", "Parse", "Alloc", "Handle", "Slinky")


def profile(fn, *args, calls=5, top=40, hlo=None):
    c = jax.jit(fn).lower(*args).compile()
    for _ in range(2):
        jax.block_until_ready(c(*args))
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(c(*args))
        f = glob.glob(d + "/**/*.trace.json.gz", recursive=True)[0]
        ev = json.load(gzip.open(f))
    evs = ev["traceEvents"] if isinstance(ev, dict) else ev
    tot = collections.Counter()
    for e in evs:
        if e.get("ph") == "X" and "dur" in e and not e["name"].startswith(SKIP):
            tot[e["name"]] += e["dur"]
    print(f"{sum(tot.values()) / calls / 1000:9.3f} ms  (all ops, per call)")
    for k, v in tot.most_common(top):
        print(f"{v / calls / 1000:9.3f} ms  {k[:100]}")
    if hlo:
        pathlib.Path(hlo).write_text(c.as_text())


def scene_poses(bodies, E):
    rng = np.random.default_rng(0)
    poses = np.tile(bodies.poses[0], (E, 1))
    poses[:, :2] += rng.uniform(-0.01, 0.01, (E, 2))
    poses[:, 2] += rng.uniform(-0.0015, 0.0005, E)
    return jnp.asarray(poses, jnp.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["forward", "grad", "chain", "proximity", "sensor"])
    ap.add_argument("envs", type=int)
    ap.add_argument("--threefry", action="store_true", help="chain: noise_generator='threefry'")
    ap.add_argument("--delay-only", action="store_true", help="chain: delay + jitter only")
    ap.add_argument("--points", type=int, default=500, help="proximity: tracked points")
    ap.add_argument("--capacity", type=int, default=80, help="proximity: max_candidates (0: off)")
    ap.add_argument("--sensor", default="kinematic", help="sensor: a name of bench_sensors.py")
    ap.add_argument("--scene", default="sphere", help="sensor: a scene of bench_sensors.py")
    ap.add_argument("--hlo")
    a = ap.parse_args()
    if a.mode == "sensor":
        import bench_sensors

        sensor = bench_sensors.sensors(a.scene)[a.sensor]
        f, args = bench_sensors.sensor_step_case(sensor, a.envs, a.scene)
        profile(f, *args, hlo=a.hlo)
        return
    if a.mode == "proximity":
        import bench_proximity

        f, poses = bench_proximity.scene(a.envs, 11, a.points, 8, a.capacity or None)
        profile(f, poses, hlo=a.hlo)
        return
    if a.mode == "chain":
        if a.delay_only:
            imp = dict(delay=0.01, dt=0.005, jitter=0.001)
        else:
            imp = dict(
                hysteresis_strength=0.5, hysteresis_tau=0.1, crosstalk_strength=0.3,
                crosstalk_sigma=0.003, dead_taxel_probability=0.02,
                dead_taxel_value_range=(0, 0.1), bias=5e-4, resolution=5e-4, delay=0.01,
                dt=0.005, noise=1e-3, random_walk=1e-4, jitter=0.001,
                noise_generator="threefry" if a.threefry else "hash",
            )  # fmt: skip
        s, bodies, inp = kinematic_scene(imperfections=dt.Imperfections(**imp))
        keys = jax.random.split(jax.random.key(0), a.envs)
        states = jax.vmap(s.init_state)(keys)

        def step(states, poses, keys):
            def one(st, pose, k):
                return s.step(st, inp.replace(bodies=inp.bodies.with_state(pose[None])), k)

            return jax.vmap(one)(states, poses, keys)

        profile(step, states, scene_poses(bodies, a.envs), keys, hlo=a.hlo)
        return
    kt, bodies, inp = kinematic_scene()
    st = kt.init_state()

    forward, loss = kinematic_forward_and_loss(inp, st)

    fn = forward if a.mode == "forward" else jax.value_and_grad(loss, argnums=1)
    profile(fn, kt, scene_poses(bodies, a.envs), hlo=a.hlo)


if __name__ == "__main__":
    main()
