"""Options never lie: every option of every sensor (and of the imperfection chain) changed by
``replace`` gives exactly what constructing with it gives, or a clear refusal.

The tables below list a non-default value for every constructor argument; a test fails when a
class gains an option the tables do not cover.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import difftaxel as dt
from difftaxel.sensors import (
    ContactDepthProbe,
    ContactProbe,
    ElastomerTaxel,
    KinematicTaxel,
    ProximityTaxel,
    TrackedPoints,
    make_inputs,
)

PITCH = 0.004
GRID = np.stack(
    list(np.meshgrid(np.arange(3) * PITCH - PITCH, np.arange(3) * PITCH - PITCH, indexing="xy"))
    + [np.zeros((3, 3))],
    -1,
)
GRID2 = GRID * 1.1 + np.array([0.0005, 0.0, 0.0])
RNG = np.random.default_rng(0)
_P = RNG.normal(size=(60, 3))
SPHERE_PTS = 0.01 * _P / np.linalg.norm(_P, axis=1, keepdims=True)
TRACK = TrackedPoints(points=SPHERE_PTS, segments=((0, 60),))
TRACK2 = TrackedPoints(points=SPHERE_PTS[:40] * 1.05, segments=((0, 40),))
PAD = dt.Box(size=[0.02, 0.02, 0.004], T_body_shape=[0, 0, -0.002, 0, 0, 0, 1])
BODIES = dt.Bodies(
    shapes=(dt.Sphere(radius=0.01),),
    poses=np.array([[0.001, 0.0005, 0.0093, 0, 0, 0, 1.0]]),
    twists=np.array([[0.01, -0.005, -0.02, 0.3, 0.1, 1.0]]),
)
INPUTS = make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), BODIES, dt=0.01)

COMMON = {
    "probe_local_pos": GRID2,
    "probe_radius": 0.003,
    "probe_gain": np.full(9, 1.2),
    "probe_gain_resample_range": (0.9, 1.1),
    "imperfections": dt.Imperfections(noise=0.01, bias=0.001),
}
CONTACT = {
    **COMMON,
    "probe_radius_noise": 1e-4,
    "filter_link_idx": (1,),
    "contact_depth_query": "raycast",
    "broad_phase": "links",
    "smoothing": 1e-4,
    "stages": ("radius_noise",),
}
CASES = {
    ContactDepthProbe: ({"probe_local_pos": GRID, "probe_radius": 0.002}, CONTACT),
    ContactProbe: (
        {"probe_local_pos": GRID, "probe_radius": 0.002},
        {**CONTACT, "contact_threshold": 2e-4, "release_threshold": 5e-5},
    ),
    KinematicTaxel: (
        {"probe_local_pos": GRID, "probe_radius": 0.002},
        {
            **CONTACT,
            "normal_stiffness": 500.0,
            "normal_damping": 2.0,
            "normal_exponent": 1.5,
            "shear_scalar": 0.5,
            "twist_scalar": 0.5,
            "imperfections": dt.Imperfections(crosstalk_strength=0.5, crosstalk_sigma=0.004),
        },
    ),
    ProximityTaxel: (
        {"probe_local_pos": GRID, "track_points": TRACK},
        {
            **COMMON,
            "track_points": TRACK2,
            "probe_radius_noise": 1e-4,
            "probe_local_normal": (0.0, 0.6, 0.8),
            "stiffness": 50.0,
            "shear_coupling": 0.5,
            "twist_scalar": 0.5,
            "density_scalar": 50.0,
            "point_chunk": 4,
            "max_candidates": 30,
            "smoothing": 1e-3,
            "stages": ("radius_noise", "shear"),
            "imperfections": dt.Imperfections(crosstalk_strength=0.5, crosstalk_sigma=0.004),
        },
    ),
    ElastomerTaxel: (
        {"probe_local_pos": GRID, "track_points": TRACK, "elastomer_shapes": (PAD,)},
        {
            **COMMON,
            "track_points": TRACK2,
            "elastomer_shapes": (dt.Box(size=[0.03, 0.03, 0.004]),),
            "probe_local_normal": (0.0, 0.6, 0.8),
            "lambda_d": 500.0,
            "lambda_s": 200.0,
            "dilate_scale": 0.5,
            "shear_scale": 0.5,
            "normal_exponent": 1.5,
            "contact_threshold": 2e-5,
            "release_threshold": -2e-4,
            "dilation_reg": 0.003,
            "compressibility": 0.5,
            "elastomer_thickness": 0.002,
            "fft_size": (8, 8),
            "use_fft": False,
            "stale_aabb": True,
            "stages": ("shear",),
        },
    ),
}
IMP_VALUES = {
    "hysteresis_strength": 0.3,
    "hysteresis_tau": 0.05,
    "random_walk": 1e-3,
    "noise": 0.02,
    "bias": (0.1, 0.0, 0.0, 0.0, 0.0, 0.2),
    "resolution": 0.01,
    "dead_taxel_probability": 0.2,
    "dead_taxel_value_range": (0.1, 0.2),
    "crosstalk_strength": 0.5,
    "crosstalk_sigma": 0.004,
    "crosstalk_kernel": np.full((3, 3), 1 / 9),
    "jitter": 0.005,
    "delay": 0.02,
    "dt": 0.01,
    "history_length": 3,
    "straight_through": True,
    "noise_generator": "threefry",
    "stages": ("noise",),
}
# options that need a companion to be valid on their own
IMP_WITH = {
    "hysteresis_strength": {"hysteresis_tau": 0.05},
    "crosstalk_strength": {"crosstalk_sigma": 0.004},
    "jitter": {"delay": 0.02, "dt": 0.01},
    "delay": {"dt": 0.01},
}
IMP_BASE = dict(hysteresis_tau=0.05)


def assert_same(a, b):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb, f"static structure differs:\n{ta}\n{tb}"
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def init_args(cls):
    return [f.name for f in dataclasses.fields(cls) if f.init]


@pytest.mark.parametrize("cls", list(CASES), ids=lambda c: c.__name__)
def test_every_option_round_trips_through_replace(cls):
    """``cls(**base, opt=v) == cls(**base).replace(opt=v)``, static structure and leaves, for
    every constructor argument; rebuilding from ``options()`` is the identity."""
    base, values = CASES[cls]
    assert set(init_args(cls)) - set(base) <= set(values), "an option has no test value"
    s0 = cls(**base)
    assert_same(cls(**s0.options()), s0)
    for name, v in values.items():
        want = cls(**{**base, name: v})
        assert_same(s0.replace(**{name: v}), want)
        assert_same(want.replace(**{name: getattr(s0, name)}), s0)


def test_imperfections_every_option_round_trips():
    assert set(init_args(dt.Imperfections)) <= set(IMP_VALUES)
    base = dt.Imperfections(**IMP_BASE)
    for name, v in IMP_VALUES.items():
        extra = IMP_WITH.get(name, {})
        want = dt.Imperfections(**{**IMP_BASE, **extra, name: v})
        got = base.replace(**extra, **{name: v})
        assert_same(got, want)


KEY = jax.random.key(3)


def _read(sensor, key=KEY):
    st = sensor.init_state(jax.random.key(1))
    for _ in range(2):
        st, r = sensor.step(st, INPUTS, key)
    return r


def test_the_reported_reproductions_now_agree():
    """The three cases of the issue: replace gave the option no effect."""
    kw = dict(probe_local_pos=GRID, probe_radius=0.002)
    kt = KinematicTaxel(**kw)
    a = _read(kt.replace(probe_radius_noise=5e-4)).measured.force
    b = _read(KinematicTaxel(**kw, probe_radius_noise=5e-4)).measured.force
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - _read(kt).measured.force).max() > 1e-3
    px = ProximityTaxel(probe_local_pos=GRID, track_points=TRACK)
    a = _read(px.replace(shear_coupling=0.5)).measured.force
    b = _read(ProximityTaxel(probe_local_pos=GRID, track_points=TRACK, shear_coupling=0.5))
    np.testing.assert_array_equal(a, b.measured.force)
    assert np.abs(a - _read(px).measured.force).max() > 1e-9
    imp = dt.Imperfections(hysteresis_tau=0.05).replace(hysteresis_strength=0.5)
    a = _read(KinematicTaxel(**kw, imperfections=imp)).measured.force
    full = dt.Imperfections(hysteresis_tau=0.05, hysteresis_strength=0.5)
    np.testing.assert_array_equal(a, _read(KinematicTaxel(**kw, imperfections=full)).measured.force)
    assert np.abs(a - _read(kt).measured.force).max() > 1e-3


STAGED = [
    (KinematicTaxel, "probe_radius_noise", 5e-4),
    (ContactProbe, "probe_radius_noise", 5e-4),
    (ProximityTaxel, "probe_radius_noise", 5e-4),
    (ProximityTaxel, "shear_coupling", 0.5),
    (ElastomerTaxel, "shear_scale", 0.5),
    (ElastomerTaxel, "lambda_s", 100.0),
]


@pytest.mark.parametrize("cls,name,v", STAGED, ids=lambda x: getattr(x, "__name__", str(x)))
def test_traced_option_of_an_off_stage_is_refused_and_on_stage_is_exact(cls, name, v):
    base = dict(CASES[cls][0])
    stage = cls._STAGE_OF[name]
    if cls is ElastomerTaxel:
        base["shear_scale"] = 0.0
    off = cls(**base)
    assert not off.stage_on(stage)
    with pytest.raises(ValueError, match=rf"{cls.__name__}\.{name}: its stage '{stage}' was off"):
        jax.jit(lambda x: off.replace(**{name: x}))(v)
    on = cls(**base, stages=(stage,))
    traced = jax.jit(lambda x: on.replace(**{name: x}))(v)
    assert_same(traced, cls(**{**base, "stages": (stage,), name: v}))
    # a stage that runs with a zero option reads exactly what the stage off reads
    np.testing.assert_array_equal(
        jax.tree.leaves(_read(on).measured), jax.tree.leaves(_read(off).measured)
    )


@pytest.mark.parametrize("name", sorted(dt.Imperfections._STAGE_OF))
def test_traced_chain_option_of_an_off_stage_is_refused(name):
    imp = dt.Imperfections(**IMP_BASE)
    v = jnp.asarray(IMP_VALUES.get(name, 0.1)) if name != "crosstalk_kernel" else None
    if v is None:
        return  # None -> array changes the static structure (tested below)
    with pytest.raises(ValueError, match=rf"Imperfections\.{name}: its stage"):
        jax.jit(lambda x: imp.replace(**{name: x}))(v)


def test_all_chain_stages_on_with_zero_options_equal_all_off():
    """Every stage listed in ``stages`` with zero options is exactly the identity."""
    kw = dict(probe_local_pos=GRID, probe_radius=0.002)
    on = dt.Imperfections(
        stages=dt.imperfections.STAGES,
        hysteresis_tau=0.05,
        crosstalk_sigma=0.004,
        delay=0.01,
        dt=0.01,
    )
    off = dt.Imperfections(delay=0.01, dt=0.01)
    a = _read(KinematicTaxel(**kw, imperfections=on, stages=("radius_noise",)))
    b = _read(KinematicTaxel(**kw, imperfections=off))
    assert_same(a, b)


def test_refusals_name_the_option():
    kt = KinematicTaxel(probe_local_pos=GRID, probe_radius=0.002)
    with pytest.raises(TypeError, match="no option named 'stiffness'"):
        kt.replace(stiffness=1.0)
    with pytest.raises(TypeError, match="active_stages: derived"):
        kt.replace(active_stages=("radius_noise",))
    with pytest.raises(ValueError, match=r"KinematicTaxel\.normal_exponent: expected"):
        kt.replace(normal_exponent=0.5)
    with pytest.raises(ValueError, match=r"KinematicTaxel\.normal_exponent: expected"):
        jax.jit(lambda s: s.replace(normal_exponent=0.5))(kt)  # concrete value, traced sensor
    with pytest.raises(ValueError, match=r"KinematicTaxel\.stages: derived static data"):
        jax.jit(lambda s: s.replace(stages=("radius_noise",)))(kt)
    with pytest.raises(ValueError, match=r"KinematicTaxel\.probe_radius: a traced value"):
        jax.jit(lambda r: kt.replace(probe_radius=r))(jnp.ones(4))
    with pytest.raises(ValueError, match=r"KinematicTaxel\.imperfections: a traced replace"):
        jax.jit(lambda x: kt.replace(imperfections=dt.Imperfections(noise=0.1).replace(noise=x)))(
            0.1
        )
    with pytest.raises(TypeError, match=r"KinematicTaxel\.normal_stiffness: options are validated"):
        jax.jit(lambda k: KinematicTaxel(probe_local_pos=GRID, normal_stiffness=k))(1.0)
    with pytest.raises(ValueError, match=r"Imperfections\.stages: stage 'noise' has a non-zero"):
        dt.Imperfections(noise=0.1, stages=("bias",))
    with pytest.raises(ValueError, match=r"Imperfections\.stages: unknown stage"):
        dt.Imperfections(stages=("nois",))
    with pytest.raises(ValueError, match=r"ContactDepthProbe\.stages: unknown stage"):
        ContactDepthProbe(stages=("shear",))
    # per-probe options take any of their documented shapes under a trace
    s = jax.jit(lambda g: kt.replace(probe_gain=g))(jnp.full(9, 1.1))
    assert s.probe_gain.shape == (9,)


def test_gradient_through_a_replaced_option_matches_finite_differences():
    """d reading / d option through ``replace`` (traced), for a stage enabled from zero."""
    from difftaxel.testing import check_grad_fd

    kt = KinematicTaxel(
        probe_local_pos=GRID,
        probe_radius=0.002,
        imperfections=dt.Imperfections(stages=("hysteresis",), hysteresis_tau=0.05),
    )

    def loss(p):
        imp = kt.imperfections.replace(hysteresis_strength=p["s"])
        s = kt.replace(normal_stiffness=p["k"], imperfections=imp)
        return jnp.sum(_read(s, None).measured.force ** 2)

    check_grad_fd(loss, {"s": jnp.asarray(0.1), "k": jnp.asarray(900.0)}, jit=True)
    g = jax.grad(loss)({"s": jnp.asarray(0.0), "k": jnp.asarray(900.0)})
    assert abs(float(g["s"])) > 0
