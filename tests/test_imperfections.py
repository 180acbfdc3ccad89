"""The imperfection chain: each stage against its closed form, Genesis's test scenes 5 and 9,
rollout == loop, gradients through time, sharding over 8 simulated devices, bad input."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import difftaxel as dt
from difftaxel.imperfections import Imperfections, crosstalk_correlate
from difftaxel.rollout import rollout
from difftaxel.sensors import ContactDepthProbe, KinematicTaxel, SensorInputs, make_inputs
from difftaxel.testing import assert_trees_close, check_grad_fd

IDENT = np.array([0.0, 0, 0, 0, 0, 0, 1])
FLOOR = dt.Bodies((dt.Plane(),), IDENT[None])
PROBE = dict(probe_local_pos=[[0.0, 0.0, -0.05]], probe_radius=0.06)  # depth = 0.11 - z


def box_at(z, dt_=0.01):
    return make_inputs(np.r_[0, 0, z, 0, 0, 0, 1.0], FLOOR, dt=dt_)


def stack(inputs):
    return jax.tree.map(lambda *x: jnp.stack(x), *inputs)


def run(sensor, zs, key=None, state=None, dt_=0.01):
    state = sensor.init_state(key) if state is None else state
    return rollout(sensor, state, stack([box_at(z, dt_) for z in zs]), key)


# ------------------------------------------------------------------------- closed forms


def test_hysteresis_step_response_genesis_test5():
    s, tau, dt_ = 0.5, 0.05, 0.01
    a = np.exp(-dt_ / tau)
    hyst = ContactDepthProbe(
        **PROBE, imperfections=Imperfections(hysteresis_strength=s, hysteresis_tau=tau)
    )
    zs = [1.0] + [0.08] * 5
    _, r = run(hyst, zs)
    D = 0.11 - 0.08
    gt = np.asarray(r.ground_truth)[:, 0]
    m = np.asarray(r.measured)[:, 0]
    np.testing.assert_allclose(gt[1:], D, atol=1e-14)
    np.testing.assert_allclose(m[0], 0.0)
    np.testing.assert_allclose(m[1:], D * (1 + s * a ** np.arange(5)), rtol=1e-12)
    # steady-state gain 1
    _, r = run(hyst, [0.08] * 400)
    np.testing.assert_allclose(np.asarray(r.measured)[-1, 0], D, rtol=1e-12)


def test_delay_shift_zeros_first_and_rounding():
    zs = [0.1, 0.09, 0.08, 0.07, 0.06, 0.05]
    plain = ContactDepthProbe(**PROBE)
    gt = np.asarray(run(plain, zs)[1].measured)[:, 0]
    delayed = ContactDepthProbe(**PROBE, imperfections=Imperfections(delay=0.02, dt=0.01))
    m = np.asarray(run(delayed, zs)[1].measured)[:, 0]
    np.testing.assert_allclose(m, np.r_[0, 0, gt[:-2]], atol=1e-15)
    tiny = ContactDepthProbe(**PROBE, imperfections=Imperfections(delay=0.004, dt=0.01))
    np.testing.assert_allclose(np.asarray(run(tiny, zs)[1].measured)[:, 0], gt, atol=1e-15)


def test_jitter_brackets_between_delayed_and_older():
    zs = np.linspace(0.1, 0.05, 12)
    plain = np.asarray(run(ContactDepthProbe(**PROBE), zs)[1].measured)[:, 0]
    jit = ContactDepthProbe(**PROBE, imperfections=Imperfections(delay=0.01, jitter=0.01, dt=0.01))
    m = np.asarray(run(jit, zs, key=jax.random.key(3))[1].measured)[:, 0]
    delayed = np.r_[0, plain[:-1]]
    older = np.r_[0, 0, plain[:-2]]
    assert np.all(np.isclose(m, delayed) | np.isclose(m, older))
    assert np.any(~np.isclose(m, delayed))  # the jitter did move some reads


@pytest.mark.parametrize(
    "delay, jitter, steps",
    [(0.004, 0.004, 0), (0.03, 0.01, 3), (0.03, 0.0, 3)],
    ids=["round-to-0-steps", "3-steps-jitter", "3-steps-plain"],
)
def test_delay_ring_edges(delay, jitter, steps):
    # the ring keeps only the slots a read can need (delay_steps, + 1 with jitter, 2 when the
    # delay rounds to 0 steps): every read is x[k - steps] or, jittered, x[k - steps - 1]
    zs = np.linspace(0.1, 0.05, 14)
    plain = np.asarray(run(ContactDepthProbe(**PROBE), zs)[1].measured)[:, 0]
    imp = Imperfections(delay=delay, jitter=jitter, dt=0.01)
    assert imp.delay_steps == steps
    m = np.asarray(
        run(ContactDepthProbe(**PROBE, imperfections=imp), zs, jax.random.key(5))[1].measured
    )
    m = m[:, 0]
    delayed = np.r_[np.zeros(steps), plain[: len(zs) - steps]]
    older = np.r_[np.zeros(steps + 1), plain[: len(zs) - steps - 1]]
    if jitter == 0:
        np.testing.assert_allclose(m, delayed, atol=1e-15)
    else:
        assert np.all(np.isclose(m, delayed, atol=1e-15) | np.isclose(m, older, atol=1e-15))
        assert np.any(~np.isclose(m, delayed)) and np.any(~np.isclose(m, older))


def test_history_newest_first_undelayed():
    zs = [0.1, 0.09, 0.08]
    plain = np.asarray(run(ContactDepthProbe(**PROBE), zs)[1].measured)[:, 0]
    hist = ContactDepthProbe(
        **PROBE, imperfections=Imperfections(history_length=3, delay=0.01, dt=0.01)
    )
    m = np.asarray(run(hist, zs)[1].measured)
    assert m.shape == (3, 3, 1)
    np.testing.assert_allclose(m[-1, :, 0], plain[::-1], atol=1e-15)
    np.testing.assert_allclose(m[0, :, 0], [plain[0], 0, 0], atol=1e-15)


def test_deep_rings_are_one_buffer_with_the_same_readings():
    """A delay or history deeper than TUPLE_RING_MAX: one circular buffer, the same reads as
    the tuple ring (every read is x[k - steps], or one older with jitter), and a program whose
    size does not grow with the depth."""
    from difftaxel.imperfections import TUPLE_RING_MAX

    zs = np.linspace(0.1, 0.05, 50)
    plain = np.asarray(run(ContactDepthProbe(**PROBE), zs)[1].measured)[:, 0]
    steps = TUPLE_RING_MAX + 4
    imp = Imperfections(delay=steps * 0.01, jitter=0.01, dt=0.01)
    assert imp.ring_depth > TUPLE_RING_MAX
    m = np.asarray(
        run(ContactDepthProbe(**PROBE, imperfections=imp), zs, jax.random.key(5))[1].measured
    )[:, 0]
    delayed = np.r_[np.zeros(steps), plain[: len(zs) - steps]]
    older = np.r_[np.zeros(steps + 1), plain[: len(zs) - steps - 1]]
    assert np.all(np.isclose(m, delayed, atol=1e-15) | np.isclose(m, older, atol=1e-15))
    assert np.any(m > 0)
    hist = Imperfections(history_length=40, dt=0.01)
    h = np.asarray(run(ContactDepthProbe(**PROBE, imperfections=hist), zs[:45])[1].measured)
    assert h.shape == (45, 40, 1)
    np.testing.assert_allclose(h[-1, :, 0], plain[:45][::-1][:40], atol=1e-15)

    def program(depth):
        s = ContactDepthProbe(**PROBE, imperfections=Imperfections(history_length=depth))
        st = s.init_state()
        inp = box_at(0.1)
        return len(jax.jit(s.step).lower(st, inp).as_text())

    assert program(4096) < 1.2 * program(64)


def test_quantisation_bias_noise_walk():
    imp = Imperfections(resolution=0.01, bias=0.0)
    st = imp.init(None, 4, 1)
    x = jnp.array([[0.005, 0.015, 0.0249, -0.005]])  # [C, N]; half to even: 0, 0.02, 0.02, -0
    _, y = imp.apply_hardware(st, x, None)
    np.testing.assert_allclose(y[0], [0.0, 0.02, 0.02, 0.0], atol=1e-15)
    g = jax.grad(lambda x: imp.apply_hardware(st, x, None)[1].sum())(x)
    np.testing.assert_array_equal(g, 0.0)  # plain rounding: zero gradient
    ste = Imperfections(resolution=0.01, straight_through=True)
    g = jax.grad(lambda x: ste.apply_hardware(st, x, None)[1].sum())(x)
    np.testing.assert_array_equal(g, 1.0)
    # bias and noise: mean and std over many channels; reparameterised gradient in noise
    big = Imperfections(noise=0.2, bias=0.5)
    sb = big.init(None, 2000, 3)
    _, y = big.apply_hardware(sb, jnp.zeros((3, 2000)), jax.random.key(0))
    assert abs(float(y.mean()) - 0.5) < 0.01 and abs(float(y.std()) - 0.2) < 0.01
    gn = jax.grad(
        lambda n: jnp.sum(
            big.replace(noise=n).apply_hardware(sb, jnp.zeros((3, 2000)), jax.random.key(0))[1] ** 2
        )
    )(0.2)
    assert np.isfinite(gn) and gn > 0
    # random walk: the offset accumulates, variance ~ k sigma^2
    rw = Imperfections(random_walk=0.1)
    s = rw.init(None, 5000, 1)
    for k in range(4):
        s, y = rw.apply_hardware(s, jnp.zeros((1, 5000)), jax.random.key(10 + k))
    assert abs(float(y.std()) - 0.1 * 2.0) < 0.01


@pytest.mark.parametrize("generator", ["hash_normal", "standard_normal"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_normal_generators_moments_determinism_and_tails(dtype, generator):
    from statistics import NormalDist

    from difftaxel import imperfections

    draw = getattr(imperfections, generator)
    n = 200_000
    z = np.asarray(draw(jax.random.key(3), (n,), dtype), np.float64)
    assert z.dtype == np.float64 and np.all(np.isfinite(z))
    se = 1.0 / np.sqrt(n)
    assert abs(z.mean()) < 5 * se and abs(z.std() - 1.0) < 5 * se * 0.71
    kurt = np.mean((z - z.mean()) ** 4) / z.var() ** 2
    assert abs(kurt - 3.0) < 5 * np.sqrt(24.0 / n)
    # quantiles against the exact normal CDF (Kolmogorov-Smirnov bound at ~1e-3 level)
    zs = np.sort(z)
    cdf = np.array([NormalDist().cdf(v) for v in zs[:: n // 400]])
    emp = (np.arange(0, n, n // 400) + 0.5) / n
    assert np.max(np.abs(cdf - emp)) < 1.63 / np.sqrt(n)
    # tails bounded by the uniform's resolution, as documented: r <= sqrt(2 m log 2)
    m = 24 if dtype == jnp.float32 else 53
    assert np.max(np.abs(z)) <= np.sqrt(2 * m * np.log(2)) + 1e-6
    # same key, same draws; another key, uncorrelated draws; lag-1 and pair-mates uncorrelated
    np.testing.assert_array_equal(np.asarray(draw(jax.random.key(3), (n,), dtype)), z)
    z2 = np.asarray(draw(jax.random.key(4), (n,), dtype), np.float64)
    assert abs(np.corrcoef(z, z2)[0, 1]) < 5 * se
    assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < 5 * se
    assert abs(np.corrcoef(z[: n // 2], z[n // 2 :])[0, 1]) < 5 * se * 1.42  # cos / sin mates
    # the pair mates are independent, not only uncorrelated: |x| and |y| too
    a, b = np.abs(z[: n // 2]), np.abs(z[n // 2 :])
    assert abs(np.corrcoef(a, b)[0, 1]) < 5 * se * 1.42
    # vmapped over split keys, each environment gets its own stream
    zk = jax.vmap(lambda k: draw(k, (1000,), dtype))(jax.random.split(jax.random.key(5), 8))
    c = np.corrcoef(np.asarray(zk, np.float64))
    assert np.max(np.abs(c - np.eye(8))) < 0.15


@pytest.mark.parametrize(
    "generator", [pytest.param("hash_normal", marks=pytest.mark.slow), "standard_normal"]
)
def test_normal_generators_odd_and_empty_shapes(generator):
    # pairs of normals: an odd count drops the last mate; () and size-0 shapes work
    from difftaxel import imperfections

    draw = getattr(imperfections, generator)
    for shape in ((), (1,), (5,), (3, 7), (0,), (2, 0, 3)):
        for dtype in (jnp.float32, jnp.float64):
            z = draw(jax.random.key(0), shape, dtype)
            assert z.shape == shape and z.dtype == dtype and bool(jnp.all(jnp.isfinite(z)))
    # an odd count: the same key gives the same draws
    a, b = draw(jax.random.key(1), (3,), jnp.float32), draw(jax.random.key(1), (3,), jnp.float32)
    np.testing.assert_array_equal(a, b)


def _box_muller_exact(br, ba, br2, ba2, f64):
    """The documented transform in float64 numpy: radius uniform, half turn, fraction."""
    br, ba = br.astype(np.uint64), ba.astype(np.uint64)
    if f64:
        u = (br.astype(np.float64) * 2.0**21 + (br2.astype(np.uint64) >> 11) + 1.0) * 2.0**-53
        ka = (ba & 0x7FFFFFFF).astype(np.float64) * 2.0**21 + (ba2.astype(np.uint64) >> 11)
        f = ka * 2.0**-52 + (2.0**-53 - 0.5)
    else:
        u = ((br >> 8).astype(np.float64) + 1.0) * 2.0**-24
        f = ((ba >> 8) & 0x7FFFFF).astype(np.float64) * 2.0**-23 + (2.0**-24 - 0.5)
    t = (ba >> 31).astype(np.float64) * np.pi + f * np.pi
    r = np.sqrt(-2.0 * np.log(u))
    return r * np.cos(t), r * np.sin(t)


def _lowbias32_np(h):
    h = np.asarray(h, np.uint32)
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x7FEB352D)
    h = h ^ (h >> np.uint32(15))
    h = h * np.uint32(0x846CA68B)
    return h ^ (h >> np.uint32(16))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_hash_normal_is_the_documented_counter_hash(dtype):
    """Word ``i`` hashes counter ``i``; in float64 each draw's second word hashes counter
    ``n + i`` (independent of the first, so the uniforms hold 53 bits), through the
    documented transform."""
    from difftaxel.draws import _seeds, hash_normal

    n = 10
    s0, s1 = (np.uint32(int(x)) for x in _seeds(jax.random.key(7)))
    word = lambda i: _lowbias32_np(_lowbias32_np(np.uint32(i) ^ s0) + s1)  # noqa: E731
    b = word(np.arange(n, dtype=np.uint32))
    f64 = dtype == jnp.float64
    c = word(np.arange(n, 2 * n, dtype=np.uint32)) if f64 else b
    x, y = _box_muller_exact(b[:5], b[5:], c[:5], c[5:], f64)
    z = np.asarray(hash_normal(jax.random.key(7), (n,), dtype), np.float64)
    np.testing.assert_allclose(z, np.r_[x, y], rtol=1e-13 if f64 else 2e-6, atol=1e-13)
    # more draws than counters: an error, never repeated words (nothing is allocated)
    too_many = (2**31 + 2,) if f64 else (2**32 + 2,)
    with pytest.raises(ValueError, match="hash_normal: .* draws need more than 2"):
        hash_normal(jax.random.key(7), too_many, dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_box_muller_against_float64_including_extreme_words(dtype):
    # random words plus the extremes: radius word 0 (u = 2^-m, the largest radius) and all
    # ones (u = 1, r = 0); angle words at the edges of the half turns and of the fraction
    from difftaxel.draws import _box_muller

    rng = np.random.default_rng(0)
    w = lambda n: rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)  # noqa: E731
    ends = np.array([0, 2**32 - 1, 2**30 - 1, 2**30, 2**31 - 1, 2**31, 3 * 2**30], np.uint32)
    br = np.r_[w(20_000), np.repeat(np.array([0, 2**32 - 1], np.uint32), ends.size)]
    ba = np.r_[w(20_000), ends, ends]
    br2 = np.r_[w(20_000), np.repeat(np.array([0, 2**32 - 1], np.uint32), ends.size)]
    ba2 = w(br.size)
    f64 = dtype == jnp.float64
    args = [jnp.asarray(v) for v in (br, ba)] + (
        [jnp.asarray(br2), jnp.asarray(ba2)] if f64 else [None, None]
    )
    x, y = jax.jit(_box_muller, static_argnames="dtype")(*args, dtype=dtype)
    ex, ey = _box_muller_exact(br, ba, br2, ba2, f64)
    assert np.all(np.isfinite(x)) and np.all(np.isfinite(y))
    tol = 1e-6 if not f64 else 1e-13  # float32: measured 7.2e-7 for |z| up to 5.8
    np.testing.assert_allclose(np.asarray(x, np.float64), ex, atol=tol)
    np.testing.assert_allclose(np.asarray(y, np.float64), ey, atol=tol)
    # the extreme radius words: the documented bound and exact zero
    m = 53 if f64 else 24
    r = np.hypot(np.asarray(x, np.float64), np.asarray(y, np.float64))
    n_end = ends.size
    np.testing.assert_allclose(r[-2 * n_end : -n_end], np.sqrt(2 * m * np.log(2)), rtol=1e-6)
    assert np.all(r[-n_end:] == 0.0)


def test_chain_layout_is_channels_first():
    """The chain runs on ``[C, N]`` values; options given ``[N, C]``-broadcastable (per probe,
    per channel) land on their probe and channel; a value in another layout is refused."""
    N, C = 50, 6
    rng = np.random.default_rng(0)
    bias = rng.uniform(-0.1, 0.1, (N, C))
    res = rng.uniform(0.01, 0.02, (1, C))
    imp = Imperfections(
        hysteresis_strength=0.4,
        hysteresis_tau=0.02,
        bias=bias,
        resolution=res,
        dead_taxel_probability=0.3,
        dead_taxel_value_range=(0.5, 0.7),
        delay=0.01,
        dt=0.005,
    )
    st = imp.init(jax.random.key(0), N, C)
    assert st.hyst_xi.shape == (C, N) and st.ring[0].shape == (C, N)
    assert 0 < int(st.dead.sum()) < N
    a = np.exp(-0.005 / 0.02)
    xi, prev, outs = np.zeros((C, N)), np.zeros((C, N)), []
    for _ in range(4):
        v = rng.normal(size=(C, N))
        st, y = imp.apply_hysteresis(st, jnp.asarray(v), 0.005)
        st, y = imp.apply_hardware(st, y, None)
        st, y = imp.apply_delay(st, y, None)
        xi = a * xi + (v - prev)
        prev = v
        ref = v + 0.4 * xi + bias.T
        ref = np.round(ref / res.T) * res.T
        ref = np.where(np.asarray(st.dead)[None], np.asarray(st.dead_value)[None], ref)
        outs.append(ref)
        if len(outs) >= 3:  # delay 0.01 / dt 0.005 = 2 steps
            np.testing.assert_allclose(y, outs[-3], rtol=0, atol=1e-12)
    # per-channel noise scales
    sig = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    noisy = Imperfections(noise=sig[None, :])
    _, z = noisy.apply_hardware(noisy.init(None, 4000, C), jnp.zeros((C, 4000)), jax.random.key(1))
    np.testing.assert_allclose(np.asarray(z).std(axis=1), sig, rtol=0.05)
    with pytest.raises(ValueError, match=r"value: .*\[C, N\] layout"):
        imp.apply_hardware(st, jnp.zeros((N, C)), None)
    with pytest.raises(ValueError, match=r"value: .*\[C, N\] layout"):
        imp.apply_hysteresis(st, jnp.zeros((N, C)), 0.005)


def test_state_holds_only_running_stages_and_refuses_stale_use():
    """A stage that does not run keeps no state (None), so a bare sensor's state is its gain
    alone; a state made before a stage was switched on is a one-line error naming the field,
    never a silent skip of the stage."""
    kt = KinematicTaxel(**PROBE)
    st = kt.init_state()
    ch = st.chain
    assert ch.hyst_xi is None and ch.walk is None and ch.dead is None and ch.ring == ()
    assert [x.shape for x in jax.tree.leaves(st)] == [(1,)]
    cases = [
        (dict(hysteresis_strength=0.3, hysteresis_tau=0.05), "state.hyst_xi"),
        (dict(random_walk=0.01), "state.walk"),
        (dict(dead_taxel_probability=0.5), "state.dead"),
        (dict(delay=0.02, dt=0.01), "state.ring"),
    ]
    for kw, field in cases:
        on = kt.replace(imperfections=dt.Imperfections(**kw))
        with pytest.raises(ValueError, match=field + r".*init_state again"):
            on.step(st, box_at(0.0), jax.random.key(0))
        fresh = on.init_state(jax.random.key(0))  # a new state works
        on.step(fresh, box_at(0.0), jax.random.key(0))


@pytest.mark.parametrize("gen", ["hash", "threefry"])
def test_each_generator_in_the_chain(gen):
    """Either generator drives white noise and the random walk with the stated statistics
    and a reparameterised gradient; the default is the hash."""
    assert Imperfections().noise_generator == "hash"
    imp = Imperfections(noise=0.2, random_walk=0.05, noise_generator=gen)
    st = imp.init(None, 4000, 3)
    st1, y = imp.apply_hardware(st, jnp.zeros((3, 4000)), jax.random.key(0))
    var = 0.2**2 + 0.05**2
    assert abs(float(y.std()) - np.sqrt(var)) < 0.01 and abs(float(y.mean())) < 0.01
    # the walk and the white noise are independent draws (not the same numbers)
    r = np.corrcoef(np.asarray(st1.walk).ravel(), np.asarray(y - st1.walk).ravel())[0, 1]
    assert abs(r) < 0.03
    _, y2 = imp.apply_hardware(st, jnp.zeros((3, 4000)), jax.random.key(0))
    np.testing.assert_array_equal(y, y2)
    g = jax.grad(
        lambda n: jnp.sum(
            imp.replace(noise=n).apply_hardware(st, jnp.zeros((3, 4000)), jax.random.key(0))[1] ** 2
        )
    )(0.2)
    assert np.isfinite(g) and g > 0
    f = jax.jit(lambda s, k: imp.apply_hardware(s, jnp.zeros((3, 4000)), k)[1])
    np.testing.assert_allclose(f(st, jax.random.key(0)), y, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("gen", [pytest.param("threefry", marks=pytest.mark.slow), "hash"])
def test_hardware_draws_are_the_generators_numbers(gen):
    """The hardware stages read the draws in halves (one stage's each, or the upper and lower
    channels) without joining them: the numbers are exactly those of one call of the
    generator of shape ``[stages, C, N]``, for odd and even ``C``, with bias, resolution and
    dead taxels after them."""
    from difftaxel.draws import hash_normal, normal_halves, standard_normal

    draw = hash_normal if gen == "hash" else standard_normal
    key = jax.random.key(3)
    for kw in (dict(noise=0.2), dict(random_walk=0.05), dict(noise=0.2, random_walk=0.05)):
        for C in (1, 3, 6):
            N = 5
            extra = dict(bias=0.01, resolution=0.001, dead_taxel_probability=0.3)
            imp = Imperfections(noise_generator=gen, **kw, **extra)
            st = imp.init(jax.random.key(1), N, C)
            v = jnp.linspace(-1.0, 1.0, C * N).reshape(C, N)
            st1, y = imp.apply_hardware(st, v, key)
            z = draw(key, (len(kw), C, N), v.dtype)
            walk = st.walk + 0.05 * z[0] if "random_walk" in kw else None
            ref = v + (walk if walk is not None else 0.0)
            if "noise" in kw:
                ref = ref + 0.2 * z[-1]
            ref = jnp.round((ref + 0.01) / 0.001) * 0.001
            ref = jnp.where(st.dead[None], st.dead_value[None], ref)
            np.testing.assert_array_equal(y, ref)
            if walk is not None:
                np.testing.assert_array_equal(st1.walk, walk)
    a, b = normal_halves(key, 10, jnp.float32, gen)
    np.testing.assert_array_equal(jnp.concatenate([a, b]), draw(key, (10,), jnp.float32))
    jitted = jax.jit(lambda k: normal_halves(k, 10, jnp.float32, gen))
    # to rounding: compiled, the polynomials' multiply-adds may round once where eager rounds
    # twice (about a quarter of float32 draws differ in their last bit)
    np.testing.assert_allclose(
        jnp.concatenate(jitted(key)), jnp.concatenate([a, b]), rtol=1e-6, atol=1e-7
    )
    keys = jax.random.split(key, 3)
    va, vb = jax.vmap(lambda k: normal_halves(k, 10, jnp.float32, gen))(keys)
    for i in range(3):
        li = normal_halves(keys[i], 10, jnp.float32, gen)
        np.testing.assert_array_equal(va[i], li[0])
        np.testing.assert_array_equal(vb[i], li[1])
    with pytest.raises(ValueError, match="n must be even"):
        normal_halves(key, 7, jnp.float32, gen)


def test_float32_log_of_the_uniforms_within_one_ulp():
    """Box-Muller's float32 log of its uniforms ``u = k 2^-24`` (``k = 1 .. 2^24``) is within
    one ulp of the exact log: every 7th uniform, the smallest, 1, and both sides of each
    ``sqrt(2) 2^-e`` fold of the mantissa."""
    from difftaxel.draws import _log_unit32

    k = np.arange(1, 2**24 + 1, 7, dtype=np.int64)
    folds = [np.floor(np.sqrt(2.0) * 2.0**e) + d for e in range(24) for d in (-1.0, 0.0, 1.0)]
    edge = np.array([1, 2, 3, 2**24 - 1, 2**24] + folds)
    k = np.concatenate([k, edge[(edge >= 1) & (edge <= 2**24)].astype(np.int64)])
    u = (k * 2.0**-24).astype(np.float32)
    got = np.asarray(jax.jit(_log_unit32)(jnp.asarray(u)), np.float64)
    exact = np.log(u.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    nz = exact != 0
    assert np.max(np.abs(got - exact)[nz] / ulp[nz]) < 1.0
    assert got[u == 1.0].tolist() == [0.0] * int(np.sum(u == 1.0))


def test_dead_taxels_every_channel_and_resample():
    imp = Imperfections(dead_taxel_probability=1.0, dead_taxel_value_range=(0.123, 0.456))
    st = imp.init(jax.random.key(0), 8, 6)
    _, y = imp.apply_hardware(st, jnp.ones((6, 8)), None)
    assert np.all((y >= 0.123) & (y <= 0.456))
    np.testing.assert_allclose(y, np.repeat(np.asarray(y[:1]), 6, 0))
    st2 = imp.init(jax.random.key(1), 8, 6)
    assert not np.allclose(st.dead_value, st2.dead_value)
    half = Imperfections(dead_taxel_probability=0.5, dead_taxel_value_range=(0.0, 0.0))
    frac = float(half.init(jax.random.key(2), 4000, 1).dead.mean())
    assert 0.45 < frac < 0.55


def test_genesis_test5_gain_and_dead_resample_over_envs():
    """Genesis test 5: gain resample (0.5, 1.5) and dead p = 1 in [0.123, 0.456] over 8 envs."""
    E = 8
    keys = jax.random.split(jax.random.key(0), E)
    gain = ContactDepthProbe(**PROBE, probe_gain_resample_range=(0.5, 1.5))
    dead = ContactDepthProbe(
        **PROBE,
        imperfections=Imperfections(
            dead_taxel_probability=1.0, dead_taxel_value_range=(0.123, 0.456)
        ),
    )
    inp = box_at(0.08)

    def one(sensor, k):
        st = sensor.init_state(k)
        return sensor.step(st, inp, k)[1]

    for k0 in (0, 1):  # a second reset redraws both
        keys = jax.random.split(jax.random.key(k0), E)
        rg = jax.vmap(lambda k: one(gain, k))(keys)
        ratio = np.asarray(rg.measured / rg.ground_truth)[:, 0]
        assert np.all((ratio >= 0.5) & (ratio <= 1.5)) and ratio.std() > 0.01
        rd = jax.vmap(lambda k: one(dead, k))(keys)
        v = np.asarray(rd.measured)[:, 0]
        assert np.all((v >= 0.123) & (v <= 0.456)) and v.std() > 0.01
        assert np.all(np.asarray(rd.ground_truth) > 0)


# ------------------------------------------------------------------------- crosstalk


def test_crosstalk_correlate_matches_direct_sum():
    rng = np.random.default_rng(0)
    f = rng.standard_normal((5, 6, 2))
    K = rng.standard_normal((3, 5))
    out = np.asarray(crosstalk_correlate(jnp.asarray(f), jnp.asarray(K)))
    pad = np.pad(f, ((1, 1), (2, 2), (0, 0)))
    ref = sum(K[i, j] * pad[i : i + 5, j : j + 6] for i in range(3) for j in range(5))
    np.testing.assert_allclose(out, ref, atol=1e-12)


@pytest.fixture(scope="module")
def crosstalk_scene():
    """Genesis test 9: fixed box 0.2 (top 0.25), sphere r 0.025 1 cm in, 5x5 grid pitch 0.03."""
    grid = np.stack(np.meshgrid(np.arange(5), np.arange(5), indexing="xy"), -1)
    grid = np.concatenate([(grid - 2) * 0.03, np.full((5, 5, 1), 0.1)], -1)
    sphere = dt.Bodies((dt.Sphere(radius=0.025),), np.array([[0, 0, 0.265, 0, 0, 0, 1.0]]))
    inp = make_inputs(np.array([0, 0, 0.15, 0, 0, 0, 1.0]), sphere)
    kw = dict(
        probe_local_pos=grid,
        probe_radius=0.02,
        normal_stiffness=100.0,
        normal_damping=0.0,
        shear_scalar=0.0,
        twist_scalar=0.0,
    )
    return grid, inp, kw


def _read(sensor, inp):
    return jax.jit(lambda s, i: s.step(s.init_state(), i)[1])(sensor, inp)


def test_genesis_test9_crosstalk(crosstalk_scene):
    grid, inp, kw = crosstalk_scene
    blur = np.array([[0.03, 0.07, 0.03], [0.07, 0.6, 0.07], [0.03, 0.07, 0.03]])
    plain = _read(KinematicTaxel(**kw), inp)
    gauss_s = KinematicTaxel(
        **kw, imperfections=Imperfections(crosstalk_strength=0.6, crosstalk_sigma=0.03)
    )
    assert gauss_s.crosstalk_support == (4, 4)  # 9x9 from the float32 spacing
    gauss = _read(gauss_s, inp)
    lam0 = _read(
        KinematicTaxel(
            **kw, imperfections=Imperfections(crosstalk_strength=0.0, crosstalk_sigma=0.05)
        ),
        inp,
    )
    flat = _read(KinematicTaxel(**{**kw, "probe_local_pos": grid.reshape(-1, 3)}), inp)
    ident = _read(
        KinematicTaxel(**kw, imperfections=Imperfections(crosstalk_kernel=np.pad([[1.0]], 1))), inp
    )
    blurred = _read(KinematicTaxel(**kw, imperfections=Imperfections(crosstalk_kernel=blur)), inp)
    normal_blur = _read(
        KinematicTaxel(
            **kw, imperfections=Imperfections(crosstalk_kernel=np.stack([blur, np.pad([[1.0]], 1)]))
        ),
        inp,
    )
    shear_blur = _read(
        KinematicTaxel(
            **kw, imperfections=Imperfections(crosstalk_kernel=np.stack([np.pad([[1.0]], 1), blur]))
        ),
        inp,
    )
    Fz = lambda r: np.asarray(r.measured.force)[..., 2]  # noqa: E731
    for r in (gauss, lam0, ident, blurred):
        np.testing.assert_array_equal(r.ground_truth.force, plain.ground_truth.force)
    np.testing.assert_array_equal(plain.measured.force, plain.ground_truth.force)
    p = Fz(plain)
    assert np.unravel_index(np.argmax(np.abs(p)), p.shape) == (2, 2)
    assert np.abs(Fz(gauss)).max() < np.abs(p).max()
    assert abs(p[0, 0]) < 1e-4 and abs(Fz(gauss)[0, 0]) > 1e-4
    np.testing.assert_allclose(Fz(gauss).sum(), p.sum(), rtol=0.05)
    np.testing.assert_array_equal(Fz(lam0), p)
    np.testing.assert_array_equal(
        np.asarray(flat.ground_truth.force).reshape(5, 5, 3), plain.ground_truth.force
    )
    np.testing.assert_allclose(ident.measured.force, plain.measured.force, atol=1e-6)
    assert np.abs(Fz(blurred)).max() < np.abs(p).max()
    np.testing.assert_allclose(Fz(blurred).sum(), p.sum(), rtol=0.05)
    assert np.abs(Fz(normal_blur) - p).max() > 1e-4
    np.testing.assert_allclose(Fz(shear_blur), p, atol=1e-6)


def test_crosstalk_gradient_in_sigma_and_strength(crosstalk_scene):
    _, inp, kw = crosstalk_scene
    s = KinematicTaxel(
        **kw, imperfections=Imperfections(crosstalk_strength=0.6, crosstalk_sigma=0.03)
    )
    st = s.init_state()

    def f(params):
        lam, sig = params
        imp = s.imperfections.replace(crosstalk_strength=lam, crosstalk_sigma=sig)
        r = s.replace(imperfections=imp).step(st, inp)[1].measured.force
        return jnp.sum(r[..., 2] * jnp.linspace(0.1, 1.0, 25).reshape(5, 5))

    check_grad_fd(
        jax.jit(f), (jnp.asarray(0.6), jnp.asarray(0.03)), step=1e-7, rtol=1e-4, atol=1e-9
    )


# ------------------------------------------------------------------------- rollout


def test_rollout_equals_loop_and_gradient_through_time():
    s = KinematicTaxel(
        probe_local_pos=[[0.0, 0, 0], [0.004, 0, 0]],
        probe_radius=0.002,
        normal_exponent=1.5,
        imperfections=Imperfections(
            hysteresis_strength=0.5, hysteresis_tau=0.05, noise=1e-3, bias=1e-4
        ),
    )
    T = 50
    zs = 0.0115 - 0.001 * np.sin(np.linspace(0, 3 * np.pi, T)) ** 2
    b = dt.Bodies(
        (dt.Sphere(radius=0.01),),
        np.array([[0.001, 0, 0.0115, 0, 0, 0, 1]]),
        np.array([[0.01, 0, 0, 0, 0, 0.5]]),
    )
    seq = stack([make_inputs(IDENT, b.with_state(b.poses.at[0, 2].set(z)), dt=0.01) for z in zs])
    key = jax.random.key(0)
    st0 = s.init_state(key)
    final, r = jax.jit(lambda st, seq, k: rollout(s, st, seq, k))(st0, seq, key)
    keys = jax.random.split(key, T)
    st = st0
    loop = []
    step = jax.jit(s.step)
    for t in range(T):
        st, rt = step(st, jax.tree.map(lambda x, t=t: x[t], seq), keys[t])
        loop.append(rt)
    loop = jax.tree.map(lambda *x: jnp.stack(x), *loop)
    assert_trees_close(r, loop, rtol=1e-6, atol=1e-12)
    assert_trees_close(final, st, rtol=1e-6, atol=1e-12)
    _, rc = rollout(s, st0, seq, key, checkpoint=True)
    assert_trees_close(rc, r, rtol=1e-12, atol=1e-15)
    # the plain scan body (what accelerators get) equals the conditional one (the CPU's)
    rollout_mod = importlib.import_module("difftaxel.rollout")

    orig = rollout_mod._materialise_steps
    assert orig() == (jax.default_backend() == "cpu")
    try:
        for flag in (True, False):
            rollout_mod._materialise_steps = lambda flag=flag: flag
            f_p, r_p = rollout(s, st0, seq, key)
            assert_trees_close(r_p, r, rtol=1e-12, atol=1e-15)
            assert_trees_close(f_p, final, rtol=1e-12, atol=1e-15)
    finally:
        rollout_mod._materialise_steps = orig

    def loss(params):
        strength, tau = params
        imp = s.imperfections.replace(hysteresis_strength=strength, hysteresis_tau=tau)
        _, rr = rollout(s.replace(imperfections=imp), st0, seq, key, checkpoint=True)
        return jnp.sum(rr.measured.force[..., 2] * jnp.linspace(0, 1, T)[:, None])

    check_grad_fd(
        jax.jit(loss), (jnp.asarray(0.5), jnp.asarray(0.05)), step=1e-6, rtol=1e-4, atol=1e-10
    )


def test_same_key_same_readings_reset_redraws():
    s = ContactDepthProbe(
        **PROBE,
        probe_gain_resample_range=(0.5, 1.5),
        imperfections=Imperfections(noise=1e-3, random_walk=1e-4),
    )
    a = run(s, [0.08] * 5, key=jax.random.key(7))[1].measured
    b = run(s, [0.08] * 5, key=jax.random.key(7))[1].measured
    c = run(s, [0.08] * 5, key=jax.random.key(8))[1].measured
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_sharding_8_devices_matches_one():
    """Run in a subprocess with 8 simulated CPU devices (XLA flag must precede JAX import)."""
    from .conftest import run_with_cpu_devices

    out = run_with_cpu_devices("_shard_check.py", 8)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SHARDED_OK devices=8" in out.stdout, out.stdout


# ------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(hysteresis_strength=0.5, hysteresis_tau=0.0), "hysteresis_tau: expected > 0"),
        (dict(crosstalk_kernel=np.ones((2, 3))), "odd kernel sizes"),
        (dict(crosstalk_kernel=np.ones((4, 3, 3))), r"crosstalk_kernel: expected shape"),
        (
            dict(crosstalk_kernel=np.ones((3, 3)), crosstalk_strength=0.5, crosstalk_sigma=0.01),
            "excludes crosstalk_strength",
        ),
        (dict(crosstalk_strength=0.5), "crosstalk_sigma: expected > 0"),
        (dict(jitter=0.02, delay=0.01, dt=0.01), "jitter: expected <= delay"),
        (dict(jitter=0.02, delay=0.05, dt=0.01), "jitter: expected <= dt"),
        (dict(delay=0.02), "dt: expected the sensor step"),
        (dict(dead_taxel_probability=1.5), "dead_taxel_probability: expected <= 1"),
        (dict(dead_taxel_probability=-0.1), "dead_taxel_probability: expected >= 0"),
        (dict(noise=-1.0), "noise: expected >= 0"),
        (dict(dead_taxel_value_range=(1.0, 0.0)), "dead_taxel_value_range"),
        (dict(noise=0.1, noise_generator="mt19937"), "noise_generator: expected"),
    ],
)
def test_bad_options(kw, match):
    with pytest.raises(ValueError, match=match):
        Imperfections(**kw)


def test_bad_crosstalk_layouts():
    imp = Imperfections(crosstalk_strength=0.5, crosstalk_sigma=0.01)
    with pytest.raises(ValueError, match="crosstalk needs a grid layout"):
        KinematicTaxel(probe_local_pos=np.zeros((4, 3)), imperfections=imp)
    with pytest.raises(ValueError, match="crosstalk is not applied to ContactDepthProbe"):
        ContactDepthProbe(probe_local_pos=np.zeros((2, 2, 3)), imperfections=imp)
    with pytest.raises(ValueError, match="probe_gain: expected values > 0"):
        KinematicTaxel(probe_gain=-1.0)
    with pytest.raises(TypeError, match="imperfections: expected"):
        KinematicTaxel(imperfections=dict(noise=1.0))
    assert isinstance(SensorInputs, type)


@pytest.mark.parametrize("groups", [1, 2, 3])
def test_crosstalk_paths_agree(crosstalk_scene, groups):
    """The dense-operator GEMM (rows and channels first, used up to 1024 taxels) equals the
    shifted-sum path used for larger grids, for 1, 2 and 3 kernel groups."""
    grid, _, kw = crosstalk_scene
    rng = np.random.default_rng(groups)
    if groups == 1:
        imp = Imperfections(crosstalk_strength=0.4, crosstalk_sigma=0.02)
    else:
        imp = Imperfections(crosstalk_kernel=rng.uniform(0, 1, (groups, 3, 5)))
    kt = KinematicTaxel(**kw, imperfections=imp)
    from difftaxel.crosstalk import _correlate_rows, apply_crosstalk, crosstalk_correlate

    v = jnp.asarray(rng.normal(size=(6, 25)))
    active = jnp.asarray(rng.uniform(size=25) > 0.2)
    _, shape, support, spacing, normal = kt.crosstalk_args(v.dtype)
    K = kt.imperfections.crosstalk_kernels(v.dtype, support, spacing)
    rows = apply_crosstalk(v, K, shape, normal, active)
    for g in range(K.shape[0]):  # the dense operator equals the shifted sums, per group
        field = jnp.asarray(rng.normal(size=(5, 5, 4)))
        dense = _correlate_rows(field.reshape(25, 4).T, K[g], shape).T.reshape(5, 5, 4)
        ny, nx = shape
        kr, kc = K.shape[1:]
        pad = jnp.pad(field, ((kr // 2, kr // 2), (kc // 2, kc // 2), (0, 0)))
        ref = sum(K[g, i, j] * pad[i : i + ny, j : j + nx] for i in range(kr) for j in range(kc))
        np.testing.assert_allclose(dense, ref, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(crosstalk_correlate(field, K[g]), ref, rtol=1e-12, atol=1e-14)
    rows = rows.T
    assert np.all(np.asarray(rows)[~np.asarray(active)] == 0)


@pytest.mark.parametrize(
    "shape,ksize",
    [((11, 11), (3, 3)), ((3, 7), (3, 5)), ((7, 3), (5, 1)), ((1, 9), (1, 3)), ((3, 3), (7, 7))],
)
def test_crosstalk_stencil_equals_dense_operator(shape, ksize):
    """The shifted-row sums (small kernels, any grid) equal the dense operator in value and
    in gradient (field and kernel), including kernels wider than the grid and 1-row grids."""
    from difftaxel.crosstalk import _correlate_rows, _stencil_rows, crosstalk_matrix

    rng = np.random.default_rng(sum(shape) + sum(ksize))
    ny, nx = shape
    x = jnp.asarray(rng.normal(size=(6, ny * nx)))
    K = jnp.asarray(rng.normal(size=ksize))
    stencil = jax.jit(lambda x, K: _stencil_rows(x, K, shape))
    dense = jax.jit(lambda x, K: x @ crosstalk_matrix(K, ny, nx).T)
    np.testing.assert_allclose(stencil(x, K), dense(x, K), rtol=1e-12, atol=1e-14)
    w = jnp.asarray(rng.normal(size=(6, ny * nx)))
    gs = jax.grad(lambda x, K: jnp.sum(w * stencil(x, K)), (0, 1))(x, K)
    gd = jax.grad(lambda x, K: jnp.sum(w * dense(x, K)), (0, 1))(x, K)
    for a, b in zip(gs, gd, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
    # under vmap over environments too
    xs = jnp.asarray(rng.normal(size=(3, 6, ny * nx)))
    np.testing.assert_allclose(
        jax.vmap(stencil, (0, None))(xs, K), jax.vmap(dense, (0, None))(xs, K), atol=1e-13
    )
    # filler probes (active False) read exactly 0, the others the full sum, in both paths
    active = jnp.asarray(np.arange(ny * nx) % 3 != 1)
    ref = np.where(np.asarray(active)[None], np.asarray(dense(x, K)), 0.0)
    masked = jax.jit(lambda x, K, a: _stencil_rows(x, K, shape, a))(x, K, active)
    np.testing.assert_allclose(masked, ref, rtol=1e-12, atol=1e-14)
    assert np.all(np.asarray(masked)[:, ~np.asarray(active)] == 0)
    np.testing.assert_allclose(_correlate_rows(x, K, shape, active), ref, rtol=1e-12, atol=1e-14)


def test_split_key_is_jax_random_split_bit_for_bit():
    """The unrolled threefry split equals ``jax.random.split`` for typed and raw keys, under
    jit and vmap; other key implementations fall back to ``jax.random.split``."""
    from difftaxel.draws import split_key

    data = jax.random.key_data

    def same(a, b):
        np.testing.assert_array_equal(np.stack([data(x) for x in a]), data(b))

    for key in (jax.random.key(0), jax.random.key(2**31 + 5), jax.random.PRNGKey(7)):
        for num in (1, 3, 4):
            same(split_key(key, num), jax.random.split(key, num))
            same(jax.jit(split_key, static_argnums=1)(key, num), jax.random.split(key, num))
    keys = jax.random.split(jax.random.key(9), 5)
    got = jax.vmap(lambda k: jnp.stack([data(x) for x in split_key(k, 3)]))(keys)
    np.testing.assert_array_equal(got, jax.vmap(lambda k: data(jax.random.split(k, 3)))(keys))
    rbg = jax.random.key(3, impl="rbg")
    same(split_key(rbg, 3), jax.random.split(rbg, 3))


def test_bits32_is_jax_random_bits_bit_for_bit():
    """``standard_normal``'s words: ``jax.random.bits`` with the threefry hash unrolled, equal
    for typed and raw keys and every shape, under jit and vmap; rbg keys fall back."""
    from difftaxel.draws import _bits32

    keys = (jax.random.key(0), jax.random.PRNGKey(5), jax.random.key(1, impl="rbg"))
    for key in keys:
        for shape in ((), (0,), (2, 363), (4, 5, 3)):
            ref = jax.random.bits(key, shape, jnp.uint32)
            np.testing.assert_array_equal(_bits32(key, shape), ref)
            np.testing.assert_array_equal(jax.jit(_bits32, static_argnums=1)(key, shape), ref)
    ks = jax.random.split(jax.random.key(9), 4)
    np.testing.assert_array_equal(
        jax.vmap(lambda k: _bits32(k, (3, 7)))(ks),
        jax.vmap(lambda k: jax.random.bits(k, (3, 7), jnp.uint32))(ks),
    )
