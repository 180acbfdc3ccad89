"""Three-axis raw models against a force/torque reference on its own clock: the synthetic
magnetic array's known answer, the lags, honest standard deviations under correlated noise,
unit invariance, the model's inverse, logs on disk, saved models and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from difftaxel.rawmodel import (
    VectorLog,
    WrenchLog,
    coarse_lag,
    fit_triaxial,
    load_triaxial,
    load_vector_log,
    load_wrench_log,
    predict_triaxial,
    save_triaxial,
    wrench_at,
)
from difftaxel.rawmodel.standins import magnetic_array, write_example_files
from difftaxel.rawmodel.triaxial import _Spec, features

RAW_RATE = 88.0
# the four-session fit takes ~140 s on each test worker: its three tests run in CI's slow run
FIT = pytest.mark.slow


@pytest.fixture(scope="module")
def array_fit():
    """The issue's case: 2 x 2 array, 5 % neighbour coupling, session drift, creep, stiffening,
    raw at 88 Hz, force/torque at 115 Hz 60 +- 10 ms late; four sessions fitted, a fifth held
    out."""
    raws, refs, pos, truth = magnetic_array(0, sessions=5)
    fit = fit_triaxial(raws[:4], refs[:4], pos)
    return raws, refs, pos, truth, fit


def noise_floor(truth):
    """RMS force error (N) of the true linear response inverted on one noisy raw sample."""
    Ginv = np.linalg.inv(truth.gain)
    return truth.noise_raw * np.sqrt(np.mean(np.diag(Ginv @ Ginv.T)))


@FIT
def test_held_out_session_within_the_noise_floor_and_lags_within_a_sample(array_fit):
    raws, refs, pos, truth, fit = array_fit
    pred = predict_triaxial(fit, raws[4])  # a new session: its own drift, tared on its start
    rms = np.sqrt(np.mean((pred - truth.forces[4]) ** 2))
    assert rms <= 1.5 * noise_floor(truth), (rms, noise_floor(truth))
    err = fit.lags - truth.lags[:4]
    assert np.all(np.abs(err) < 1.0 / RAW_RATE)  # the issue: within one raw sample
    assert np.all(np.abs(err) < 4 * fit.lag_std)  # and within its reported uncertainty
    assert np.all(fit.lag_std < 1e-3)
    # the structure the data holds: creep near 0.5 s, the stiffening found by validation
    assert fit.model.degree == 2 and abs(fit.model.tau - 0.5) < 0.05
    best = {d: min(v for (dd, _), v in fit.validation.items() if dd == d) for d in (1, 2, 3)}
    assert best[2] < best[1] and best[2] < best[3]
    # each session's drift recovered
    np.testing.assert_allclose(fit.offsets, truth.offsets[:4], atol=5.0)
    assert np.all(np.abs(fit.offsets - truth.offsets[:4]) < 6 * fit.offset_std + 1e-9)
    text = fit.report()
    assert "reference lag per session" in text and "degree 2" in text
    assert fit.warnings == ()  # every taxel pressed in many directions before the split


@FIT
def test_the_inverse_recovers_the_forces_the_model_makes(array_fit):
    """Closed-form check of predict_triaxial: fields made by the fitted model itself from known
    forces invert to those forces (Newton through the stiffening and the creep)."""
    raws, _, _, truth, fit = array_fit
    m = fit.model
    t = raws[4].time[:400]
    f = truth.forces[4][:400]
    off = fit.offsets[0]
    psi = features(_Spec(m.degree, m.tau, m.scale), f, t)
    b = off[None] + (psi @ m.weights.T).reshape(-1, 4, 3)
    back = predict_triaxial(m, VectorLog(t, b, "made"), offset=off)
    np.testing.assert_allclose(back, f, atol=1e-9)


@pytest.mark.parametrize("ar", [0.0, 0.9])
def test_standard_deviations_stay_honest_when_residuals_are_correlated(ar):
    """Six independent synthetic arrays (linear, no creep, exact reference): the weights' errors
    in units of their sandwich stds have RMS ~1, white or AR(0.9) raw noise; the white-noise
    stds are over-confident by ~4x under AR(0.9)."""
    zs, zw = [], []
    for seed in range(6):
        raws, refs, pos, truth = magnetic_array(
            seed,
            sessions=2,
            duration=20.0,
            creep=0.0,
            quadratic=0.0,
            noise_ar=ar,
            noise_force=0.0,
            noise_torque=0.0,
        )
        fit = fit_triaxial(raws, refs, pos, degrees=(1,), taus=())
        d = fit.model.weights[:, :12] - truth.gain * fit.model.scale[None]
        zs.append(d / fit.weights_std[:, :12])
        zw.append(d / fit.weights_std_white[:, :12])
    z, z_white = np.sqrt(np.mean(np.square(zs))), np.sqrt(np.mean(np.square(zw)))
    assert 0.7 < z < 1.4, z
    if ar:
        assert z_white > 2.5, z_white


def test_units_change_only_what_carries_them():
    """Raw values in mT instead of uT: lags, their stds and the choices are identical; offsets,
    weights and their stds scale by 1e-3; forces predicted are the same."""
    raws, refs, pos, _ = magnetic_array(3, sessions=2, duration=15.0)
    kw = dict(degrees=(1, 2), taus=(0.5,))
    a = fit_triaxial(raws, refs, pos, **kw)
    milli = [VectorLog(r.time, r.raw * 1e-3, r.name) for r in raws]
    b = fit_triaxial(milli, refs, pos, **kw)
    np.testing.assert_allclose(b.lags, a.lags, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.lag_std, a.lag_std, rtol=1e-6)
    assert (b.model.degree, b.model.tau) == (a.model.degree, a.model.tau)
    np.testing.assert_allclose(b.offsets, 1e-3 * a.offsets, rtol=1e-9)
    np.testing.assert_allclose(b.offset_std, 1e-3 * a.offset_std, rtol=1e-6)
    np.testing.assert_allclose(b.weights_std, 1e-3 * a.weights_std, rtol=1e-6)
    np.testing.assert_allclose(
        predict_triaxial(b, milli[0]), predict_triaxial(a, raws[0]), atol=1e-9
    )


def test_known_pressed_taxels_and_coupling_radius():
    raws, refs, pos, truth = magnetic_array(4, sessions=2, duration=15.0, creep=0.0)
    given = fit_triaxial(raws, refs, pos, pressed=truth.pressed, degrees=(1,), taus=())
    inferred = fit_triaxial(raws, refs, pos, degrees=(1,), taus=())
    for f in (given, inferred):
        assert np.all(np.abs(f.lags - truth.lags) < np.maximum(4 * f.lag_std, 2e-4))
    # physical structure: a taxel responds only to loads within 7 mm (the adjacent ones)
    near = fit_triaxial(raws, refs, pos, degrees=(1,), taus=(), coupling_radius=7e-3)
    W = near.model.weights[:, :12].reshape(4, 3, 4, 3)
    diagonal = np.array([[0, 3], [1, 2], [2, 1], [3, 0]])  # opposite corners are 8.5 mm apart
    for i, j in diagonal:
        assert np.all(W[i, :, j] == 0) and np.all(
            near.weights_std[:, :12].reshape(4, 3, 4, 3)[i, :, j] == 0
        )
    assert near.model.coupling.sum() == 12


def test_wrench_at_and_coarse_lag_closed_form():
    t_ref = np.arange(0, 10, 0.01)
    w = np.zeros((t_ref.size, 6))
    w[:, 2] = np.where((t_ref > 3) & (t_ref < 5), np.sin(np.pi * (t_ref - 3) / 2) ** 2, 0.0)
    ref = WrenchLog(t_ref + 0.05, w, "ref")  # the reference's clock 50 ms late
    got, inside = wrench_at(ref, np.array([4.0, 4.005, -1.0]), 0.05)
    assert got[0, 2] == pytest.approx(1.0)  # at the peak exactly
    assert got[1, 2] == pytest.approx(0.5 * (1.0 + np.sin(np.pi * 1.01 / 2) ** 2))  # halfway
    assert inside.tolist() == [True, True, False]
    t_raw = np.arange(0, 10, 1 / RAW_RATE)
    z = np.interp(t_raw, t_ref, w[:, 2])
    raw = VectorLog(t_raw, np.stack([0 * z, 0 * z, 700 * z], -1)[:, None], "raw")
    assert coarse_lag(raw, ref) == pytest.approx(0.05, abs=0.1 / RAW_RATE)
    with pytest.raises(ValueError, match="max_lag"):
        coarse_lag(raw, ref, max_lag=-1)


def test_fit_errors_name_the_argument():
    raws, refs, pos, _ = magnetic_array(5, sessions=2, duration=8.0)
    cases = [
        (dict(refs=refs[:1]), "refs"),
        (dict(positions=pos[:3]), "positions"),
        (dict(rotations=np.ones((4, 3, 3))), "rotations"),
        (dict(pressed="nope"), "pressed"),
        (dict(pressed=[np.zeros(3, int)] * 2), "pressed"),
        (dict(degrees=(4,)), "degrees"),
        (dict(taus=(-1.0,)), "taus"),
        (dict(validation=1.0), "validation"),
        (dict(tare=100.0), "tare"),
    ]
    for kw, word in cases:
        args = dict(raws=raws, refs=refs, positions=pos)
        args.update(kw)
        with pytest.raises(ValueError, match=word):
            fit_triaxial(args.pop("raws"), args.pop("refs"), args.pop("positions"), **args)
    bad = VectorLog(raws[0].time[::-1], raws[0].raw, "backwards")
    with pytest.raises(ValueError, match="backwards: time"):
        fit_triaxial([bad, raws[1]], refs, pos)


def test_logs_on_disk_and_one_line_errors(tmp_path):
    raws, refs, pos, _ = magnetic_array(6, sessions=1, duration=3.0)
    r, f = raws[0], refs[0]
    np.savetxt(
        tmp_path / "raw.txt",
        np.column_stack([r.time, r.raw.reshape(r.time.size, -1)]),
        header="time ...",
    )
    np.savetxt(tmp_path / "ft.txt", np.column_stack([f.time, f.wrench]))
    np.savez(tmp_path / "raw.npz", time=r.time, raw=r.raw)
    np.savez(tmp_path / "ft.npz", time=f.time, wrench=f.wrench)
    for a, b in ((load_vector_log(tmp_path / "raw.txt"), load_vector_log(tmp_path / "raw.npz")),):
        np.testing.assert_allclose(a.raw, r.raw, rtol=1e-15)
        np.testing.assert_allclose(b.raw, r.raw)
    np.testing.assert_allclose(load_wrench_log(tmp_path / "ft.txt").wrench, f.wrench, rtol=1e-15)
    np.testing.assert_allclose(load_wrench_log(tmp_path / "ft.npz").time, f.time)
    (tmp_path / "cols.txt").write_text("0 1 2 3 4\n")
    (tmp_path / "word.txt").write_text("0 a 2 3\n")
    (tmp_path / "back.txt").write_text("1 0 0 0\n0 0 0 0\n")
    np.savez(tmp_path / "nokey.npz", time=f.time)
    for bad, load, word in (
        ("cols.txt", load_vector_log, "time b1x"),
        ("word.txt", load_vector_log, "line 1"),
        ("back.txt", load_vector_log, "increasing"),
        ("raw.txt", load_wrench_log, "Fx Fy Fz"),
        ("nokey.npz", load_wrench_log, "lacks 'wrench'"),
        ("missing.txt", load_vector_log, "no such file"),
    ):
        with pytest.raises(ValueError, match=word) as e:
            load(tmp_path / bad)
        assert str(e.value).startswith(str(tmp_path / bad)) and "\n" not in str(e.value)


@FIT
def test_saved_model_reads_back_and_predicts_the_same(array_fit, tmp_path):
    raws, _, _, _, fit = array_fit
    path = tmp_path / "model.json"
    save_triaxial(path, fit)
    back = load_triaxial(path)
    np.testing.assert_array_equal(back.weights, fit.model.weights)
    assert back.tau == fit.model.tau and back.degree == fit.model.degree
    np.testing.assert_array_equal(predict_triaxial(back, raws[4]), predict_triaxial(fit, raws[4]))
    doc = json.loads(path.read_text())
    doc["weights"] = doc["weights"][:-1]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="bad.json: inconsistent"):
        load_triaxial(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="taxels"):
        predict_triaxial(back, VectorLog(raws[4].time, raws[4].raw[:, :2], "two"))
    with pytest.raises(ValueError, match="shorter than the tare"):
        predict_triaxial(back, VectorLog(raws[4].time[:5], raws[4].raw[:5], "short"))


def test_cli_fits_saves_applies_and_refuses(tmp_path, capsys):
    from difftaxel.cli import main

    ex = tmp_path / "ex"
    assert main(["identify", "--example-files", str(ex)]) == 0
    assert sorted(p.name for p in ex.iterdir())[0] == "positions.txt"
    s = [str(ex / f"session{k}_raw.txt") for k in range(4)]
    f = [str(ex / f"session{k}_ft.txt") for k in range(4)]
    model, out = tmp_path / "model.json", tmp_path / "forces.npz"
    args = [
        "identify",
        s[0],
        s[1],
        "--reference",
        f[0],
        f[1],
        "--positions",
        str(ex / "positions.txt"),
    ]
    assert main(args + ["--save", str(model)]) == 0
    printed = capsys.readouterr().out
    assert "reference lag per session" in printed and "model written" in printed
    assert main(["identify", s[3], "--params", str(model), "--predict", str(out)]) == 0
    with np.load(out) as z:
        assert z["log0_forces"].shape == (3520, 4, 3)
    _, _, _, truth = magnetic_array(0, sessions=4)  # the files' own truth
    with np.load(out) as z:
        assert np.sqrt(np.mean((z["log0_forces"] - truth.forces[3]) ** 2)) < 1.5 * noise_floor(
            truth
        )
    capsys.readouterr()
    before = model.read_bytes()
    bad = [
        args[:-2],  # no --positions
        ["identify", s[0], "--reference", f[0], f[1], "--positions", str(ex / "positions.txt")],
        args + ["--save", s[0]],  # would overwrite an input
        ["identify", s[0], "--reference", s[0], "--positions", str(ex / "positions.txt")],
        ["identify", s[3], "--params", str(model), "--save", str(model)],
    ]
    for a in bad:
        assert main(a) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(bad) and all(e.startswith("difftaxel identify: error:") for e in err)
    assert "--positions" in err[0] and "--reference" in err[1] and "--save" in err[2]
    assert "Fx Fy Fz" in err[3] and "--save" in err[4]
    assert model.read_bytes() == before
    paths = write_example_files(tmp_path / "again", sessions=1)
    assert len(paths) == 3


def test_taxel_axes_turn_the_forces():
    """Taxel axes turned 90 deg about z: the same skin's forces read in the turned axes,
    ``f_taxel = R^T f_sensor`` (a linear model, so exactly)."""
    raws, refs, pos, _ = magnetic_array(7, sessions=2, duration=12.0, creep=0.0, quadratic=0.0)
    a = fit_triaxial(raws, refs, pos, degrees=(1,), taus=())
    R = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    b = fit_triaxial(raws, refs, pos, rotations=np.tile(R, (4, 1, 1)), degrees=(1,), taus=())
    np.testing.assert_allclose(b.lags, a.lags, atol=1e-7)
    pa, pb = predict_triaxial(a, raws[0]), predict_triaxial(b, raws[0])
    np.testing.assert_allclose(pb, np.einsum("ji,tnj->tni", R, pa), atol=1e-6)


def test_non_finite_values_are_refused_where_they_enter(tmp_path):
    """A NaN raw value or wrench is refused naming the log and the sample; a model with a NaN
    weight is refused before anything is written (what is written reads back)."""
    raws, refs, pos, _ = magnetic_array(8, sessions=1, duration=3.0)
    raw = raws[0].raw.copy()
    raw[7, 1, 2] = np.nan
    with pytest.raises(ValueError, match="session0_raw: raw: non-finite values at sample 7"):
        fit_triaxial([VectorLog(raws[0].time, raw, raws[0].name)], refs, pos)
    w = refs[0].wrench.copy()
    w[3, 5] = np.inf
    with pytest.raises(ValueError, match="session0_ft: wrench: non-finite values at sample 3"):
        fit_triaxial(raws, [WrenchLog(refs[0].time, w, refs[0].name)], pos)
    fit = fit_triaxial(raws, refs, pos, degrees=(1,), taus=())
    bad = fit.model._replace(
        weights=np.where(
            np.arange(fit.model.weights.size).reshape(fit.model.weights.shape) == 0,
            np.nan,
            fit.model.weights,
        )
    )
    path = tmp_path / "m.json"
    with pytest.raises(ValueError, match="inconsistent"):
        save_triaxial(path, bad)
    assert not path.exists() and not list(tmp_path.iterdir())


def test_a_taxel_pressed_in_too_few_directions_is_named():
    """A 3 x 4 array over two 20 s sessions: some taxels are pressed once or twice before the
    validation split, too few directions for their 3 x 3 response; the fit says which."""
    raws, refs, pos, _ = magnetic_array(2, sessions=2, duration=20.0, grid=(3, 4))
    fit = fit_triaxial(raws, refs, pos, degrees=(1,), taus=())
    assert len(fit.warnings) == 1 and "fewer than three independent" in fit.warnings[0]
    assert "warning: taxels [" in fit.report()
