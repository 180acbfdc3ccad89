"""The notebooks run at reduced size (an error fails the suite); the command line works."""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest

from difftaxel.cli import main

NB = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


def _notebooks():
    for p in sorted(NB.glob("*.ipynb")):
        # slow cases (CI runs them): the MJX notebook needs the optional extra and compiles a
        # whole hand; the bind-pose calibration notebook takes about 20 s at reduced size
        slow = "mjx" in p.name or "calibrate_bind_poses" in p.name
        marks = [pytest.mark.slow] if slow else []
        yield pytest.param(p.name, marks=marks, id=p.name)


@pytest.mark.parametrize("name", list(_notebooks()))
def test_notebook_runs(name, monkeypatch):
    if "mjx" in name:
        pytest.importorskip("mujoco.mjx", reason="the [mjx] extra is not installed")
    book = json.loads((NB / name).read_text())
    for c in book["cells"]:
        if c["cell_type"] == "code":
            assert not c.get("outputs"), f"{name}: commit notebooks without outputs"
    monkeypatch.setenv("DIFFTAXEL_NB_SMALL", "1")
    ns: dict = {"__name__": "__main__"}
    import contextlib

    import jax

    # MJX's own code relies on implicit rank promotion, which the suite otherwise refuses
    ctx = jax.numpy_rank_promotion("allow") if "mjx" in name else contextlib.nullcontext()
    with ctx:
        for i, c in enumerate(book["cells"]):
            if c["cell_type"] == "code":
                exec(compile("".join(c["source"]), f"{name}[{i}]", "exec"), ns)  # noqa: S102


def test_five_notebooks_exist():
    names = sorted(p.name for p in NB.glob("*.ipynb"))
    assert len(names) == 5


@pytest.mark.slow  # 10-35 s; CI runs it with the slow cases
def test_cli_demo_quick_prints_table(tmp_path, capsys):
    assert main(["demo", "--quick", "--no-plots", "--out", str(tmp_path)]) == 0
    cap = capsys.readouterr()
    out = cap.out
    assert "bind position error" in out and "normal_stiffness" in out
    assert "fit [" in cap.err and "60/60" in cap.err  # progress within each stage
    res = json.loads((tmp_path / "results.json").read_text())
    # a parameter that ends farther from the truth than it started is said so
    for name in res["not_converged"]:
        assert name in out.split("note:")[1]
    for k, v in res["parameters"].items():
        worse = abs(v["recovered"] - v["true"]) > abs(v["initial"] - v["true"])
        assert worse == (k in res["not_converged"]), k
    assert res["median_position_error_m"]["recovered"] < res["median_position_error_m"]["initial"]
    # the demo's session.npz through `difftaxel calibrate` is run by .ci/run (installed command)
    assert (tmp_path / "session.npz").exists()


def test_demo_plots_written_atomically(tmp_path):
    pytest.importorskip("matplotlib")
    from difftaxel.demo import _plots

    rng = np.random.default_rng(0)
    meas = -np.abs(rng.normal(size=(6, 80, 3)))
    tb = rng.normal(size=(80, 7)) * 0.01
    paths = _plots(
        str(tmp_path),
        list(np.geomspace(1, 1e-3, 30)),
        [(10, "a"), (20, "b"), (30, "c")],
        meas,
        meas * 0.9,
        tb,
        tb,
        tb,
        rng.normal(size=(26, 3)) * 0.05,
    )
    names = sorted(os.path.basename(p) for p in paths)
    assert names == ["loss.png", "tactile_images.png", "taxels_on_hand.png"]
    assert sorted(os.listdir(tmp_path)) == names  # no temporary files left
    for p in paths:
        assert open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_demo_plots_say_what_they_show():
    """Panels named by finger with one shared colour range and a labelled colour bar, loss
    stages marked, the hand drawn and every label inside the figure."""
    plt = pytest.importorskip("matplotlib.pyplot")
    from difftaxel.demo import FINGERS, HAND_CHAINS, _hand_figure, _loss_figure, _tactile_figure

    rng = np.random.default_rng(0)
    meas = -np.abs(rng.normal(size=(6, 80, 3)))
    fig = _tactile_figure(plt, meas, meas * 0.5)
    panels = [a for a in fig.axes if a.images]
    assert [a.get_title() for a in panels[:5]] == [f"{f} measured" for f in FINGERS]
    assert len({a.images[0].get_clim() for a in panels}) == 1  # one colour range
    assert any("compression" in a.get_ylabel() for a in fig.axes if not a.images)
    fig = _loss_figure(plt, list(np.geomspace(1, 1e-3, 30)), [(10, "a"), (20, "b"), (30, "c")])
    assert len(fig.axes[0].lines) == 4  # the curve and three stage marks
    joints = rng.normal(size=(26, 3)) * 0.05
    tb = rng.normal(size=(80, 7)) * 0.05
    fig = _hand_figure(plt, tb, tb, tb, joints)
    ax = fig.axes[0]
    assert len(ax.lines) == len(HAND_CHAINS)
    fig.canvas.draw()
    box = fig.bbox
    for label in (ax.xaxis.label, ax.yaxis.label, ax.title):
        e = label.get_window_extent()
        assert e.x0 >= box.x0 and e.y0 >= box.y0 and e.x1 <= box.x1 and e.y1 <= box.y1


