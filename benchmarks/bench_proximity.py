"""ProximityTaxel throughput and memory: points x probes x environments sweep.

One jitted vmapped step (measured branch) per configuration; peak memory is XLA's compiled
estimate (arguments + outputs + temporaries, `compiled.memory_analysis()`), measured for the
headline case. Headline: 1024 environments x 121 probes x 500 points.

Usage: python benchmarks/bench_proximity.py
Last line: {"probe_steps_per_s": ..., "peak_bytes": ..., "sweep": [...]}
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import trimesh

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import emit, time_jitted  # noqa: E402

import difftaxel as dt  # noqa: E402
from difftaxel.sensors import ProximityTaxel, TrackedPoints, make_inputs  # noqa: E402


def run(E, n_side, M, chunk, repeats):
    half = 0.0015 * (n_side - 1)
    grid = dt.generate_grid_points_on_plane(
        (-half, -half, 0), (half, half, 0), (0, 0, 1), n_side, n_side
    )
    pts, _ = dt.sample_surface_points(trimesh.creation.icosphere(3, 0.01), M)
    s = ProximityTaxel(
        probe_local_pos=grid,
        track_points=TrackedPoints(pts, ((0, M),)),
        probe_radius=0.003,
        shear_coupling=1.0,
        point_chunk=chunk,
    )
    b = dt.Bodies(
        (dt.Sphere(radius=0.01),),
        np.array([[0, 0, 0.0105, 0, 0, 0, 1.0]]),
        np.array([[0.05, 0, 0, 0, 0, 1.0]]),
    )
    inp = make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), b)
    st = s.init_state()
    rng = np.random.default_rng(0)
    poses = np.tile(b.poses[0], (E, 1))
    poses[:, :2] += rng.uniform(-0.003, 0.003, (E, 2))
    poses = jnp.asarray(poses, jnp.float32)

    def f(poses):
        return jax.vmap(
            lambda p: s.step(st, inp.replace(bodies=inp.bodies.with_state(p[None])))[1].measured
        )(poses)

    comp, t = time_jitted(f, poses, repeats=repeats)
    mem = jax.jit(f).lower(poses).compile().memory_analysis()
    peak = None
    if mem is not None:
        peak = int(mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes)
    return E * s.n_probes / t, peak, comp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=64)
    a = ap.parse_args()
    sweep = []
    for E, n_side, M in [
        (64, 5, 500),
        (64, 11, 500),
        (1024, 11, 100),
        (1024, 11, 500),
        (1024, 11, 2000),
        (4096, 11, 500),
    ]:
        rate, peak, comp = run(E, n_side, M, a.chunk, a.repeats)
        sweep.append(
            {
                "envs": E,
                "probes": n_side**2,
                "points": M,
                "probe_steps_per_s": rate,
                "peak_bytes": peak,
                "compile_s": comp,
            }
        )
        print(
            f"E={E:5d} probes={n_side**2:4d} points={M:5d}  {rate:.3e} probe-steps/s  "
            f"peak {peak / 2**20 if peak else float('nan'):.1f} MiB  compile {comp:.2f} s"
        )
    head = next(r for r in sweep if r["envs"] == 1024 and r["probes"] == 121 and r["points"] == 500)
    emit(
        {
            "probe_steps_per_s": head["probe_steps_per_s"],
            "peak_bytes": head["peak_bytes"],
            "sweep": sweep,
            "point_chunk": a.chunk,
            "dtype": "float32",
        }
    )


if __name__ == "__main__":
    main()
