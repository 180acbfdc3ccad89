"""The ``difftaxel`` command line.

``demo`` is the main job (a synthetic glove session calibrated and identified end to end);
``press`` prints what a taxel grid reads under a sphere; ``calibrate`` and ``identify`` run the
fits on a user's files. The command runs JAX in float64 (an application setting made here,
never by the library).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading

from ._cli_args import holdout as _holdout
from ._cli_args import positive as _positive
from ._cli_identify import add_identify_parser, identify

__all__ = ["main"]

RECORDING_HELP = """\
RECORDING is an NPZ written by difftaxel.io.write_recording:
  header         JSON string: {"format": "difftaxel.recording", "version": 1,
                 "metadata": {...tactile metadata: geometry_mapping (LBS: segment_bind_poses,
                 taxel_bind_poses [x y z qx qy qz qw, m, wrist root frame], segment_indices,
                 weights), segment_source (HandSkeletonRef joints)},
                 "objects": [{"kind": "sphere", "radius": r} | {"kind": "box", "size": [x,y,z]}
                 | {"kind": "plane"}, ...], "sensor": {KinematicTaxel options: probe_radius,
                 normal_stiffness, normal_damping, normal_exponent, shear_scalar,
                 twist_scalar; required, the force model the fit uses}}
  frames         [T, N, 3] measured taxel forces (N, taxel axes, +z outward)
  joint_poses    [T, J, 7] joint poses in the wrist root frame (segment order)
  timestamps_ns  [T] int64
  root_poses     [T, 7] wrist root pose in the world (optional; identity if absent)
  object_poses   [T, B, 7], object_twists [T, B, 6] (world; one body per object)

A rigid-link recording (a skin on one link; difftaxel.io.write_link_recording) has instead
  header         "layout": {"type": "RigidLink", "positions": [[x,y,z],...] (m, link frame),
                 "normals": [[nx,ny,nz],...], "tangents": optional}, "channels": "xyz" |
                 "normal" | [[bool x3] per taxel], plus "objects" and "sensor" as above
  frames         [T, N, 3] (taxel axes) or [T, N] normal readings (pressure-only skins)
  link_poses     [T, 7] link pose in the world (optional; identity if absent)
  link_twists    [T, 6] link velocity, world (m/s then rad/s; optional: static if absent)
