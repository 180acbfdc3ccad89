"""difftaxel against Genesis World 1.4.5, sensor by sensor, on the parity scene, side by side.

Genesis lives in its own virtual environment, outside this repository and never among its
dependencies::

    python -m venv /tmp/gvenv && /tmp/gvenv/bin/pip install torch==2.13.0 genesis-world==1.4.5

Each round runs, for every sensor configuration and environment count, one Genesis process and
one difftaxel process (alternating which goes first), both pinned to one core (``taskset -c 0``,
one thread each). Genesis's time is its own step timer's ``sensors`` phase (its physics
excluded), the median over the timed steps; difftaxel's is one jitted vmapped step of the same
sensor (``bench_sensors.py``'s scene and options), the median over repeats. The ratio is
Genesis time / difftaxel time, the median over rounds (> 1: difftaxel is faster).
``--scene`` picks ``bench_sensors.py``'s scene: ``sphere`` (the parity kit's, 2 mm probes) or
``box`` (a 4 x 4 x 40 mm peg on its small face, 3 mm probes, about 9 % of the taxels in
contact; tall because Genesis's grid SDF of a box ends 10 % of its largest extent beyond it,
and a probe farther out would read no contact there). "touched" is the fraction of taxels
with any nonzero measured component, on each side.

``--warm-allocator`` first allocates and frees one 16 MiB array in both workers: glibc then
keeps freed memory instead of returning it to the system at every step, the state of any
process that has held a larger array (a training loop, a notebook). Without it, a fresh
process pays page faults for each step's new output buffers (difftaxel's step allocates its
readings; Genesis writes into buffers made at build), up to half of a 1024-environment step.

Usage: python benchmarks/genesis_side_by_side.py --genesis-python /tmp/gvenv/bin/python
       [--envs 64 1024] [--rounds 5] [--only kinematic elastomer] [--warm-allocator]
       [--scene sphere|box]
Last line: {"ratio": {envs: {sensor: r}}, "genesis_s": {...}, "difftaxel_s": {...}}
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _scenes import BOX, R_SPHERE, SCENES  # noqa: E402  (plain constants: no jax here)

SENSORS = (
    "depth",
    "contact",
    "kinematic",
    "kinematic_chain",
    "elastomer",
    "proximity",
)
ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "PYTHONUNBUFFERED": "1",
}


# ------------------------------------------------------------------------ the Genesis worker


def warm_allocator() -> None:
    """Allocate and free one 16 MiB array: glibc raises its mmap and trim thresholds to that
    size (process-wide), so later buffers up to it are reused rather than mapped anew."""
    import numpy as np

    a = np.ones(2 * 2**20)  # 16 MiB: at most glibc's largest dynamic threshold (32 MiB)
    del a


def genesis_worker(name: str, E: int, steps: int, scene_name: str) -> dict:
    """Build the parity scene with one sensor in Genesis, step it, and return the median of its
    ``sensors`` phase (s) over ``steps`` timed steps (after 3 warm-up steps)."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import genesis as gs

    gs.init(backend=gs.cpu, precision="32", logging_level="warning", seed=0)
    scene = gs.Scene(
        sim_options=gs.options.SimOptions(dt=0.005, substeps=1, gravity=(0.0, 0.0, 0.0)),
        rigid_options=gs.options.RigidOptions(disable_constraint=True, enable_collision=True),
        show_viewer=False,
    )
    what, radius = SCENES[scene_name]
    pad = scene.add_entity(gs.morphs.Box(size=(0.04, 0.04, 0.01), pos=(0, 0, 0.005), fixed=True))
    if what == "sphere":
        obj = scene.add_entity(gs.morphs.Sphere(radius=R_SPHERE, pos=(0.5, 0.0, 1.0)))
        half = R_SPHERE
    else:
        obj = scene.add_entity(gs.morphs.Box(size=BOX, pos=(0.5, 0.0, 1.0)))
        half = BOX[2] / 2
    n = 11
    xs = -0.015 + 0.003 * np.arange(n)
    grid = np.stack([*np.meshgrid(xs, xs, indexing="xy"), np.full((n, n), 0.005)], -1)
    common = dict(entity_idx=pad.idx, link_idx_local=0, probe_local_pos=grid, probe_radius=radius)
    track = dict(track_link_idx=(obj.base_link.idx,))
    kx = np.full((3, 3), 0.05)
    kx[1, 1] = 0.6
    opts = {
        "depth": lambda: gs.sensors.ContactDepthProbe(**common),
        "contact": lambda: gs.sensors.ContactProbe(**common),
        "kinematic": lambda: gs.sensors.KinematicTaxel(**common),
        "kinematic_chain": lambda: gs.sensors.KinematicTaxel(
            **common,
            probe_gain_resample_range=(0.9, 1.1),
            hysteresis_strength=0.3,
            hysteresis_tau=0.05,
            crosstalk_kernel=kx,
            noise=0.01,
        ),
        "elastomer": lambda: gs.sensors.ElastomerTaxel(**common, **track, n_sample_points=400),
        "proximity": lambda: gs.sensors.ProximityTaxel(**common, **track, n_sample_points=2000),
    }
    sensor = scene.add_sensor(opts[name]())
    scene.build(n_envs=E)
    rng = np.random.default_rng(0)
    pos = np.zeros((E, 3))
    pos[:, :2] = rng.uniform(-0.005, 0.005, (E, 2))
    # world z: the pad's link origin (5 mm) + its top face (5 mm) + the object's half height
    # - the depth
    pos[:, 2] = 0.005 + 0.005 + half - rng.uniform(0.0005, 0.0015, E)
    vel = np.tile([0.08, 0, 0, 0, 0, 1.0], (E, 1))
    timer = scene.sim.step_timer
    times = []
    for k in range(steps + 3):
        obj.set_pos(pos, relative=False)
        obj.set_dofs_velocity(vel)
        scene.step()
        if k >= 3:
            times.append(timer.timings["sensors"])
    out = sensor.read()
    first = out if isinstance(out, torch.Tensor) else out[0]
    touched = (first != 0).reshape(E, grid.shape[0] * grid.shape[1], -1).any(-1)
    return {"seconds": statistics.median(times), "nonzero": float(touched.double().mean())}


