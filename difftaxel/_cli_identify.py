"""The ``difftaxel identify`` command: raw-reading models fitted to a user's logs (one scalar
channel per taxel against a load cell, or three-axis skins against a force/torque sensor on its
own clock)."""

from __future__ import annotations

import argparse
import os

from ._cli_args import fraction as _fraction
from ._cli_args import positive as _positive

__all__ = ["identify", "add_identify_parser"]

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

TRIAXIAL_HELP = """
THREE-AXIS SKINS (--reference): each LOG is one session of a three-axis skin, paired in order
with a --reference force/torque log of the same session, each on its own clock:
  raw log, text: "time b1x b1y b1z b2x b2y b2z ..." per line (s, then 3 raw values per taxel,
                 any unit, e.g. uT); NPZ: time [T], raw [T, N, 3]
  reference, text: "time Fx Fy Fz Tx Ty Tz" per line (s, N, N m: the load on the array, in the
                 force/torque sensor's frame); NPZ: time [S], wrench [S, 6]
  --positions: text, "x y z" per taxel (m, taxel centres in the sensor frame; taxel axes are
                 the sensor's)
Every session starts with --tare seconds at rest. One taxel is pressed at a time (found from the
torque). The reference's lag (its timestamps minus the skin's) is estimated per session and
printed with its standard deviation. --save writes the model (JSON); --params applies a saved
model to LOGs (no --reference needed; each LOG's first --tare seconds must be at rest);
--predict writes forces (NPZ: logI_time, logI_forces [T, N, 3] in N, taxel axes).
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

TRIAXIAL_EXAMPLE = """
The first lines of a three-axis raw log and of its reference (2 x 2 array, 88 Hz and 115 Hz):
  # time b1x b1y b1z b2x b2y b2z b3x b3y b3z b4x b4y b4z
  0.0000 -1523.1 2210.4 -870.2 ...
  # time Fx Fy Fz Tx Ty Tz
  0.0600 0.012 -0.004 0.021 0.00001 -0.00002 0.00000
`difftaxel identify --example-files DIR` writes four such sessions of a synthetic 2 x 2
magnetic array (its answer known), and positions.txt; then
  difftaxel identify DIR/session0_raw.txt DIR/session1_raw.txt --reference DIR/session0_ft.txt
      DIR/session1_ft.txt --positions DIR/positions.txt --save model.json
  difftaxel identify DIR/session3_raw.txt --params model.json --predict forces.npz