and the output is the calibrated layout (JSON: layout, identified, std_position_m, ...).
"""


def _press(args) -> int:
    import jax
    import numpy as np

    from . import Bodies, Sphere, generate_grid_points_on_plane
    from .sensors import ContactDepthProbe, KinematicTaxel, make_inputs

    n = args.grid
    half = 0.5 * args.pitch * (n - 1)
    grid = generate_grid_points_on_plane((-half, -half, 0.0), (half, half, 0.0), (0, 0, 1), n, n)
    radius, sphere_r = args.probe_radius, args.sphere_radius
    # the sphere's surface reaches args.depth below the probe centres' plane
    bodies = Bodies(
        (Sphere(radius=sphere_r),), np.array([[0.0, 0, sphere_r - args.depth, 0, 0, 0, 1]])
    )
    inputs = make_inputs(np.array([0.0, 0, 0, 0, 0, 0, 1]), bodies)
    probe = ContactDepthProbe(probe_local_pos=grid, probe_radius=radius)
    taxel = KinematicTaxel(
        probe_local_pos=grid, probe_radius=radius, normal_stiffness=2000.0, normal_exponent=1.5
    )
    _, depth = jax.jit(probe.step)(probe.init_state(), inputs)
    _, force = jax.jit(taxel.step)(taxel.init_state(), inputs)
    sd, normal, _ = bodies.signed_distance(grid.reshape(-1, 3))
    d = np.asarray(depth.ground_truth).reshape(-1)
    nrm = np.asarray(normal)
    f = np.asarray(force.ground_truth.force).reshape(-1, 3)
    print(
        f"sphere r={sphere_r * 1e3:.1f} mm, its surface {args.depth * 1e3:.2f} mm past the plane "
        f"of a {n}x{n} probe grid (pitch {args.pitch * 1e3:.1f} mm, probe radius "
        f"{radius * 1e3:.1f} mm)"
    )
    print(
        "pen_mm: probe penetration = probe radius - distance to the surface (a probe centred on "
        "the surface reads its radius); Fz_N: normal force on the sensor, link frame "
        "(negative = compression, pushing into the sensor)"
    )
    print(
        f"{'row':>3} {'col':>3} {'pen_mm':>9} {'normal_x':>9} {'normal_y':>9} "
        f"{'normal_z':>9} {'Fz_N':>9}"
    )
    for i in range(n * n):
        if d[i] > 0 or args.all:
            print(
                f"{i // n:>3} {i % n:>3} {d[i] * 1e3:9.4f} {nrm[i, 0]:9.4f} {nrm[i, 1]:9.4f} "
                f"{nrm[i, 2]:9.4f} {f[i, 2]:9.4f}"
            )
    print(
        json.dumps(
            {
                "probes_in_contact": int(np.sum(d > 0)),
                "max_penetration_m": float(d.max()),
                "surface_press_m": float(args.depth),
                "total_Fz_N": float(f[:, 2].sum()),
            }
        )
    )
    del sd
    return 0


def _demo(args) -> int:
    from ._files import check_output_dir
    from .demo import run_demo

    check_output_dir(args.out, "--out")
    steps = 60 if args.quick else args.steps
    run_demo(args.out, steps_per_stage=steps, plots=not args.no_plots)
    return 0


def _shape(o):
    from .geometry import Box, Plane, Sphere

    kind = o.get("kind")
    if kind == "sphere":
        return Sphere(radius=o["radius"])
    if kind == "box":
        return Box(size=o["size"])
    if kind == "plane":
        return Plane(normal=o.get("normal", [0.0, 0.0, 1.0]))
    raise ValueError(f"objects: unknown kind {kind!r} (sphere, box, plane)")


def _bodies(objects, object_poses, object_twists):
    import dataclasses

    import jax.numpy as jnp
    import numpy as np

    from .geometry import Bodies

    shapes = tuple(dataclasses.replace(_shape(o), body=i) for i, o in enumerate(objects))
    if object_twists is None:
        object_twists = np.zeros(object_poses.shape[:-1] + (6,))
    return Bodies(shapes, object_poses[0]).with_state(
        jnp.asarray(object_poses), jnp.asarray(object_twists)
    )


def _sensor(options, n, path):
    import numpy as np

    from .sensors import KinematicTaxel

    try:
        return KinematicTaxel(probe_local_pos=np.zeros((n, 3)), **(options or {}))
    except TypeError as e:
        raise ValueError(f"{path}: sensor options: {e}") from None


def _frame_period(ts):
    import numpy as np

    return float(np.median(np.diff(ts))) * 1e-9 if len(ts) > 1 else 0.01


def _merged_link_recordings(paths, recs):
    """Rigid-link recordings of one skin, one after the other (same layout, channels, objects
    and sensor options; the frame period is the first's)."""
    import numpy as np

    first = recs[0]
    if len(recs) == 1:
        return first
    for p, r in zip(paths[1:], recs[1:]):
        same = (
            r.layout.n_taxels == first.layout.n_taxels
            and np.allclose(r.layout.positions, first.layout.positions)
            and np.allclose(r.layout.normals, first.layout.normals)
            and np.array_equal(np.asarray(r.channels, object), np.asarray(first.channels, object))
            and r.objects == first.objects
            and r.sensor == first.sensor
            and r.frames.shape[1:] == first.frames.shape[1:]
        )
        if not same:
            raise ValueError(
                f"{p}: not the same skin as {paths[0]} (layout, channels, objects, sensor "
                "options and frame shape must match)"
            )

    def cat(name, fill):
        arrs = [getattr(r, name) for r in recs]
        if all(a is None for a in arrs):
            return None
        return np.concatenate([fill(r) if a is None else np.asarray(a) for r, a in zip(recs, arrs)])

    T = lambda r: r.frames.shape[0]  # noqa: E731
    return first._replace(
        frames=np.concatenate([np.asarray(r.frames) for r in recs]),
        timestamps_ns=np.concatenate([np.asarray(r.timestamps_ns) for r in recs]),
        link_poses=cat("link_poses", lambda r: np.tile([0, 0, 0, 0, 0, 0, 1.0], (T(r), 1))),
        link_twists=cat("link_twists", lambda r: np.zeros((T(r), 6))),
        object_poses=cat("object_poses", None),
        object_twists=cat("object_twists", lambda r: np.zeros(np.shape(r.object_poses)[:2] + (6,))),
    )


def _start_layout(path, n):
    """The layout to start from: a press plan's ``start_layout`` or a calibrated layout."""
    from .io import layout_from_dict

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        d = doc["start_layout"] if doc.get("format") == "difftaxel.press_plan" else doc["layout"]
        lay = layout_from_dict(d)
    except OSError as e:
        raise ValueError(f"--start {path}: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(
            f"--start {path}: expected a press plan or a calibrated layout (JSON) ({e})"
        ) from None
    if lay.n_taxels != n:
        raise ValueError(f"--start {path}: {lay.n_taxels} taxels, the recordings have {n}")
    return lay


def _calibrate(args) -> int:
    import jax.numpy as jnp
    import numpy as np

    from ._files import atomic_write, check_output
    from .glove import GloveScene
    from .io import (
        layout_to_dict,
        metadata_to_dict,
        read_link_recording,
        read_recording,
        recording_kind,
    )
    from .skin import LinkLayout, LinkScene, SkinnedScene, calibrate_layout

    paths = list(args.recording)
    inputs = paths + ([args.start] if args.start else [])
    out = check_output(args.out, "--out", inputs=inputs)
    plan_out = None
    if args.next_presses:
        plan_out = check_output(args.next_presses, "--next-presses", inputs=inputs)
        if os.path.abspath(plan_out) == os.path.abspath(out):
            raise ValueError(f"--next-presses {args.next_presses}: is also the --out file")
    kinds = [recording_kind(p) for p in paths]
    kind = kinds[0]
    if len(paths) > 1 or args.start or plan_out:
        for p, k in zip(paths, kinds):
            if k != "link":
                raise ValueError(
                    f"{p}: a hand recording; several recordings, --start and --next-presses "
                    "apply to rigid-link recordings"
                )
    if kind == "link":
        rec = _merged_link_recordings(paths, [read_link_recording(p) for p in paths])
    else:
        rec = read_recording(paths[0])
    name = paths[0]
    if not rec.objects:
        raise ValueError(f"{name}: the recording has no objects (see --help)")
    if rec.sensor is None:
        raise ValueError(
            f"{name}: the recording stores no sensor options (the force model the fit "
            "needs: write it with sensor={...}, see --help)"
        )
    T = rec.frames.shape[0]
    bodies = _bodies(rec.objects, rec.object_poses, rec.object_twists)
    dt = _frame_period(rec.timestamps_ns)
    if kind == "link":
        prior, channels = rec.layout, rec.channels
        layout = prior if args.start is None else _start_layout(args.start, prior.n_taxels)
        link = rec.link_poses
        if link is None:
            link = np.tile([0, 0, 0, 0, 0, 0, 1.0], (T, 1))
        twist = None if rec.link_twists is None else jnp.asarray(rec.link_twists)
        rig = LinkScene(jnp.asarray(link), bodies, dt, twist)
    else:
        lbs, channels = rec.metadata.geometry_mapping, "xyz"
        layout = LinkLayout.from_poses(lbs.taxel_bind_poses)
        root = rec.root_poses
        if root is None:
            root = np.tile([0, 0, 0, 0, 0, 0, 1.0], (T, 1))
        rig = SkinnedScene(
            lbs, GloveScene(jnp.asarray(root), jnp.asarray(rec.joint_poses), bodies, dt)
        )
    frames = np.nan_to_num(np.asarray(rec.frames, float))  # unrecorded channels are ignored
    fit = calibrate_layout(
        _sensor(rec.sensor, layout.n_taxels, name),
        layout,
        rig,
        frames,
        channels=channels,
        holdout=args.holdout,
        steps_per_stage=args.steps,
        progress=True,
    )
    if kind == "link":
        doc = {
            "format": "difftaxel.layout",
            "version": 1,
            "layout": layout_to_dict(fit.layout),
            "identified": fit.identified.tolist(),
            "excited": fit.excited.tolist(),
            "std_position_m": fit.std_position.tolist(),
            "std_normal_deg": fit.std_normal_deg.tolist(),
        }
    else:
        new = lbs.replace(taxel_bind_poses=jnp.asarray(fit.layout.frames()))
        doc = metadata_to_dict(rec.metadata.replace(geometry_mapping=new))
    text = json.dumps(doc, indent=1)
    atomic_write(out, lambda fh: fh.write(text), "w")
    if plan_out:
        from .skin import next_presses

        try:
            nxt, info = next_presses(
                fit, prior, rig, frames, sensor=_sensor(rec.sensor, layout.n_taxels, name)
            )
        except ValueError as e:
            raise ValueError(f"--next-presses: {e}") from None
        c = np.asarray(nxt.bodies.poses)[:, 0, :3] if nxt.n_frames else np.zeros((0, 3))
        plan = {
            "format": "difftaxel.press_plan",
            "version": 1,
            "frame": "link",
            "sphere_radius_m": float(rig.bodies.shapes[0].radius),
            "centres_m": c.tolist(),
            "start_layout": layout_to_dict(info["start"]),
            "targeted": np.flatnonzero(info["targeted"]).tolist(),
            "searched": np.flatnonzero(info["searched"]).tolist(),
            "presses_so_far": int(T),
            "identified_fraction": float(fit.identified.mean()),
        }
        ptext = json.dumps(plan, indent=1)
        atomic_write(plan_out, lambda fh: fh.write(ptext), "w")
        print(
            f"{c.shape[0]} presses planned for {int((~fit.identified).sum())} taxels not identified "
            f"({len(plan['targeted'])} at estimated sites, {len(plan['searched'])} searched) -> "
            f"{plan_out}; record them, then calibrate every recording with --start {plan_out}"
        )
    moved = np.linalg.norm(fit.layout.positions - layout.positions, axis=1)
    r = fit.results
    print(f"loss {r[0].losses[0]:.4g} -> {r[-1].losses[-1]:.4g}")
    print(fit.report())
    idf = fit.identified
    med = float(np.median(moved[idf])) * 1e3 if idf.any() else 0.0
    what = "layout" if kind == "link" else "metadata"
    print(
        f"median move of the identified taxels {med:.3f} mm (max "
        f"{float(moved.max()) * 1e3:.3f} mm); calibrated {what} written to {out}"
    )
    return 0


CALIBRATE_EXAMPLE = """
Example file: `difftaxel demo --quick --no-plots --out demo` writes demo/session.npz, a
recording this command accepts: `difftaxel calibrate demo/session.npz --out cal.json`.
"""


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        prog="difftaxel", description="Differentiable tactile sensor models in JAX."
    )
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser(
        "demo",
        help="the main job: calibrate and identify a synthetic glove session",
        description="Generate a glove session on the default hand (a sphere pressed and slid "
        "over each fingertip pad, Hertz-like stiffness, hysteresis, noise), perturb the taxel "
        "bind poses (3 mm, 10 deg) and the sensor parameters, recover them by gradient descent, "
        "print true vs initial vs recovered values and write results.json, fit.npz, plots and "
        "session.npz (a recording `difftaxel calibrate` reads) to --out.",
        formatter_class=fmt,
    )
    demo.add_argument("--out", default="difftaxel-demo", help="output folder")
    demo.add_argument(
        "--steps", type=_positive(int, "steps"), default=400, help="optimiser steps per stage"
    )
    demo.add_argument(
        "--quick", action="store_true", help="60 steps per stage: fast, not converged"
    )
    demo.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    press = sub.add_parser(
        "press",
        help="print each probe's depth, contact normal and force under a sphere",
        description="Press a sphere into a square grid of probes (sensor link frame, probes "
        "in the z = 0 plane, sphere above) and print each touched probe's penetration, the "
        "surface normal and the KinematicTaxel normal force (stiffness 2000, exponent 1.5).",
        formatter_class=fmt,
    )
    press.add_argument("--grid", type=_positive(int, "grid"), default=7, help="probes per side")
    press.add_argument(
        "--pitch", type=_positive(float, "pitch"), default=0.003, help="probe pitch (m)"
    )
    press.add_argument(
        "--probe-radius", type=_positive(float, "radius"), default=0.002, help="probe radius (m)"
    )
    press.add_argument(
        "--sphere-radius", type=_positive(float, "radius"), default=0.01, help="sphere radius (m)"
    )
    press.add_argument(
        "--depth",
        type=_positive(float, "depth", strict=False),
        default=0.001,
        help="how far the sphere's surface passes the probe plane (m)",
    )
    press.add_argument("--all", action="store_true", help="print probes out of contact too")
    cal = sub.add_parser(
        "calibrate",
        help="fit taxel bind poses (a glove) or a skin layout (a rigid link) to a recording",
        description="Fit each taxel's position and normal (and tangent, with shear channels) "
        "to the recording's readings; report taxels never excited or not identifiable (they "
        "keep their initial values), standard deviations and a held-out check.",
        epilog=RECORDING_HELP + CALIBRATE_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cal.add_argument(
        "recording",
        nargs="+",
        help="NPZ recording (format below); several rigid-link recordings of one skin are "
        "fitted together",
    )
    cal.add_argument(
        "--start",
        default=None,
        metavar="JSON",
        help="rigid link: start from this layout (a --next-presses plan or a calibrated layout)",
    )
    cal.add_argument(
        "--next-presses",
        default=None,
        metavar="PLAN",
        help="rigid link, press recordings: write the next presses for the taxels not "
        "identified (JSON: sphere centres in the link frame, the layout to start from)",
    )
    cal.add_argument(
        "--out",
        default="calibrated_metadata.json",
        help="output JSON: calibrated metadata (glove) or layout (rigid link); never the "
        "recording; checked before the fit",
    )
    cal.add_argument(
        "--steps", type=_positive(int, "steps"), default=200, help="steps per smoothing stage"
    )
    cal.add_argument(
        "--holdout",
        type=_holdout,
        default=0.2,
        help="fraction of frames in [0, 1) kept out of the fit to check it (0.2)",
    )
    add_identify_parser(sub)
    return parser


def main(argv=None) -> int:
    """Run the command; returns the exit status. Errors in the user's files or values print one
    line ``difftaxel <command>: error: ...`` to stderr and return 2 (no traceback)."""
    if argv is None and threading.current_thread() is threading.main_thread():
        from ._files import stop_on_interrupt

        # before JAX is imported: Ctrl-C at any moment stops the command (exit 130) and
        # leaves no partial output (the package's own import is light; see difftaxel/__init__)
        name = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else ""
        stop_on_interrupt(f"difftaxel {name}: interrupted".replace("  ", " "))
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    import zipfile

    import jax

    jax.config.update("jax_enable_x64", True)  # application setting (the library never sets it)
    run = {"demo": _demo, "press": _press, "calibrate": _calibrate, "identify": identify}
    try:
        return run[args.command](args)
    except (ValueError, TypeError, OSError, EOFError, zipfile.BadZipFile) as e:
        msg = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, OSError) and e.filename:
            msg = f"{e.filename}: {e.strerror or msg}"
        print(f"difftaxel {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"difftaxel {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
