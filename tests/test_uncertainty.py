"""Honest uncertainties: standard deviations that follow the parameters' units and nothing
else, infinite where the data does not determine a direction; raw models that do not assume
ADC counts; saved raw-model parameters that keep their time units and offsets."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from difftaxel.calibrate import gauss_newton_std, sandwich_std, scaled_inverse
from difftaxel.rawmodel import (
    dead_band_warnings,
    fit_raw_model,
    load_raw_params,
    predict,
    raw_to_force,
    save_raw_params,
)
from difftaxel.rawmodel.fit import _undetermined

from .test_rawmodel import synthetic

# ----------------------------------------------------------------------------- the inverse


def test_scaled_inverse_is_invariant_to_units_where_pinv_drops_a_direction():
    rng = np.random.default_rng(0)
    J = rng.normal(size=(50, 3))
    exact = np.linalg.inv(J.T @ J)
    D = np.diag([1e-9, 1.0, 1e3])  # a parameter in units 1e9 times larger, another 1e3 smaller
    Js = J @ D
    Hinv, und = scaled_inverse(Js.T @ Js)
    assert not und.any()
    np.testing.assert_allclose(D @ Hinv @ D, exact, rtol=1e-9)
    # what an unscaled pseudo-inverse gives: the weak direction dropped, its variance ~0
    assert np.linalg.pinv(Js.T @ Js)[0, 0] < 1e-3 * Hinv[0, 0]


def test_a_direction_the_data_does_not_determine_has_infinite_std():
    x = np.linspace(0, 1, 20)

    def res(p):  # a and b enter only as their sum: one direction undetermined, c determined
        return (p["a"] + p["b"]) * x + p["c"] - (2 * x + 1 + 0.01 * np.sin(40 * x))

    p = {"a": jnp.array(0.5), "b": jnp.array(1.5), "c": jnp.array(1.0)}
    std, _ = gauss_newton_std(res, p)
    assert np.isinf(std["a"]) and np.isinf(std["b"]) and np.isfinite(std["c"])
    sw, _, _ = sandwich_std(lambda q: res(q)[:, None], p)
    assert np.isinf(sw["a"]) and np.isinf(sw["b"]) and np.isfinite(sw["c"])
    # a column of zeros (a parameter the residuals do not depend on)
    std0, _ = gauss_newton_std(
        lambda q: q["c"] * x - x + 0.01 * np.cos(9 * x), {"c": 1.0, "d": 2.0}
    )
    assert np.isinf(std0["d"]) and np.isfinite(std0["c"])


def test_the_rank_tolerance_follows_the_dtype():
    rng = np.random.default_rng(1)
    J = rng.normal(size=(4, 5)).astype(np.float32)  # 4 readings, 5 parameters: rank <= 4
    H = J.astype(np.float64).T @ J.astype(np.float64)
    assert scaled_inverse(H, dtype=np.float32)[1].all()
    # nearly dependent at float32's resolution: undetermined in float32, not in float64
    K = rng.normal(size=(30, 2))
    K = np.c_[K, K[:, 0] + 3e-4 * rng.normal(size=30)]
    assert scaled_inverse(K.T @ K, dtype=np.float32)[1].any()
    assert not scaled_inverse(K.T @ K, dtype=np.float64)[1].any()


def test_a_flat_limit_is_never_reported_as_certain():
    """A time constant far past the log's length (the issue's run-away ``hysteresis_tau``):
    its std is enormous or infinite, never 0 or 1e-64."""
    t = jnp.arange(200.0)
    y = 0.3 * jnp.sin(t / 7) + 0.01 * jnp.cos(3.1 * t)

    def res(p):
        return p["h"] * jnp.exp(-t / p["tau"]) * jnp.sin(t / 7) + 0.3 * jnp.sin(t / 7) - y

    p = {"h": jnp.array(0.05), "tau": jnp.array(1e35)}
    std, _ = gauss_newton_std(res, p)
    assert not float(std["tau"]) < 1e20 * 1e35  # 1.3e67 s: honest, but a number
    # the raw model calls a positive parameter known to no digit undetermined: inf
    params = {"hysteresis_tau": np.array([1e35]), "exponent": np.array([1.3])}
    stds = {"hysteresis_tau": np.array([float(std["tau"])]), "exponent": np.array([0.01])}
    names, warnings = _undetermined(params, stds)
    assert names == ["hysteresis_tau[0]"] and np.isinf(stds["hysteresis_tau"][0])
    assert "not determined" in warnings[0] and np.isfinite(stds["exponent"][0])


# ----------------------------------------------------------------------------- raw units


@pytest.fixture(scope="module")
def one_taxel():
    log, noise = synthetic(T=300, N=1)
    return log, noise


@pytest.fixture(scope="module")
def counts_fit(one_taxel):
    return fit_raw_model(one_taxel[0], train_fraction=0.7, steps=300)


@pytest.mark.parametrize("factor", [100.0, 3e-4], ids=["16-bit-counts", "volts"])
def test_raw_units_change_only_the_offset_and_its_std(one_taxel, counts_fit, factor):
    """Counts x 100 (a 16-bit ADC) or x 3e-4 (volts, 0.1-0.6 V): the same fit, offsets and their
    standard deviations in the new units, every other value and std unchanged."""
    log, noise = one_taxel
    f = fit_raw_model(log._replace(raw=log.raw * factor), train_fraction=0.7, steps=300)
    for k, v in counts_fit.params.items():
        u = factor if k == "offset" else 1.0
        np.testing.assert_allclose(f.params[k], u * v, rtol=1e-6, err_msg=k)
        np.testing.assert_allclose(f.std[k], u * counts_fit.std[k], rtol=1e-6, err_msg=k)
        np.testing.assert_allclose(
            f.std_gauss_newton[k], u * counts_fit.std_gauss_newton[k], rtol=1e-6, err_msg=k
        )
    assert np.all(f.held_out_rmse < 1.3 * noise)
    assert np.all(np.isfinite(f.std["offset"])) and np.all(f.std["offset"] > 0)


def test_a_dead_band_at_the_rest_end_is_named_with_the_flag_that_censors_it(one_taxel):
    log, _ = one_taxel
    clipped = np.maximum(log.raw, 600.0)  # an FSR floor above the rest level (300 counts)
    assert np.mean(clipped == 600.0) > 0.1
    w = dead_band_warnings(clipped, log.force, np.array([1.0]), _no_sat())
    assert len(w) == 1 and "--saturation 600," in w[0] and "taxel 0" in w[0]
    assert dead_band_warnings(log.raw, log.force, np.array([1.0]), _no_sat()) == []
    # falling counts: the rest end is the highest value, the flag's other side
    w = dead_band_warnings(-clipped, log.force, np.array([-1.0]), _no_sat())
    assert "--saturation ,-600" in w[0]
    # a floor low enough that the force under it spreads over < 5 % of its range: not taken for
    # an ADC limit, so only the warning tells (the FSR log)
    low = np.maximum(log.raw, 400.0)
    f = fit_raw_model(log._replace(raw=low), steps=100, lm_steps=2)
    assert np.isnan(f.saturation.lo[0])
    assert any("--saturation 400," in m for m in f.warnings), f.warnings
    g = fit_raw_model(log._replace(raw=low), steps=100, lm_steps=2, saturation=(400.0, None))
    assert not any("--saturation" in m for m in g.warnings) and g.n_censored[0] > 0


def _no_sat():
    from difftaxel.rawmodel import Saturation

    return Saturation(np.full(1, np.nan), np.full(1, np.nan))


# ----------------------------------------------------------------------------- saved parameters


def test_saved_parameters_keep_their_time_units(tmp_path, one_taxel, counts_fit):
    log, noise = one_taxel
    save_raw_params(tmp_path / "p.json", counts_fit)
    model = load_raw_params(tmp_path / "p.json")
    assert model.dt == 0.01
    timed = predict(model, log)
    untimed = predict(model, log._replace(dt=None))  # taken at the fit's dt, not as samples
    np.testing.assert_allclose(untimed, timed, rtol=1e-12)
    assert np.sqrt(np.mean((untimed - log.force) ** 2)) < 1.3 * noise
    # a log at another rate: tau stays in seconds (the step's decay follows the log's dt)
    p = {k: jnp.asarray(v) for k, v in counts_fit.params.items()}
    want = raw_to_force({**p, **counts_fit.scale}, jnp.asarray(log.raw), 0.02)
    np.testing.assert_allclose(predict(model, log._replace(dt=0.02)), want, rtol=1e-12)
    # a fit in samples applied to a timed log has no honest conversion
    samples = fit_raw_model(log._replace(dt=None), steps=30, lm_steps=0)
    with pytest.raises(ValueError, match=r"dt: the parameters were fitted in samples"):
        predict(samples, log)


def test_a_fit_of_several_logs_needs_to_be_told_whose_offset(one_taxel):
    log, _ = one_taxel
    two = fit_raw_model([log, log._replace(raw=log.raw + 50.0)], steps=30, lm_steps=0)
    with pytest.raises(ValueError, match=r"log_index: the parameters hold 2 offsets"):
        two.predict(log)
    assert np.all(np.isfinite(two.predict(log, 1)))


def test_logs_too_short_for_the_model_are_refused_naming_the_file(tmp_path):
    p = tmp_path / "short.txt"
    p.write_text("# dt = 0.01\n512 0.0\n530 0.05\n575 0.21\n")
    from difftaxel.rawmodel import load_raw_log

    with pytest.raises(ValueError, match=r"short.txt: 2 training samples .* at least 12"):
        fit_raw_model(load_raw_log(p), train_fraction=0.7)


def test_time_headers_are_read_or_refused(tmp_path):
    from difftaxel.rawmodel import load_raw_log

    rows = "".join(f"{500 + 3 * i} {0.02 * i}\n" for i in range(20))
    (tmp_path / "ms.txt").write_text("# dt = 10 ms\n" + rows)
    assert load_raw_log(tmp_path / "ms.txt").dt == pytest.approx(0.01)
    for bad in ("# dt = nan\n", "# dt = 10 minutes\n", "# dt = 0\n"):
        (tmp_path / "bad.txt").write_text(bad + rows)
        with pytest.raises(ValueError, match=r"bad.txt: line 1: expected '# dt = PERIOD'"):
            load_raw_log(tmp_path / "bad.txt")
    t = np.arange(20) * 0.01
    t[4] = np.nan
    data = np.c_[t, 500 + 3 * np.arange(20), 0.02 * np.arange(20)]
    np.savetxt(tmp_path / "nan_time.txt", data)
    with pytest.raises(ValueError, match=r"nan_time.txt: time"):
        load_raw_log(tmp_path / "nan_time.txt")
    np.savez(tmp_path / "obj.npz", raw=np.array([1, "a"], dtype=object), force=np.zeros(2))
    with pytest.raises(ValueError, match=r"obj.npz: not a readable NPZ log"):
        load_raw_log(tmp_path / "obj.npz")


def test_jax_dtype_of_the_fit_survives(counts_fit):
    assert all(np.asarray(v).dtype == np.float64 for v in counts_fit.params.values())
    assert jax.config.jax_enable_x64


# ----------------------------------------------------------------------------- layouts


def _two_taxel_scene():
    from difftaxel.skin import LinkLayout

    from .test_skin import sensor_for, sphere_scene, true_readings

    lay = LinkLayout.make([[0, 0, 0], [6e-3, 0, 0]], np.tile([0, 0, 1.0], (2, 1)))
    r = 3e-3
    # 12 presses around taxel 0 at two depths; 4 of them reach taxel 1 (the last four)
    offs = [(dx, dy) for dx in (-1e-3, 0.0, 1e-3) for dy in (-1e-3, 1e-3)]
    centres = [(dx, dy, r - d) for d in (2e-4, 5e-4) for dx, dy in offs]
    centres[-4:] = [(6e-3 + dx, dy, r - 4e-4) for dx, dy in offs[:4]]
    scene = sphere_scene(centres, r)
    s = sensor_for(2)
    return s, lay, scene, true_readings(s, scene, lay)[..., 2]


@pytest.mark.parametrize(
    "x64", [pytest.param(True, marks=pytest.mark.slow), False], ids=["float64", "float32"]
)
def test_fewer_readings_than_parameters_is_never_identified(x64):
    """Four readings for five parameters: not identified, whatever the dtype (in float32 the
    old rank test, 1e-10 relative, sat below the Jacobian's resolution)."""
    from difftaxel.skin import calibrate_layout

    with jax.enable_x64(x64):
        s, lay, scene, meas = _two_taxel_scene()
        assert np.sum(meas[:, 1] != 0) == 4  # four readings, five parameters
        f = calibrate_layout(
            s, lay, scene, meas, channels="normal", holdout=0.0, steps_per_stage=5, lm_steps=2
        )
    assert f.excited.tolist() == [True, True]
    assert not f.identified[1] and np.all(np.isinf(f.std_position[1]))
    assert f.identified[0]


def test_normal_readings_of_the_opposite_sign_say_what_to_pass():
    from difftaxel.skin import calibrate_layout

    s, lay, scene, meas = _two_taxel_scene()
    assert np.all(meas <= 0)  # the model: compression is negative z
    with pytest.raises(ValueError, match=r"measured: the normal readings are positive.*-measured"):
        calibrate_layout(s, lay, scene, -meas, channels="normal", steps_per_stage=1)
