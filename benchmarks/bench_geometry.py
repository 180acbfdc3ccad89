"""World signed distance + normal for many points against each shape kind (jitted).

Usage: python benchmarks/bench_geometry.py [--points 1000000] [--repeats 7]
Last line: {"sdf_points_per_s": {"sphere": ..., ...}, "compile_s": {...}}
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
from difftaxel.geometry import shape_sdf_world  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--mesh-points", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    pts = jnp.asarray(rng.uniform(-0.1, 0.1, (a.points, 3)), jnp.float32)
    T = jnp.asarray([0.01, -0.02, 0.005, 0.0, 0.0, np.sin(0.2), np.cos(0.2)], jnp.float32)
    shapes = {
        "sphere": dt.Sphere(radius=0.05),
        "plane": dt.Plane(),
        "box": dt.Box(size=[0.08, 0.06, 0.04]),
        "capsule": dt.Capsule(radius=0.03, length=0.05),
        "cylinder": dt.Cylinder(radius=0.03, height=0.06),
        "grid": dt.GridSDF.from_shape(dt.Box(size=[0.08, 0.06, 0.04])),
    }
    rate, comp = {}, {}

    def f(shape, T, p):
        sd, n = shape_sdf_world(shape, T, p)
        return sd, n

    for name, s in shapes.items():
        c, t = time_jitted(f, s, T, pts, repeats=a.repeats)
        rate[name], comp[name] = a.points / t, c
        print(f"{name:10s} {a.points / t:12.4g} points/s   compile {c:.3f} s")
    # triangle mesh (exact, 1280 faces): O(points x faces), fewer points
    mesh = dt.TriangleMesh.from_trimesh(trimesh.creation.icosphere(3, 0.05))
    mp = pts[: a.mesh_points]
    c, t = time_jitted(f, mesh, T, mp, repeats=max(3, a.repeats // 2))
    rate["mesh_1280_faces"], comp["mesh_1280_faces"] = a.mesh_points / t, c
    print(f"{'mesh':10s} {a.mesh_points / t:12.4g} points/s   compile {c:.3f} s (1280 faces)")
    emit(
        {
            "sdf_points_per_s": rate,
            "compile_s": comp,
            "points": a.points,
            "dtype": str(pts.dtype),
            "backend": jax.default_backend(),
        }
    )


if __name__ == "__main__":
    main()
