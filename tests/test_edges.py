"""Safe at the edges: files are never lost, every command-line error is one line naming the file
or flag (exit 2, no traceback), readers validate, and numeric corners behave.

Command-line cases run the installed ``difftaxel`` command in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import difftaxel as dt
from difftaxel._files import atomic_write, check_output
from difftaxel.io import read_recording, write_recording
from difftaxel.rawmodel import fit_raw_model, load_raw_log
from difftaxel.rollout import rollout
from difftaxel.sensors import ContactProbe, KinematicTaxel, make_inputs
from difftaxel.skinning import LBS, HandSkeletonRef, TactileMetadata

EXE = shutil.which("difftaxel") or ""


def cli(*args, cwd=None):
    cmd = [EXE, *args] if EXE else [sys.executable, "-m", "difftaxel.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600)


def assert_one_line_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in err, err
    last = err.splitlines()[-1]
    assert last.startswith("difftaxel"), err
    for n in needles:
        assert n in last, (n, last)


# ----------------------------------------------------------------------------- a recording


def small_recording(path, T=4, **over):
    N = 3
    rng = np.random.default_rng(0)
    seg = np.tile([0.0, 0, 0, 0, 0, 0, 1], (2, 1))
    tax = np.concatenate([rng.normal(0, 0.01, (N, 3)), np.tile([0, 0, 0, 1.0], (N, 1))], 1)
    lbs = LBS(
        segment_bind_poses=seg,
        taxel_bind_poses=tax,
        weights=np.tile([1.0, 0, 0, 0], (N, 1)),
        segment_indices=np.zeros((N, 4), np.int32),
    )
    meta = TactileMetadata(lbs, HandSkeletonRef((1, 2)))
    kw = dict(
        root_poses=np.tile([0.0, 0, 0, 0, 0, 0, 1], (T, 1)),
        objects=[{"kind": "sphere", "radius": 0.01}],
        object_poses=np.tile([0.0, 0, 0.0105, 0, 0, 0, 1], (T, 1, 1)),
        sensor={"probe_radius": np.float32(0.002), "normal_stiffness": np.float64(500.0)},
    )
    kw.update(over)
    write_recording(
        path,
        meta,
        rng.normal(size=(T, N, 3)) * 0.01,
        np.tile(seg, (T, 1, 1)),
        np.arange(T, dtype=np.int64) * 10_000_000,
        **kw,
    )
    return meta


def test_writes_cannot_lose_an_existing_file(tmp_path):
    p = tmp_path / "rec.npz"
    p.write_bytes(b"precious")
    small_recording(p)  # numpy scalars in the sensor options serialise
    rec = read_recording(p)
    # the options given, and KinematicTaxel's defaults for the rest, stored: the file says
    # what a fit of it uses
    assert rec.sensor == {
        "probe_radius": pytest.approx(0.002),
        "normal_stiffness": 500.0,
        "normal_damping": 1.0,
        "normal_exponent": 1.0,
        "shear_scalar": 1.0,
        "twist_scalar": 1.0,
    }
    before = p.read_bytes()
    with pytest.raises(ValueError, match=r"sensor\.probe_radius: expected a number"):
        small_recording(p, sensor={"probe_radius": object()})
    assert p.read_bytes() == before
    with pytest.raises(RuntimeError):
        atomic_write(p, lambda fh: (fh.write(b"half"), (_ for _ in ()).throw(RuntimeError())))
    assert p.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["rec.npz"]  # no temporary file left behind
    with pytest.raises(ValueError, match="is the input file"):
        check_output(p, "--out", inputs=[p])
    with pytest.raises(ValueError, match="does not exist"):
        check_output(tmp_path / "nodir" / "x.json", "--out")
    with pytest.raises(ValueError, match="is a folder"):
        check_output(tmp_path, "--out")


def _bad_recordings(tmp_path):
    good = tmp_path / "good.npz"
    small_recording(good)
    z = dict(np.load(good))
    out = {}

    def save(name, **arrays):
        p = tmp_path / f"{name}.npz"
        np.savez(p, **arrays)
        out[name] = p

    for k in ("header", "frames", "joint_poses", "timestamps_ns"):
        save(f"missing_{k}", **{a: v for a, v in z.items() if a != k})
    h = json.loads(str(z["header"]))
    save("version99", **{**z, "header": np.asarray(json.dumps({**h, "version": 99}))})
    save("no_object_poses", **{a: v for a, v in z.items() if a != "object_poses"})
    save("bad_root_shape", **{**z, "root_poses": z["root_poses"][:2]})
    save("bad_object_shape", **{**z, "object_poses": z["object_poses"][:, :, :6]})
    zq = z["object_poses"].copy()
    zq[..., 3:] = 0.0
    save("zero_quaternion", **{**z, "object_poses": zq})
    seg = json.loads(str(z["header"]))
    seg["metadata"]["geometry_mapping"]["segment_indices"][0][0] = 1.5
    save("fractional_index", **{**z, "header": np.asarray(json.dumps(seg))})
    raw = good.read_bytes()
    (tmp_path / "truncated.npz").write_bytes(raw[: len(raw) // 2])
    out["truncated"] = tmp_path / "truncated.npz"
    flipped = bytearray(raw)
    flipped[len(raw) // 3] ^= 0xFF
    (tmp_path / "flipped.npz").write_bytes(bytes(flipped))
    out["flipped"] = tmp_path / "flipped.npz"
    (tmp_path / "text.npz").write_text("not a zip")
    out["not_npz"] = tmp_path / "text.npz"
    return good, out


def test_reader_refuses_every_broken_recording_naming_the_file(tmp_path):
    good, bad = _bad_recordings(tmp_path)
    read_recording(good)
    for name, p in bad.items():
        with pytest.raises(ValueError) as e:
            read_recording(p)
        assert str(e.value).startswith(str(p)), (name, str(e.value))
    with pytest.raises(ValueError, match="no such file"):
        read_recording(tmp_path / "absent.npz")
    with pytest.raises(TypeError, match=r"joints\[1\]: expected an int"):
        HandSkeletonRef((1, 2.7))


@pytest.mark.slow  # 10-35 s; CI runs it with the slow cases
def test_cli_errors_are_one_line_and_exit_2(tmp_path):
    good, bad = _bad_recordings(tmp_path)
    for name in ("truncated", "missing_frames", "version99", "fractional_index"):
        r = cli("calibrate", str(bad[name]), "--out", str(tmp_path / "o.json"))
        assert_one_line_error(r, str(bad[name]))
    r = cli("calibrate", str(tmp_path / "absent.npz"), "--out", str(tmp_path / "o.json"))
    assert_one_line_error(r, "absent.npz", "no such file")
    before = good.read_bytes()
    r = cli("calibrate", str(good), "--out", str(good))
    assert_one_line_error(r, "--out", "input file")
    assert good.read_bytes() == before
    r = cli("calibrate", str(good), "--out", str(tmp_path / "nodir" / "x.json"))
    assert_one_line_error(r, "--out", "does not exist")
    r = cli("demo", "--quick", "--out", str(good))
    assert_one_line_error(r, "--out", "not a folder")
    assert good.read_bytes() == before
    r = cli("press", "--pitch", "0")
    assert r.returncode == 2 and "--pitch" in r.stderr and "Traceback" not in r.stderr
    log = tmp_path / "log.txt"
    log.write_text("# dt = 0.01\n" + "".join(f"{500 + i} {0.01 * i}\n" for i in range(20)))
    r = cli("identify", str(log), "--train-fraction", "1.5")
    assert r.returncode == 2 and "--train-fraction" in r.stderr and "Traceback" not in r.stderr
    const = tmp_path / "const.txt"
    const.write_text("# dt = 0.01\n" + "".join(f"512 {0.01 * i}\n" for i in range(20)))
    assert_one_line_error(cli("identify", str(const)), "constant")
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("1 2\nthree four\n")
    assert_one_line_error(cli("identify", str(garbage)), str(garbage), "line 2")
    help_cal = cli("calibrate", "--help").stdout
    assert "difftaxel demo --quick" in help_cal and "session.npz" in help_cal
    assert "# dt = 0.01" in cli("identify", "--help").stdout


def test_raw_log_comments_fraction_and_constant(tmp_path):
    p = tmp_path / "log.txt"
    rows = "".join(f"{500 + 3 * i} {0.02 * i}\n" for i in range(30))
    p.write_text("# adc width = 12 bits\n# dt = 0.005 s\n# raw force\n" + rows)
    log = load_raw_log(p)
    assert log.dt == 0.005 and log.raw.shape == (30, 1)
    with pytest.raises(ValueError, match="train_fraction"):
        fit_raw_model(log, train_fraction=1.5, steps=1)
    flat = log._replace(raw=np.full_like(log.raw, 512.0))
    with pytest.raises(ValueError, match=r"raw: taxel\(s\) \[0\] read a constant"):
        fit_raw_model(flat, steps=1)
    (tmp_path / "nodt.txt").write_text(rows)
    assert load_raw_log(tmp_path / "nodt.txt").dt is None  # sample units
    (tmp_path / "negdt.txt").write_text("# dt = -1\n" + rows)
    with pytest.raises(
        ValueError, match=r"negdt.txt: line 1: expected .# dt = PERIOD. with PERIOD > 0"
    ):
        load_raw_log(tmp_path / "negdt.txt")


# ----------------------------------------------------------------------------- numeric corners


def test_smooth_contact_flag_is_exactly_off_far_from_contact():
    probe = ContactProbe(probe_local_pos=[[0.0, 0, 0]], probe_radius=0.002, smoothing=1e-4)
    reads = []
    for z in (0.1, 10.0, 1000.0):
        b = dt.Bodies((dt.Sphere(radius=0.01),), np.array([[0.0, 0, z, 0, 0, 0, 1]]))
        inp = make_inputs(np.array([0.0, 0, 0, 0, 0, 0, 1]), b)
        reads.append(float(probe.step(probe.init_state(), inp)[1].measured[0]))
    assert reads == [0.0, 0.0, 0.0]
    b = dt.Bodies((dt.Sphere(radius=0.01),), np.array([[0.0, 0, 0.0105, 0, 0, 0, 1]]))
    on = float(
        probe.step(probe.init_state(), make_inputs(np.r_[0, 0, 0, 0, 0, 0, 1.0], b))[1].measured[0]
    )
    assert on > 0.99  # 1.5 mm penetration, threshold 0.1 mm


@pytest.mark.parametrize(
    "shape",
    [
        dt.Sphere(radius=0.01),
        dt.Capsule(radius=0.01, length=0.02),
        dt.Cylinder(radius=0.01, height=0.02),
    ],
    ids=["sphere", "capsule", "cylinder"],
)
def test_probe_at_the_centre_has_a_direction_and_bounded_gradient(shape):
    kt = KinematicTaxel(probe_local_pos=[[0.0, 0, 0]], probe_radius=0.002)
    b0 = dt.Bodies((shape,), np.array([[0.0, 0, 0, 0, 0, 0, 1]]))

    def fz(p):
        inp = make_inputs(np.r_[0, 0, 0, 0, 0, 0, 1.0], b0).replace(bodies=b0.with_state(p[None]))
        return jnp.sum(kt.step(kt.init_state(), inp)[1].ground_truth.force)

    p = jnp.array([0.0, 0, 0, 0, 0, 0, 1])
    f = float(fz(p))
    g = jax.grad(fz)(p)
    assert abs(f) > 1.0  # a defined direction: the deep probe is pushed out
    assert np.all(np.isfinite(g)) and float(jnp.max(jnp.abs(g))) < 1e6


def test_bodies_with_state_refuses_non_unit_quaternions_on_the_host():
    b = dt.Bodies((dt.Box(size=[0.1, 0.1, 0.1]),), np.array([[0.0, 0, 0, 0, 0, 0, 1]]))
    with pytest.raises(ValueError, match=r"poses\[..., 3:\].*unit quaternions"):
        b.with_state(np.array([[0.0, 0, 0, 0, 0, 0, 2.0]]))
    with pytest.raises(ValueError, match=r"poses\[..., 3:\].*unit quaternions"):
        b.with_state(np.array([[0.0, 0, 0, 0, 0, 0, 0.0]]))
    with pytest.raises(ValueError, match=r"poses: expected shape \(..., 1, 7\)"):
        b.with_state(np.zeros((2, 7)))
    jax.jit(lambda p: b.with_state(p).poses)(jnp.array([[0.0, 0, 0, 0, 0, 0, 2.0]]))  # traced


def test_rollout_names_the_missing_time_axis():
    kt = KinematicTaxel(probe_local_pos=[[0.0, 0, 0]], probe_radius=0.002)
    b = dt.Bodies((dt.Sphere(radius=0.01),), np.array([[0.0, 0, 0.0105, 0, 0, 0, 1]]))
    inp = make_inputs(np.r_[0, 0, 0, 0, 0, 0, 1.0], b)
    with pytest.raises(ValueError, match="inputs_seq: expected a leading time axis"):
        rollout(kt, kt.init_state(), inp)


# ----------------------------------------------------------------------------- what a person sees


def test_press_table_agrees_with_its_summary(capsys):
    from difftaxel.cli import main

    assert main(["press", "--depth", "0.001"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "pen_mm" in out[2] and "negative = compression" in out[1]
    rows = [list(map(float, line.split())) for line in out[3:-1]]
    summary = json.loads(out[-1])
    assert summary["surface_press_m"] == 0.001
    assert summary["total_Fz_N"] == pytest.approx(sum(r[6] for r in rows), rel=1e-3)
    assert all(r[6] <= 0 for r in rows) and summary["total_Fz_N"] < 0
    # the deepest probe reads the surface press plus its own radius
    assert max(r[2] for r in rows) == pytest.approx(3.0, abs=1e-3)


def test_grid_reports_the_gridded_shapes_box():
    box = dt.Box(size=[0.02, 0.03, 0.004])
    g = dt.GridSDF.from_shape(box)
    lo, hi = g.aabb_local()
    np.testing.assert_allclose(lo, [-0.01, -0.015, -0.002])
    np.testing.assert_allclose(hi, [0.01, 0.015, 0.002])
    raw = dt.GridSDF(values=g.values, scale=g.scale, offset=g.offset)  # no bounds: the grid
    assert np.all(np.asarray(raw.aabb_local()[1]) > hi)


def test_contact_latch_tie_rule_is_strict_in_step_and_rollout():
    """A depth exactly equal to a threshold does not exceed it (Genesis's strict ``>``), the
    same in one jitted step and in a rollout: the values here are exact in binary."""
    probe = ContactProbe(
        probe_local_pos=[[0.0, 0, 0]], probe_radius=0.5, contact_threshold=0.375,
        release_threshold=0.25,
    )  # fmt: skip
    plane = dt.Bodies((dt.Plane(),), np.array([[0.0, 0, 0, 0, 0, 0, 1]]))

    def at(h):  # plane surface at height h: depth = 0.5 + h (exact for these h)
        return make_inputs(
            np.r_[0, 0, 0, 0, 0, 0, 1.0], plane.with_state(np.array([[0, 0, h, 0, 0, 0, 1.0]]))
        )

    seq = [at(-0.0625), at(-0.25), at(-0.125), at(-0.25)]  # depths 0.4375, 0.25, 0.375, 0.25
    st, flags = probe.init_state(), []
    step = jax.jit(probe.step)
    for inp in seq:
        st, r = step(st, inp)
        flags.append(bool(r.ground_truth[0]))
    assert flags == [True, False, False, False]  # 0.25 == release: released; 0.375 == contact: off
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *seq)
    _, rr = rollout(probe, probe.init_state(), stacked)
    assert np.asarray(rr.ground_truth)[:, 0].tolist() == flags


def test_options_that_would_fail_at_step_time_are_refused_at_construction():
    """Per-channel imperfection options of the wrong length name the option when the sensor
    is built (not a broadcasting error in the first step); a gain range reaching inf and a
    press plan with no frame period are refused."""
    from difftaxel.skin import LinkLayout, press_plan

    grid = np.zeros((4, 3))
    with pytest.raises(ValueError, match=r"KinematicTaxel\.imperfections\.noise: expected .*\[6\]"):
        KinematicTaxel(probe_local_pos=grid, imperfections=dt.Imperfections(noise=[0.1, 0.2]))
    k = KinematicTaxel(probe_local_pos=grid, imperfections=dt.Imperfections(noise=[0.1] * 6))
    with pytest.raises(ValueError, match=r"imperfections\.bias: .*got shape \(3, 6\)"):
        k.replace(imperfections=dt.Imperfections(bias=np.zeros((3, 6))))
    ok = k.replace(imperfections=dt.Imperfections(resolution=np.full((4, 6), 1e-3)))
    assert ok.imperfections.resolution.shape == (4, 6)
    with pytest.raises(ValueError, match=r"probe_gain_resample_range: expected finite"):
        KinematicTaxel(probe_local_pos=grid, probe_gain_resample_range=(0.5, np.inf))
    lay = LinkLayout.make(grid + np.arange(4)[:, None] * 1e-3, np.tile([0, 0, 1.0], (4, 1)))
    for bad in (0.0, -0.01, np.nan):
        with pytest.raises(ValueError, match=r"dt: expected a frame period > 0"):
            press_plan(lay, dt=bad)
