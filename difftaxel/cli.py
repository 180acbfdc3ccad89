"""The ``difftaxel`` command line."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["main"]


def _demo(args) -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from . import Bodies, Sphere, generate_grid_points_on_plane
    from .sensors import ContactDepthProbe, KinematicTaxel, make_inputs

    n = args.grid
    half = 0.5 * args.pitch * (n - 1)
    grid = generate_grid_points_on_plane((-half, -half, 0.0), (half, half, 0.0), (0, 0, 1), n, n)
    radius = args.probe_radius
    sphere_r = args.sphere_radius
    z = sphere_r - args.depth  # sphere centre above the pad surface (pad link frame = world)
    bodies = Bodies((Sphere(radius=sphere_r),), np.array([[0.0, 0.0, z, 0, 0, 0, 1]]))
    inputs = make_inputs(np.array([0.0, 0, 0, 0, 0, 0, 1]), bodies)
    probe = ContactDepthProbe(probe_local_pos=grid, probe_radius=radius)
    taxel = KinematicTaxel(
        probe_local_pos=grid, probe_radius=radius, normal_stiffness=2000.0, normal_exponent=1.5
    )
    _, depth = jax.jit(probe.step)(probe.init_state(), inputs)
    _, force = jax.jit(taxel.step)(taxel.init_state(), inputs)
    sd, normal, _ = bodies.signed_distance(jnp.asarray(grid.reshape(-1, 3)))
    d = np.asarray(depth.ground_truth).reshape(-1)
    nrm = np.asarray(normal)
    f = np.asarray(force.ground_truth.force).reshape(-1, 3)
    print(
        f"difftaxel demo: sphere r={sphere_r * 1e3:.1f} mm pressed {args.depth * 1e3:.2f} mm into "
        f"a {n}x{n} taxel grid (pitch {args.pitch * 1e3:.1f} mm, probe radius "
        f"{radius * 1e3:.1f} mm)"
    )
    print(
        f"{'row':>3} {'col':>3} {'depth_mm':>9} {'normal_x':>9} {'normal_y':>9} {'normal_z':>9} "
        f"{'Fz_N':>9}"
    )
    for i in range(n * n):
        if d[i] > 0 or args.all:
            print(
                f"{i // n:>3} {i % n:>3} {d[i] * 1e3:9.4f} {nrm[i, 0]:9.4f} {nrm[i, 1]:9.4f} "
                f"{nrm[i, 2]:9.4f} {f[i, 2]:9.4f}"
            )
    summary = {
        "probes_in_contact": int(np.sum(d > 0)),
        "max_depth_m": float(d.max()),
        "total_normal_force_N": float(-f[:, 2].sum()),
    }
    print(json.dumps(summary))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="difftaxel",
        description="Differentiable tactile sensor models in JAX.",
    )
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser(
        "demo",
        help="press a sphere into a taxel grid and print each probe's depth and contact normal",
        description="Press a sphere into a planar taxel grid (ContactDepthProbe and "
        "KinematicTaxel) and print, per probe in contact, the penetration depth (mm), the "
        "contact normal (world = pad frame) and the normal force (N).",
    )
    demo.add_argument("--grid", type=int, default=7, help="taxels per side (default 7)")
    demo.add_argument("--pitch", type=float, default=0.003, help="taxel pitch in m (0.003)")
    demo.add_argument("--probe-radius", type=float, default=0.002, help="probe radius in m")
    demo.add_argument("--sphere-radius", type=float, default=0.01, help="sphere radius in m")
    demo.add_argument("--depth", type=float, default=0.001, help="press depth in m (0.001)")
    demo.add_argument("--all", action="store_true", help="print probes out of contact too")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    parser.print_help()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