# ------------------------------------------------------------------------ the difftaxel worker


def difftaxel_worker(name: str, E: int, rounds: int, scene: str) -> dict:
    sys.path.insert(0, str(HERE))
    import jax
    import numpy as np
    from _common import time_interleaved
    from bench_sensors import sensor_step_case, sensors

    fn, args = sensor_step_case(sensors(scene)[name], E, scene)
    _, med, _ = time_interleaved({name: (fn, args)}, rounds=rounds)
    first = np.asarray(jax.tree.leaves(jax.jit(fn)(*args)[1].measured)[0])
    touched = np.any((first != 0).reshape(E, args[0].n_probes, -1), -1)
    return {"seconds": med[name], "nonzero": float(np.mean(touched))}


# ------------------------------------------------------------------------ orchestration


def _run(cmd, env) -> dict:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise RuntimeError(f"{cmd[0]}: exit {out.returncode}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--genesis-python", default=None, help="python of the Genesis venv")
    ap.add_argument("--envs", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="Genesis steps timed per process")
    ap.add_argument("--only", nargs="+", default=list(SENSORS))
    ap.add_argument("--warm-allocator", action="store_true", help="see the module docstring")
    ap.add_argument("--scene", choices=sorted(SCENES), default="sphere")
    ap.add_argument("--worker", nargs=3, metavar=("SIDE", "SENSOR", "ENVS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        side, name, E = a.worker
        if a.warm_allocator:
            warm_allocator()
        res = (
            genesis_worker(name, int(E), a.steps, a.scene)
            if side == "genesis"
            else difftaxel_worker(name, int(E), 5, a.scene)
        )
        print(json.dumps(res))
        return
    if not a.genesis_python:
        ap.error("--genesis-python: the python of a venv with genesis-world==1.4.5 is required")
    env = dict(os.environ, **ONE_THREAD)
    pin = ["taskset", "-c", "0"]
    me = str(pathlib.Path(__file__).resolve())
    g_s = {str(E): {k: [] for k in a.only} for E in a.envs}
    d_s = {str(E): {k: [] for k in a.only} for E in a.envs}
    ratios = {str(E): {k: [] for k in a.only} for E in a.envs}
    for r in range(a.rounds):
        for E in a.envs:
            for name in a.only:
                runs, touched = {}, {}
                order = ("genesis", "difftaxel") if r % 2 == 0 else ("difftaxel", "genesis")
                for side in order:
                    py = a.genesis_python if side == "genesis" else sys.executable
                    cmd = [*pin, py, me, "--worker", side, name, str(E), "--steps", str(a.steps)]
                    cmd += ["--scene", a.scene]
                    cmd += ["--warm-allocator"] if a.warm_allocator else []
                    res = _run(cmd, env)
                    runs[side], touched[side] = res["seconds"], res["nonzero"]
                g_s[str(E)][name].append(runs["genesis"])
                d_s[str(E)][name].append(runs["difftaxel"])
                ratios[str(E)][name].append(runs["genesis"] / runs["difftaxel"])
                print(
                    f"round {r} {E:5d} envs {name:16s} genesis {runs['genesis'] * 1e3:9.3f} ms "
                    f"difftaxel {runs['difftaxel'] * 1e3:9.3f} ms ratio "
                    f"{runs['genesis'] / runs['difftaxel']:7.2f} touched taxels "
                    f"{touched['genesis']:.3f} / {touched['difftaxel']:.3f}",
                    flush=True,
                )
    med = lambda d: {E: {k: statistics.median(v) for k, v in x.items()} for E, x in d.items()}  # noqa: E731
    out = {"scene": a.scene, "ratio": med(ratios), "genesis_s": med(g_s), "difftaxel_s": med(d_s)}
    print(json.dumps({**out, "ratio_rounds": ratios}))


if __name__ == "__main__":
    main()