"""


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


def _identify_scalar(args) -> int:
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


def identify(args) -> int:
    """Run ``difftaxel identify`` (scalar logs, or three-axis skins with a reference)."""
    if args.example_files is not None:
        from .rawmodel.standins import write_example_files

        paths = write_example_files(args.example_files)
        print(f"{len(paths)} example files written to {args.example_files}")
        return 0
    if not args.log:
        raise ValueError("LOG: expected one or more logs (or --example-files DIR)")
    if args.reference is not None or args.positions is not None or _is_triaxial(args.params):
        return _identify_triaxial(args)
    return _identify_scalar(args)


def _is_triaxial(params) -> bool:
    """Whether ``--params`` names a saved three-axis model (unreadable files go to the scalar
    path, whose reader names the problem)."""
    import json

    if params is None:
        return False
    try:
        with open(params, encoding="utf-8") as fh:
            return json.load(fh).get("format") == "difftaxel.triaxial"
    except (OSError, ValueError, AttributeError):
        return False


def _read_positions(path):
    import numpy as np

    p = os.fspath(path)
    if not os.path.isfile(p):
        raise ValueError(f"{p}: no such file")
    try:
        a = np.loadtxt(p, ndmin=2, comments="#")
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{p}: expected 'x y z' per taxel (m) ({' '.join(str(e).split())[:80]})"
        ) from None
    if a.ndim != 2 or a.shape[1] != 3 or not np.all(np.isfinite(a)):
        raise ValueError(f"{p}: expected 'x y z' per taxel (m), got shape {a.shape}")
    return a


def _identify_triaxial(args) -> int:
    import numpy as np

    from ._files import atomic_write, check_output
    from .rawmodel import (
        fit_triaxial,
        load_triaxial,
        load_vector_log,
        load_wrench_log,
        predict_triaxial,
        save_triaxial,
    )

    inputs = (
        list(args.log)
        + list(args.reference or [])
        + [x for x in (args.params, args.positions) if x]
    )
    for flag, path in (("--save", args.save), ("--predict", args.predict)):
        if path is not None:
            check_output(path, flag, inputs=inputs)
    if args.save and args.predict and os.path.abspath(args.save) == os.path.abspath(args.predict):
        raise ValueError(f"--predict {args.predict}: is also the --save file; choose another path")
    for flag, bad in (
        ("--delay", args.delay),
        ("--offset-of", args.offset_of is not None),
        ("--dt", args.dt is not None),
    ):
        if bad:
            raise ValueError(
                f"{flag}: applies to scalar logs only, not with --reference/--positions"
            )
    logs = [load_vector_log(p) for p in args.log]
    if args.params:
        if args.save:
            raise ValueError("--save: nothing is fitted with --params; drop one of them")
        model = load_triaxial(args.params)
        tau = "none" if model.tau is None else f"{model.tau:.4g} s"
        print(
            f"applying {args.params}: degree {model.degree}, creep tau {tau}, tare {model.tare} s"
        )
        tare = model.tare
    else:
        if not args.reference:
            raise ValueError("--reference: a fit needs one force/torque log per LOG (see --help)")
        if len(args.reference) != len(logs):
            raise ValueError(
                f"--reference: expected {len(logs)} files (one per LOG), got {len(args.reference)}"
            )
        if args.positions is None:
            raise ValueError("--positions: a fit needs the taxel centres (m, sensor frame)")
        refs = [load_wrench_log(p) for p in args.reference]
        pos = _read_positions(args.positions)
        if pos.shape[0] != logs[0].n_taxels:
            raise ValueError(
                f"--positions {args.positions}: {pos.shape[0]} taxels, {args.log[0]} has {logs[0].n_taxels}"
            )
        fit = fit_triaxial(
            logs,
            refs,
            pos,
            tare=args.tare,
            validation=1 - args.train_fraction if args.train_fraction < 1 else 0.25,
        )
        print(fit.report())
        for p, o, so in zip(args.log, fit.offsets, fit.offset_std):
            print(
                f"{p}: offset (raw units) {np.array2string(o.ravel(), precision=1)} +- max {so.max():.2g}"
            )
        model = fit.model
        if args.save:
            save_triaxial(args.save, fit)
            print(f"model written to {args.save}")
        tare = args.tare
    preds = [predict_triaxial(model, g) for g in logs]
    for p, g, f in zip(args.log, logs, preds):
        print(
            f"{p}: {g.raw.shape[0]} samples, predicted force up to {np.abs(f).max():.3g} N (tare {tare} s)"
        )
    if args.predict:
        arrays = {}
        for i, (g, f) in enumerate(zip(logs, preds)):
            arrays[f"log{i}_time"] = g.time
            arrays[f"log{i}_forces"] = f
        atomic_write(args.predict, lambda fh: np.savez(fh, **arrays))
        print(f"predictions written to {args.predict}")
    return 0


def add_identify_parser(sub) -> None:
    """Add the ``identify`` command and its flags to ``sub`` (argparse subparsers)."""
    ident = sub.add_parser(
        "identify",
        help="fit the raw-reading model (counts -> N) to a log",
        description="Fit sign, offset, curve, exponent, hysteresis (and optionally a delay) per "
        "taxel, with ADC saturation detected and censored; print values with sandwich "
        "(autocorrelation-consistent) standard deviations.",
        epilog=LOG_HELP + IDENTIFY_EXAMPLE + TRIAXIAL_HELP + TRIAXIAL_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ident.add_argument("log", nargs="*", help="text or NPZ log(s) (format below)")
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
    ident.add_argument(
        "--reference",
        nargs="+",
        default=None,
        metavar="FT",
        help="three-axis skins: force/torque logs, one per LOG (format below)",
    )
    ident.add_argument(
        "--positions", default=None, metavar="XYZ", help="three-axis skins: taxel centres (m)"
    )
    ident.add_argument(
        "--example-files",
        default=None,
        metavar="DIR",
        help="write example three-axis logs (a synthetic 2 x 2 array) into DIR and stop",
    )
    ident.add_argument(
        "--tare",
        type=_positive(float, "tare"),
        default=0.5,
        help="three-axis skins: seconds at rest at the start of every log (0.5)",
    )
