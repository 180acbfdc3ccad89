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

LOG_HELP = """\
LOG is a raw-reading log of one or more taxels against a reference force (a load cell):
  text: two columns "raw force" (ADC counts, N) or three "time raw force" (s), '#' comments,
        an optional header line "# dt = 0.01"
  NPZ:  raw [T] or [T, N], force (same shape), optionally dt (s) or time [T] (s)
Raw values may be in any unit (ADC counts, volts): the fit takes its scale from the data.
Without time information (and without --dt) the log is in samples: hysteresis_tau is then in
samples. A '# dt' header takes s, ms or us ("# dt = 10 ms"). Several LOGs of the same element
are fitted together: one curve, one offset per log.
--save writes the fitted parameters (JSON, with the fit's dt); --params applies saved ones to
LOGs without fitting (a log without time is taken at the fit's dt; parameters fitted in
samples apply only to logs without time; a fit of several logs needs --offset-of K);
--predict writes predicted forces (NPZ: logI_predicted, logI_force, logI_raw).
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

    out = check_output(args.out, "--out", inputs=[args.recording])
    kind = recording_kind(args.recording)
    rec = read_link_recording(args.recording) if kind == "link" else read_recording(args.recording)
    if not rec.objects:
        raise ValueError(f"{args.recording}: the recording has no objects (see --help)")
    if rec.sensor is None:
        raise ValueError(
            f"{args.recording}: the recording stores no sensor options (the force model the fit "
            "needs: write it with sensor={...}, see --help)"
        )
    T = rec.frames.shape[0]
    bodies = _bodies(rec.objects, rec.object_poses, rec.object_twists)
    dt = _frame_period(rec.timestamps_ns)
    if kind == "link":
        layout, channels = rec.layout, rec.channels
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
        _sensor(rec.sensor, layout.n_taxels, args.recording),
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


def _saturation(text):
    t = text.strip().lower()
    if t in ("auto", "none"):
        return None if t == "none" else "auto"
    try:
        lo, hi = (None if v.strip().lower() in ("", "none") else float(v) for v in t.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected 'auto', 'none' or 'LO,HI' counts, got {text!r}"
        ) from None
    return (lo, hi)


def _identify(args) -> int:
    import numpy as np

    from ._files import atomic_write, check_output
    from .rawmodel import fit_raw_model, load_raw_log, load_raw_params, predict, save_raw_params

    inputs = list(args.log) + ([args.params] if args.params else [])
    for flag, path in (("--save", args.save), ("--predict", args.predict)):
        if path is not None:
            check_output(path, flag, inputs=inputs)
    if args.save and args.predict and os.path.abspath(args.save) == os.path.abspath(args.predict):
        raise ValueError(f"--predict {args.predict}: is also the --save file; choose another path")
    logs = [load_raw_log(p, dt=args.dt) for p in args.log]
    if args.params:
        if args.save:
            raise ValueError("--save: nothing is fitted with --params; drop one of them")
        model = load_raw_params(args.params)
        L = np.shape(model.params["offset"])[0] if np.ndim(model.params["offset"]) == 2 else 1
        if L > 1 and args.offset_of is None:
            raise ValueError(
                f"--offset-of: {args.params} holds {L} offsets (one per fitted log); say whose "
                f"offset applies to these logs (0..{L - 1})"
            )
        if args.offset_of is not None and not 0 <= args.offset_of < L:
            raise ValueError(f"--offset-of: expected 0..{L - 1}, got {args.offset_of}")
        which = args.offset_of if L > 1 else None
        print(
            f"applying {args.params}: "
            + (f"the offset of fitted log {which}" if L > 1 else "the fitted log's offset")
            + (
                "; hysteresis_tau in samples"
                if model.dt is None
                else f"; hysteresis_tau in s (fitted at dt = {model.dt:g} s)"
            )
        )
        preds = []
        for p, g in zip(args.log, logs):
            try:
                pr = predict(model, g, which)
            except ValueError as e:
                raise ValueError(f"{p}: {e}") from None
            if model.dt is not None and g.dt is None:
                print(f"{p}: no time information: taken at the fit's dt = {model.dt:g} s")
            preds.append(pr)
            lo, hi = model.saturation.masks(g.raw)
            free = ~(lo | hi)
            sq = np.sum(np.where(free, (pr - g.force) ** 2, 0.0), 0)
            rmse = np.sqrt(sq / np.maximum(free.sum(0), 1))
            print(
                f"{p}: RMSE against the reference on the {int(free.sum())} unsaturated samples "
                f"(N): {np.array2string(rmse, precision=4)}"
            )
    else:
        f = fit_raw_model(
            logs if len(logs) > 1 else logs[0],
            steps=args.steps,
            train_fraction=args.train_fraction,
            sign=args.sign,
            saturation=args.saturation,
            delay=args.delay,
        )
        sat = f.saturation
        print(
            f"sign: counts {'rise' if f.sign[0] > 0 else 'fall'} with force"
            + ("" if np.all(f.sign == f.sign[0]) else f" (per taxel {f.sign.tolist()})")
            + f"; saturation lo {sat.lo.tolist()} hi {sat.hi.tolist()} counts, "
            f"{f.n_censored.tolist()} censored samples, {f.settle} settling samples masked after each"
        )
        print(f"{'taxel':>5} " + " ".join(f"{k:>24s}" for k in f.params))
        N = logs[0].raw.shape[1]
        for i in range(N):
            cells = [
                f"{float(np.asarray(f.params[k])[..., i].ravel()[0]):12.5g} +- "
                f"{float(np.asarray(f.std[k])[..., i].ravel()[0]):9.2g}"
                for k in f.params
            ]
            print(f"{i:>5} " + " ".join(cells))
        if len(logs) > 1:
            print(
                f"offsets per log (raw units): {np.array2string(f.params['offset'], precision=4)}"
            )
        unit = "samples" if f.dt is None else "s"
        print(
            f"(+- sandwich standard deviations, inf where the data does not determine a "
            f"parameter; offset in raw units, hysteresis_tau in {unit}, delay in samples)"
        )
        for w in f.warnings:
            print(f"warning: {w}")
        print(f"training residual std (N): {np.array2string(f.residual_std, precision=4)}")
        if f.held_out_rmse is not None:
            print(f"held-back RMSE (N): {np.array2string(f.held_out_rmse, precision=4)}")
        preds = [f.predict(g, i if len(logs) > 1 else None) for i, g in enumerate(logs)]
        if args.save:
            save_raw_params(args.save, f)
            print(f"parameters written to {args.save}")
    if args.predict:
        arrays = {}
        for i, (g, pr) in enumerate(zip(logs, preds)):
            arrays[f"log{i}_predicted"] = pr
            arrays[f"log{i}_force"] = g.force
            arrays[f"log{i}_raw"] = g.raw
        atomic_write(args.predict, lambda fh: np.savez(fh, **arrays))
        print(f"predictions written to {args.predict}")
    return 0


def _positive(kind, name, strict=True):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if not (v > 0 if strict else v >= 0) or v != v:
            rel = "> 0" if strict else ">= 0"
            raise argparse.ArgumentTypeError(f"expected {rel}, got {text}")
        return v

    parse.__name__ = name
    return parse


def _fraction_in(low_open: bool):
    """A parser of a fraction in (0, 1] (``low_open``) or in [0, 1)."""

    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        ok = 0.0 < v <= 1.0 if low_open else 0.0 <= v < 1.0
        if not ok:
            span = "(0, 1]" if low_open else "[0, 1)"
            raise argparse.ArgumentTypeError(f"expected a fraction in {span}, got {text}")
        return v

    return parse


_fraction = _fraction_in(low_open=True)
_holdout = _fraction_in(low_open=False)


CALIBRATE_EXAMPLE = """
Example file: `difftaxel demo --quick --no-plots --out demo` writes demo/session.npz, a
recording this command accepts: `difftaxel calibrate demo/session.npz --out cal.json`.
"""

IDENTIFY_EXAMPLE = """
The first lines of a text log (numpy.savetxt writes one; a fit needs a few hundred samples
that press the taxel across its force range, at least 14 in its training part):
  # dt = 0.01
  # raw force
  512 0.00
  530 0.05
  575 0.21
  ...
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
    cal.add_argument("recording", help="NPZ recording (format below)")
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
    ident = sub.add_parser(
        "identify",
        help="fit the raw-reading model (counts -> N) to a log",
        description="Fit sign, offset, curve, exponent, hysteresis (and optionally a delay) per "
        "taxel, with ADC saturation detected and censored; print values with sandwich "
        "(autocorrelation-consistent) standard deviations.",
        epilog=LOG_HELP + IDENTIFY_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ident.add_argument("log", nargs="+", help="text or NPZ log(s) (format below)")
    ident.add_argument(
        "--dt",
        type=_positive(float, "dt"),
        default=None,
        help="sample period (s) if not in the log (optional)",
    )
    ident.add_argument(
        "--steps", type=_positive(int, "steps"), default=1500, help="optimiser steps (1500)"
    )
    ident.add_argument(
        "--train-fraction",
        type=_fraction,
        default=0.7,
        help="fraction in (0, 1] used for fitting; the rest validates (0.7)",
    )
    ident.add_argument(
        "--sign",
        choices=("auto", "increasing", "decreasing"),
        default="auto",
        help="how counts move with force: detected (auto) or declared (checked against the data)",
    )
    ident.add_argument(
        "--saturation",
        type=_saturation,
        default="auto",
        help="ADC limits: auto (detected), none, or LO,HI counts (either may be empty)",
    )
    ident.add_argument("--delay", action="store_true", help="also fit a channel delay (samples)")
    ident.add_argument("--save", default=None, metavar="PARAMS", help="write the fit (JSON)")
    ident.add_argument(
        "--params", default=None, metavar="PARAMS", help="apply saved parameters, no fit"
    )
    ident.add_argument(
        "--offset-of",
        type=_positive(int, "index", strict=False),
        default=None,
        metavar="K",
        help="with --params from a fit of several logs: apply fitted log K's offset",
    )
    ident.add_argument(
        "--predict", default=None, metavar="OUT", help="write predicted forces (NPZ)"
    )
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
    run = {"demo": _demo, "press": _press, "calibrate": _calibrate, "identify": _identify}
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
