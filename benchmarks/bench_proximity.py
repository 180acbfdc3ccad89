"""ProximityTaxel throughput and memory: points x probes x environments sweep.

One jitted vmapped step (measured branch) per configuration; peak memory is XLA's compiled
estimate (arguments + outputs + temporaries, `compiled.memory_analysis()`), measured for the
headline case. Headline: 1024 environments x 121 probes x 500 points.

Usage: python benchmarks/bench_proximity.py  (every configuration twice: the default, which
needs no capacity, and with a hand-tuned max_candidates that does not overflow, side by side);
``--headline`` runs only the two rows the last line reports
(1024 x 121 x 500 and 4096 x 121 x 2000), for a short check on another machine
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


def scene(E, n_side, M, chunk, max_candidates=None):
    """``(f, poses)``: ``f(poses)`` is one vmapped step of the benchmark scene (measured
    readings and the overflow flag) with the sphere at each of ``poses [E, 7]``."""
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
        max_candidates=max_candidates,
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
        def one(p):
            st1, r = s.step(st, inp.replace(bodies=inp.bodies.with_state(p[None])))
            return r.measured, st1.candidate_overflow

        return jax.vmap(one)(poses)

    return f, poses


def run(E, n_side, M, chunk, repeats, max_candidates=None):
    f, poses = scene(E, n_side, M, chunk, max_candidates)
    comp, t = time_jitted(f, poses, repeats=repeats)
    overflow = bool(jnp.any(jax.jit(f)(poses)[1]))
    mem = jax.jit(f).lower(poses).compile().memory_analysis()
    peak = None
    if mem is not None:
        peak = int(mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes)
    return E * n_side**2 / t, peak, comp, overflow


# (envs, grid side, points, capacity): the capacity covers the points inside the probes'
# bounding box in this scene (13 / 65 / 247 of 100 / 500 / 2000), so no step overflows.
SWEEP = [
    (64, 5, 500, 80),
    (64, 11, 500, 80),
    (1024, 11, 100, 16),
    (1024, 11, 500, 80),
    (1024, 11, 2000, 256),
    (4096, 11, 500, 80),
    (4096, 11, 2000, 256),
]
HEADLINE = [(1024, 11, 500, 80), (4096, 11, 2000, 256)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=8, help="point_chunk (points per loop iteration)")
    ap.add_argument(
        "--skip-default-above",
        type=int,
        default=10**9,
        help="skip the default run when envs*probes*points exceeds this",
    )
    ap.add_argument("--headline", action="store_true", help="only the two reported rows")
    a = ap.parse_args()
    sweep = []
    rows = [r for r in SWEEP if not a.headline or r in HEADLINE]
    for E, n_side, M, K in rows:
        row = {"envs": E, "probes": n_side**2, "points": M, "max_candidates": K}
        for tag, cap in (("preselected", K), ("default", None)):
            if cap is None and E * n_side**2 * M > a.skip_default_above:
                continue
            rate, peak, comp, over = run(E, n_side, M, a.chunk, a.repeats, cap)
            row[tag] = {
                "probe_steps_per_s": rate,
                "peak_bytes": peak,
                "compile_s": comp,
                "overflow": over,
            }
            print(
                f"E={E:5d} probes={n_side**2:4d} points={M:5d} {tag:11s} "
                f"{rate:.3e} probe-steps/s  peak {peak / 2**20 if peak else float('nan'):.1f} MiB"
                f"  compile {comp:.2f} s  overflow {over}",
                flush=True,
            )
        if "default" in row:
            row["preselected_over_default"] = (
                row["preselected"]["probe_steps_per_s"] / row["default"]["probe_steps_per_s"]
            )
            print(f"    pre-selected / default {row['preselected_over_default']:.2f}x", flush=True)
        sweep.append(row)
    head = next(r for r in sweep if r["envs"] == 1024 and r["probes"] == 121 and r["points"] == 500)
    big = next(r for r in sweep if r["envs"] == 4096 and r["points"] == 2000)
    emit(
        {
            "probe_steps_per_s": head["preselected"]["probe_steps_per_s"],
            "peak_bytes": head["preselected"]["peak_bytes"],
            "default_probe_steps_per_s": head["default"]["probe_steps_per_s"],
            "default_probe_steps_per_s_4096x121x2000": big["default"]["probe_steps_per_s"],
            "peak_bytes_4096x121x2000": big["preselected"]["peak_bytes"],
            "sweep": sweep,
            "point_chunk": a.chunk,
            "dtype": "float32",
        }
    )


if __name__ == "__main__":
    main()
