"""Raw-reading model: recovery on synthetic logs, held-back validation, log formats, errors."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from difftaxel.rawmodel import RawLog, fit_raw_model, load_raw_log, raw_to_force

TRUE = {
    "offset": 300.0,
    "force_at_ref": 15.0,
    "exponent": 1.3,
    "hysteresis_strength": 0.3,
    "hysteresis_tau": 0.2,
}


def synthetic(T=600, N=2, noise=0.02, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(T) * 0.01
    raw = 300 + 1500 * np.abs(np.sin(2 * np.pi * 0.4 * t[:, None] + np.arange(N)))  # presses
    raw = raw + 40 * rng.standard_normal((T, N)).cumsum(0) * 0.05
    p = {k: jnp.full(N, v) for k, v in TRUE.items()}
    force = np.asarray(raw_to_force(p, jnp.asarray(raw), 0.01))
    return RawLog(raw, force + noise * rng.standard_normal(force.shape), 0.01), noise


def test_fit_reproduces_held_back_part_within_noise():
    log, noise = synthetic()
    f = fit_raw_model(log, train_fraction=0.7)
    n_tr = int(round(0.7 * len(log.raw)))
    pred = np.asarray(raw_to_force(f.params, jnp.asarray(log.raw), log.dt))
    rmse = np.sqrt(np.mean((pred[n_tr:] - log.force[n_tr:]) ** 2, axis=0))
    assert np.all(rmse < 1.2 * noise), rmse
    assert np.all(f.residual_std < 1.2 * noise)
    for k in ("exponent", "hysteresis_strength"):
        assert np.all(np.abs(np.asarray(f.params[k]) / TRUE[k] - 1) < 0.1), (k, f.params[k])
    assert all(
        np.all(np.isfinite(np.asarray(v))) and np.all(np.asarray(v) > 0) for v in f.std.values()
    )


def test_log_formats(tmp_path):
    log, _ = synthetic(T=50, N=1)
    txt = tmp_path / "log.txt"
    np.savetxt(txt, np.concatenate([log.raw, log.force], 1), header="dt = 0.01\nraw force")
    a = load_raw_log(txt)
    np.testing.assert_allclose(a.raw, log.raw)
    assert a.dt == 0.01
    npz = tmp_path / "log.npz"
    np.savez(npz, raw=log.raw[:, 0], force=log.force[:, 0], dt=0.01)
    b = load_raw_log(npz)
    assert b.raw.shape == (50, 1)
    np.savez(npz, raw=log.raw, force=log.force[:10], dt=0.01)
    with pytest.raises(ValueError, match="must both be"):
        load_raw_log(npz)
    bad = np.concatenate([log.raw, log.force], 1)
    bad[3, 1] = np.nan
    np.savetxt(txt, bad, header="dt = 0.01")
    with pytest.raises(ValueError, match="non-finite"):
        load_raw_log(txt)
    np.savetxt(txt, bad[:1], header="dt = 0.01")
    with pytest.raises(ValueError, match="at least two samples"):
        load_raw_log(txt)
    np.savetxt(txt, log.force)
    with pytest.raises(ValueError, match="two columns"):
        load_raw_log(txt, dt=0.01)