def test_cli_press_and_help(capsys):
    assert main(["press"]) == 0
    assert "probes_in_contact" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    assert "object_poses" in capsys.readouterr().out


@pytest.mark.slow  # 20+ s; CI runs it with the slow cases
def test_cli_identify_and_calibrate(tmp_path, capsys):
    from .test_rawmodel import synthetic

    log, _ = synthetic(T=200, N=1)
    np.savetxt(tmp_path / "log.txt", np.concatenate([log.raw, log.force], 1), header="dt = 0.01")
    params, pred = tmp_path / "params.json", tmp_path / "pred.npz"
    args = ["identify", str(tmp_path / "log.txt"), "--steps", "200", "--save", str(params)]
    assert main(args + ["--predict", str(pred)]) == 0
    out = capsys.readouterr().out
    assert "held-back RMSE" in out and "counts rise with force" in out
    with np.load(pred) as z:
        assert z["log0_predicted"].shape == log.force.shape
        fitted = z["log0_predicted"]
    # saved parameters applied to the log without a fit give the same predictions
    pred2 = tmp_path / "pred2.npz"
    assert (
        main(
            [
                "identify",
                str(tmp_path / "log.txt"),
                "--params",
                str(params),
                "--predict",
                str(pred2),
            ]
        )
        == 0
    )
    assert "unsaturated samples" in capsys.readouterr().out
    with np.load(pred2) as z:
        np.testing.assert_allclose(z["log0_predicted"], fitted, rtol=1e-6, atol=1e-9)
    # outputs are checked before the fit: an input as output, a missing folder
    before = params.read_bytes()
    assert main(["identify", str(tmp_path / "log.txt"), "--save", str(tmp_path / "log.txt")]) == 2
    assert (
        main(["identify", str(tmp_path / "log.txt"), "--predict", str(tmp_path / "no" / "p.npz")])
        == 2
    )
    assert (
        main(
            ["identify", str(tmp_path / "log.txt"), "--params", str(params), "--save", str(params)]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--save" in err and "--predict" in err and "input file" in err
    assert params.read_bytes() == before
    # a small glove recording with a sphere, then calibrate it
    import jax.numpy as jnp

    from difftaxel.glove import glove_forces
    from difftaxel.io import write_recording

    from .test_glove_calibration import pad_scene

    lbs, scene, sensor = pad_scene(T=8)
    frames = np.asarray(glove_forces(sensor, lbs, scene))
    from difftaxel.skinning import HandSkeletonRef, TactileMetadata

    meta = TactileMetadata(lbs, HandSkeletonRef(tuple(range(26))))
    write_recording(
        tmp_path / "rec.npz",
        meta,
        frames,
        np.asarray(scene.T_root_joints),
        np.arange(8, dtype=np.int64) * 10_000_000,
        objects=[{"kind": "sphere", "radius": 0.008}],
        object_poses=np.asarray(scene.bodies.poses),
        object_twists=np.asarray(scene.bodies.twists),
        sensor={
            "probe_radius": 0.002,
            "normal_stiffness": 500.0,
            "normal_damping": 0.0,
            "shear_scalar": 0.0,
            "twist_scalar": 0.0,
        },
    )
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(tmp_path / "rec.npz"), "--steps", "5", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert out.exists() and "calibrated metadata" in printed and "taxels identified" in printed
    assert os.path.getsize(out) > 100
    assert jnp is not None
