"""The ``difftaxel`` command at its edges: Ctrl-C at any moment stops the installed command
(subprocesses: exit 130, one line, nothing overwritten or left half-written); every error is
one line naming the file or flag, and saved raw-model parameters keep their time units (the
command's ``main`` in this process, as its entry point calls it: a subprocess would only add
an import of JAX per call; ``test_edges`` runs the installed command's errors)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from .test_edges import EXE, assert_one_line_error


def cli(*args):
    """``difftaxel ARGS`` through the command's ``main`` in this process: its exit status and
    what it printed, as a finished subprocess reports them."""
    from difftaxel.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def _start(*args):
    cmd = [EXE, *args] if EXE else [sys.executable, "-m", "difftaxel.cli", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("after", [0.3, 1.5, 5.0], ids=["importing", "starting", "fitting"])
def test_ctrl_c_stops_the_demo_and_keeps_the_previous_outputs(tmp_path, after):
    old = {"results.json": "old results", "loss.png": "old plot", "session.npz": "old data"}
    for name, text in old.items():
        (tmp_path / name).write_text(text)
    proc = _start("demo", "--quick", "--out", str(tmp_path))
    time.sleep(after)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 5.0  # at once, not after the current compilation
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "difftaxel demo: interrupted"
    assert sorted(os.listdir(tmp_path)) == sorted(old)  # no staging folder, no temporaries
    for name, text in old.items():
        assert (tmp_path / name).read_text() == text


def test_a_set_of_outputs_is_published_whole(tmp_path):
    from difftaxel._files import publish, staging_dir

    (tmp_path / "a.json").write_text("old a")
    (tmp_path / "b.png").write_text("old b")  # a member this run does not write: stale
    (tmp_path / "keep.txt").write_text("the user's")
    with pytest.raises(RuntimeError), staging_dir(str(tmp_path)) as stage:
        (open(os.path.join(stage, "a.json"), "w")).write("new a")
        raise RuntimeError("a failure before publishing")
    assert (tmp_path / "a.json").read_text() == "old a"
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.png", "keep.txt"]
    with staging_dir(str(tmp_path)) as stage:
        with open(os.path.join(stage, "a.json"), "w") as fh:
            fh.write("new a")
        written = publish(stage, str(tmp_path), ("a.json", "b.png"))
    assert [os.path.basename(p) for p in written] == ["a.json"]
    assert sorted(os.listdir(tmp_path)) == ["a.json", "keep.txt"]
    assert (tmp_path / "a.json").read_text() == "new a"


def _params_file(path, dt, offsets):
    doc = {
        "format": "difftaxel.rawmodel",
        "version": 1,
        "dt": dt,
        "softness": [20.0],
        "ref_counts": [1000.0],
        "sign": [1.0],
        "saturation": {"lo": [None], "hi": [None]},
        "params": {
            "offset": offsets,
            "force_at_ref": [15.0],
            "exponent": [1.3],
            "hysteresis_strength": [0.3],
            "hysteresis_tau": [0.2 if dt else 20.0],
        },
    }
    path.write_text(json.dumps(doc))
    return path


def _log(path, timed: bool, n=40):
    raw = 300 + 1500 * np.abs(np.sin(np.arange(n) / 6.0))
    force = 15.0 * ((raw - 300) / 1000.0) ** 1.3
    rows = np.c_[np.arange(n) * 0.01, raw, force] if timed else np.c_[raw, force]
    np.savetxt(path, rows, header="dt = 0.01" if timed else "")
    return path


def test_cli_errors_are_one_line_naming_the_file_or_flag(tmp_path):
    obj = tmp_path / "obj.npz"
    np.savez(obj, raw=np.array([1, "a"], dtype=object), force=np.zeros(2))
    assert_one_line_error(cli("identify", str(obj)), "obj.npz", "not a readable NPZ log")
    short = tmp_path / "short.txt"
    short.write_text("# dt = 0.01\n# raw force\n512 0.00\n530 0.05\n575 0.21\n")
    assert_one_line_error(cli("identify", str(short)), "short.txt", "training samples")
    minutes = tmp_path / "minutes.txt"
    minutes.write_text("# dt = 10 minutes\n512 0.00\n530 0.05\n")
    assert_one_line_error(cli("identify", str(minutes)), "minutes.txt", "line 1")
    timed, untimed = _log(tmp_path / "timed.txt", True), _log(tmp_path / "untimed.txt", False)
    assert_one_line_error(cli("identify", str(timed), str(untimed)), "untimed.txt", "time")
    two = _params_file(tmp_path / "two.json", 0.01, [[300.0], [310.0]])
    assert_one_line_error(cli("identify", str(timed), "--params", str(two)), "--offset-of")
    samples = _params_file(tmp_path / "samples.json", None, [300.0])
    r = cli("identify", str(timed), "--params", str(samples))
    assert_one_line_error(r, "timed.txt", "fitted in samples")
    # a recording with a string radius, and one without sensor options
    from .test_edges import small_recording

    good = tmp_path / "good.npz"
    small_recording(good)
    z = dict(np.load(good))
    h = json.loads(str(z["header"]))
    for name, change in (
        ("strradius.npz", {"objects": [{"kind": "sphere", "radius": "1 cm"}]}),
        ("nosensor.npz", {"sensor": {}}),
    ):
        np.savez(tmp_path / name, **{**z, "header": np.asarray(json.dumps({**h, **change}))})
    r = cli("calibrate", str(tmp_path / "strradius.npz"), "--out", str(tmp_path / "o.json"))
    assert_one_line_error(r, "strradius.npz", "objects[0].radius")
    r = cli("calibrate", str(tmp_path / "nosensor.npz"), "--out", str(tmp_path / "o.json"))
    assert_one_line_error(r, "nosensor.npz", "sensor options")
    assert not (tmp_path / "o.json").exists()


def test_saved_parameters_apply_to_a_log_without_time_at_the_fits_dt(tmp_path):
    timed, untimed = _log(tmp_path / "timed.txt", True), _log(tmp_path / "untimed.txt", False)
    params = _params_file(tmp_path / "p.json", 0.01, [300.0])
    a, b = cli("identify", str(timed), "--params", str(params)), None
    b = cli("identify", str(untimed), "--params", str(params))
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    assert "taken at the fit's dt = 0.01 s" in b.stdout

    def rmse(r):
        return r.stdout.split("(N): ")[-1].strip()

    assert rmse(a) == rmse(b)  # tau in seconds, not read as samples
