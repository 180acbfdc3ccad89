"""Scaling curves: one jitted, vmapped sensor step against taxels, far shapes and environments.

For KinematicTaxel (default options: ``broad_phase="auto"``) and ProximityTaxel (default
options, every tracked point against every probe), on the benchmarks' scene (a 1 cm sphere
pressed 0.5-1.5 mm into a flat grid of 2 mm probes, about 20 % of a 11 x 11 grid in contact):

* ``taxels``: 100 -> 10,000 probes (a square grid over the same 3 cm pad), 64 environments;
* ``far``: 1 -> 64 shapes present but 0.3-1 m away (spheres for KinematicTaxel; for
  ProximityTaxel, tracked bodies of 200 points each), 121 probes, 64 environments;
* ``envs``: 1 -> 4096 environments, 121 probes;
* ``peak_memory``: XLA's buffer sizes (arguments, outputs, temporaries) of the compiled step
  at 10,000 taxels x 1024 environments (``Compiled.memory_analysis``).

Each point is the median of ``--repeats`` timings (each >= 0.1 s of repeated calls) after a
compile; float32. The JSON goes to ``--json`` and a log-log plot of the three curves to
``--svg`` (hand-written SVG: no plotting dependency).

Run: ``python benchmarks/bench_scaling.py [--json benchmarks/scaling.json]
[--svg benchmarks/scaling.svg] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import trimesh
from _common import machine, time_jitted

import difftaxel as dt
from difftaxel.sensors import KinematicTaxel, ProximityTaxel, TrackedPoints, make_inputs

R_SPHERE = 0.01
SPHERE_POINTS = dt.sample_surface_points(trimesh.creation.icosphere(3, R_SPHERE), 2000)[0]
FAR_POINTS = dt.sample_surface_points(trimesh.creation.icosphere(2, R_SPHERE), 200)[0]


def grid(n: int) -> np.ndarray:
    k = int(round(math.sqrt(n)))
    return dt.generate_grid_points_on_plane((-0.015, -0.015, 0), (0.015, 0.015, 0), (0, 0, 1), k, k)


def sphere_poses(E: int, far: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    P = np.tile([0.0, 0, 0, 0, 0, 0, 1], (E, 1 + far, 1))
    P[:, 0, :2] = rng.uniform(-0.005, 0.005, (E, 2))
    P[:, 0, 2] = R_SPHERE - rng.uniform(0.0005, 0.0015, E)
    ang = np.arange(far) * 2.399963
    P[:, 1:, 0] = (0.3 + 0.7 * np.arange(far) / max(far, 1)) * np.cos(ang)
    P[:, 1:, 1] = (0.3 + 0.7 * np.arange(far) / max(far, 1)) * np.sin(ang)
    return P


def case(kind: str, n: int, far: int, E: int):
    """``(step, args)`` of one vmapped step of ``kind`` with ``n`` probes, ``far`` far shapes
    and ``E`` environments."""
    B = 1 + far
    if kind == "kinematic":
        sensor = KinematicTaxel(probe_local_pos=grid(n), probe_radius=0.002)
        shapes = (dt.Sphere(radius=R_SPHERE, body=0),) + tuple(
            dt.Sphere(radius=R_SPHERE, body=1 + i) for i in range(far)
        )
    else:
        pts = np.concatenate([SPHERE_POINTS] + [FAR_POINTS] * far)
        segs = ((0, len(SPHERE_POINTS)),) + tuple((1 + i, len(FAR_POINTS)) for i in range(far))
        sensor = ProximityTaxel(
            probe_local_pos=grid(n),
            track_points=TrackedPoints(pts, segments=segs),
            probe_radius=0.002,
        )
        shapes = tuple(dt.Sphere(radius=R_SPHERE, body=i) for i in range(B))
    tw = np.tile([0.08, 0, 0, 0, 0, 1.0], (B, 1))
    inp = make_inputs(
        np.array([0, 0, 0, 0, 0, 0, 1.0]), dt.Bodies(shapes, sphere_poses(1, far)[0], tw)
    )
    poses = jnp.asarray(sphere_poses(E, far), jnp.float32)
    state = sensor.init_state()

    def step(sensor, poses):
        def one(P):
            return sensor.step(state, inp.replace(bodies=inp.bodies.with_state(P)))[1].measured

        return jax.vmap(one)(poses)

    return step, (sensor, poses)


def curve(kind, axis, values, repeats):
    out = []
    for v in values:
        n, far, E = {"taxels": (v, 0, 64), "far": (121, v, 64), "envs": (121, 0, v)}[axis]
        step, args = case(kind, n, far, E)
        compile_s, t = time_jitted(step, *args, repeats=repeats, min_time=0.1)
        out.append({axis: v, "step_s": t, "compile_s": compile_s})
        print(f"{kind} {axis}={v}: {t * 1e3:.3f} ms (compile {compile_s:.1f} s)", flush=True)
    return out


def peak_memory(kind: str, n: int, E: int) -> dict:
    step, args = case(kind, n, 0, E)
    m = jax.jit(step).lower(*args).compile().memory_analysis()
    f = {k: int(getattr(m, k + "_size_in_bytes")) for k in ("argument", "output", "temp")}
    f["total"] = sum(f.values())
    return f


def slope(points, axis) -> float:
    """Least-squares slope of log(step time) against log(axis) over the upper half of the
    curve (where fixed costs no longer dominate)."""
    pts = points[(len(points) - 1) // 2 :]
    x = np.log([p[axis] for p in pts])
    y = np.log([p["step_s"] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def svg(res: dict, path: pathlib.Path) -> None:
    """Three log-log panels (time against taxels, far shapes, environments), one line per
    sensor."""
    W, H, pad = 300, 220, 45
    colours = {"kinematic": "#1f77b4", "proximity": "#d62728"}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{3 * W}" height="{H}" font-size="11">'
    ]
    for i, axis in enumerate(("taxels", "far", "envs")):
        x0 = i * W
        series = {k: res[k][axis] for k in colours}
        xs = [p[axis] for s in series.values() for p in s]
        ys = [p["step_s"] for s in series.values() for p in s]
        lx, hx = math.log10(min(xs)), math.log10(max(xs))
        ly, hy = math.log10(min(ys)) - 0.1, math.log10(max(ys)) + 0.1

        def X(v, lx=lx, hx=hx, x0=x0):
            return x0 + pad + (math.log10(v) - lx) / (hx - lx) * (W - pad - 10)

        def Y(v, ly=ly, hy=hy):
            return H - pad + 10 - (math.log10(v) - ly) / (hy - ly) * (H - pad - 10)

        parts.append(
            f'<rect x="{x0 + pad}" y="10" width="{W - pad - 10}" height="{H - pad}" '
            'fill="none" stroke="#999"/>'
        )
        parts.append(f'<text x="{x0 + W / 2}" y="{H - 5}" text-anchor="middle">{axis} (log)</text>')
        parts.append(
            f'<text x="{x0 + 5}" y="20">{10**hy * 1e3:.3g} ms</text>'
            f'<text x="{x0 + 5}" y="{H - pad + 10}">{10**ly * 1e3:.3g} ms</text>'
        )
        for k, s in series.items():
            pts = " ".join(f"{X(p[axis]):.1f},{Y(p['step_s']):.1f}" for p in s)
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{colours[k]}"/>')
        if i == 0:
            for j, (k, c) in enumerate(colours.items()):
                parts.append(f'<text x="{x0 + pad + 5}" y="{25 + 13 * j}" fill="{c}">{k}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=pathlib.Path, default=None)
    ap.add_argument("--svg", type=pathlib.Path, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer, smaller points (a smoke run)")
    a = ap.parse_args()
    axes = {
        "taxels": [100, 400, 1024, 2500, 10000],
        "far": [1, 2, 4, 8, 16, 32, 64],
        "envs": [1, 4, 16, 64, 256, 1024, 4096],
    }
    if a.quick:
        axes = {"taxels": [100, 400], "far": [1, 8], "envs": [1, 16]}
    for p in (a.json, a.svg):
        if p is not None and not p.parent.is_dir():
            raise SystemExit(f"{p}: no such directory")
    res = {}
    for kind in ("kinematic", "proximity"):
        res[kind] = {ax: curve(kind, ax, v, a.repeats) for ax, v in axes.items()}
        res[kind]["slopes"] = {ax: slope(res[kind][ax], ax) for ax in axes}
        n, E = (400, 16) if a.quick else (10000, 1024)
        res[kind]["peak_memory"] = {"taxels": n, "envs": E, **peak_memory(kind, n, E)}
        print(kind, "slopes", res[kind]["slopes"], "memory", res[kind]["peak_memory"], flush=True)
    res["machine"] = machine()
    text = json.dumps(res)
    if a.json is not None:
        tmp = a.json.with_suffix(".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(a.json)
    if a.svg is not None:
        svg(res, a.svg.with_suffix(".tmp"))
        a.svg.with_suffix(".tmp").replace(a.svg)
    print(text)


if __name__ == "__main__":
    main()
