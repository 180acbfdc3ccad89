"""MuJoCo's MJCF ``<tactile>`` sensor inside MJX: the installed C engine's readings for every
primitive geom type, a wedge fingertip, several contacts, a moving and rotated sensor,
``cutoff``, rollouts and batches; refusals; gradients of the smooth mode."""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco", reason="the [mjx] extra is not installed")
pytest.importorskip("mujoco.mjx", reason="the [mjx] extra is not installed")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from mujoco import mjx  # noqa: E402

from difftaxel.mjx import (  # noqa: E402
    mjcf_tactile,
    tactile_readings,
    tactile_rollout,
    tactile_sensordata,
)


@pytest.fixture(autouse=True)
def _mjx_allows_rank_promotion():
    with jax.numpy_rank_promotion("allow"):
        yield


OBJECTS = {
    "sphere": '<geom type="sphere" size="0.01"/>',
    "capsule": '<geom type="capsule" size="0.006 0.01"/>',
    "cylinder": '<geom type="cylinder" size="0.008 0.006"/>',
    "box": '<geom type="box" size="0.008 0.006 0.005"/>',
    "ellipsoid": '<geom type="ellipsoid" size="0.01 0.007 0.005"/>',
}


def model_xml(objects=("sphere",), plane=False, cutoff=0.0, skin='pos="0.001 -0.002 0.0106"'):
    """A free pad (a sphere collider whose top is at z = 5.5 mm, a 5 x 5 ``plate`` of taxels
    0.1 mm above it, off-centre; the builtin plate sits 5 mm below its geom's position) and free
    objects above it; optionally a floor plane it presses into."""
    bodies = "".join(
        f'<body name="o{i}" pos="0 0 0.02"><freejoint/>{OBJECTS[o]}</body>'
        for i, o in enumerate(objects)
    )
    floor = '<geom name="floor" type="plane" size="1 1 0.1" pos="0 0 0.0062"/>' if plane else ""
    cut = f' cutoff="{cutoff}"' if cutoff else ""
    return f"""
<mujoco>
  <option timestep="0.002" gravity="0 0 0"/>
  <asset><mesh name="plate" builtin="plate" params="5 5" scale="0.02 0.02 0.005"/></asset>
  <worldbody>
    {floor}
    <body name="pad" pos="0 0 0" quat="0.9659 0 0 0.2588"><freejoint/>
      <geom name="collider" type="sphere" size="0.02" pos="0 0 -0.0145"/>
      <geom name="skin" type="mesh" mesh="plate" {skin} contype="0" conaffinity="0" mass="0"/>
    </body>
    {bodies}
  </worldbody>
  <sensor><tactile name="touch" geom="skin" mesh="plate"{cut}/></sensor>
</mujoco>"""


def random_states(m, n, seed=0, spread=0.008, lift=0.0):
    """``n`` states: each object above the pad (penetrating most of the time), random turns,
    random velocities; the pad itself turned, shifted and moving."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        q = np.array(m.qpos0, float)
        v = rng.normal(0, 0.05, m.nv)
        for j in range(m.njnt):
            a = m.jnt_qposadr[j]
            if j == 0:  # the pad
                q[a : a + 3] = rng.normal(0, 0.001, 3) + [0, 0, lift]
                quat = np.r_[1.0, rng.normal(0, 0.05, 3)]
            else:
                q[a : a + 3] = np.r_[rng.uniform(-spread, spread, 2), rng.uniform(0.008, 0.013)]
                quat = rng.normal(size=4)
            q[a + 3 : a + 7] = quat / np.linalg.norm(quat)
        out.append((q, v))
    return out


def c_readings(m, states):
    d = mujoco.MjData(m)
    out = []
    for q, v in states:
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_forward(m, d)
        out.append(d.sensordata.copy())
    return np.stack(out)


def mjx_readings(m, states, **kw):
    mx = mjx.put_model(m)
    tac = mjcf_tactile(m, **kw)
    d0 = mjx.make_data(mx)
    qs = jnp.asarray(np.stack([q for q, _ in states]))
    vs = jnp.asarray(np.stack([v for _, v in states]))

    @jax.jit
    def one(q, v):
        return tactile_sensordata(tac, mjx.forward(mx, d0.replace(qpos=q, qvel=v))).sensordata

    return np.asarray(jax.vmap(one)(qs, vs))


@pytest.mark.parametrize("obj", list(OBJECTS))
def test_every_primitive_reads_what_mujoco_reads(obj):
    m = mujoco.MjModel.from_xml_string(model_xml((obj,)))
    states = random_states(m, 32, seed=list(OBJECTS).index(obj))
    want = c_readings(m, states)
    got = mjx_readings(m, states)
    n = m.sensor_dim[0] // 3
    assert np.count_nonzero(want[:, :n]) > 10, "the scene must press taxels"
    assert np.count_nonzero(want[:, n:]) > 10, "and slide over them"
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_a_plane_several_contacts_and_cutoff():
    m = mujoco.MjModel.from_xml_string(model_xml(("sphere", "box"), plane=True, cutoff=0.0008))
    states = random_states(m, 16, seed=3, spread=0.01)
    want = c_readings(m, states)
    assert np.max(want) == pytest.approx(0.0008)  # the cutoff bites
    got = mjx_readings(m, states)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    # the smooth readings tend to the exact ones as their width goes to 0
    smooth = mjx_readings(m, states, smoothing=1e-9)
    np.testing.assert_allclose(smooth, want, rtol=0, atol=1e-7)
    assert np.all(np.isfinite(smooth))


WEDGE = """
<mujoco>
  <option gravity="0 0 0"/>
  <asset><mesh name="tip" builtin="wedge" params="6 6 60 40 0" scale="0.01 0.01 0.01"/></asset>
  <worldbody>
    <body name="finger" quat="0.7071 0.7071 0 0"><freejoint/>
      <geom name="pulp" type="sphere" size="0.01"/>
      <geom name="skin" type="mesh" mesh="tip" contype="0" conaffinity="0" mass="0"/>
    </body>
    <body name="block" pos="0 0 0.02"><freejoint/><geom type="box" size="0.01 0.01 0.004"/></body>
  </worldbody>
  <sensor><tactile geom="skin" mesh="tip"/></sensor>
</mujoco>"""


def test_a_wedge_fingertip_reads_what_mujoco_reads():
    m = mujoco.MjModel.from_xml_string(WEDGE)
    rng = np.random.default_rng(5)
    states = []
    for _ in range(16):
        q = np.array(m.qpos0, float)
        q[7:10] = (
            rng.normal(0, 0.004, 3) + [0, 0, 0.0] + rng.uniform(-0.006, 0.006) * np.r_[0, 1, 0]
        )
        quat = rng.normal(size=4)
        q[10:14] = quat / np.linalg.norm(quat)
        states.append((q, rng.normal(0, 0.05, m.nv)))
    want = c_readings(m, states)
    assert np.count_nonzero(want) > 20
    np.testing.assert_allclose(mjx_readings(m, states), want, rtol=1e-9, atol=1e-12)


def test_a_rollout_and_a_batch_read_what_mujoco_reads_on_the_same_states():
    """MJX's own trajectory (it may drift from the C engine's physics): at every step the
    tactile values equal MuJoCo's ``mj_forward`` on that step's starting state."""
    m = mujoco.MjModel.from_xml_string(model_xml(("sphere",)))
    mx = mjx.put_model(m)
    tac = mjcf_tactile(m)
    starts = random_states(m, 3, seed=9)
    T = 6

    def run(q, v):
        d0 = mjx.make_data(mx).replace(qpos=q, qvel=v)

        def step(d, _):
            before = (d.qpos, d.qvel)
            d = mjx.step(mx, d)
            return tactile_sensordata(tac, d), (before, tactile_sensordata(tac, d).sensordata)

        _, (states, data) = jax.lax.scan(step, d0, None, length=T)
        return states, data

    qs = jnp.asarray(np.stack([q for q, _ in starts]))
    vs = jnp.asarray(np.stack([v for _, v in starts]))
    (sq, sv), data = jax.jit(jax.vmap(run))(qs, vs)
    for e in range(3):
        want = c_readings(m, list(zip(np.asarray(sq[e]), np.asarray(sv[e]))))
        np.testing.assert_allclose(np.asarray(data[e]), want, rtol=1e-9, atol=1e-12)
    assert np.count_nonzero(np.asarray(data)) > 0
    # the public rollout scans the same steps
    d0 = mjx.make_data(mx).replace(qpos=qs[0], qvel=vs[0])
    _, sd = jax.jit(lambda d: tactile_rollout(mx, d, tac, jnp.zeros((T, 0))))(d0)
    np.testing.assert_allclose(np.asarray(sd), np.asarray(data[0]), rtol=1e-12, atol=1e-15)


def test_the_corrected_mode_reads_slip_in_the_plate():
    """The plate's second stored tangent lies along its normal (MuJoCo's reading keeps it);
    the corrected frame puts both tangents in the plate, so in-plane slip reads in full."""
    m = mujoco.MjModel.from_xml_string(model_xml(("sphere",), skin='pos="0 0 0.0106"'))
    mx = mjx.put_model(m)
    d0 = mjx.make_data(mx)
    q = np.array(m.qpos0, float)
    q[7:10] = [0, 0, 0.015]  # the ball 0.6 mm into the central taxel, pad turned 30 deg
    v = np.zeros(m.nv)
    v[6:9] = [0.04, 0.0, 0.0]  # sliding along world x
    d = jax.jit(mjx.forward)(mx, d0.replace(qpos=jnp.asarray(q), qvel=jnp.asarray(v)))
    n = m.sensor_dim[0] // 3
    exact = np.asarray(tactile_readings(mjcf_tactile(m), d))[0, :, :n]
    fixed = np.asarray(tactile_readings(mjcf_tactile(m, mode="corrected"), d))[0, :, :n]
    j = int(np.argmax(exact[0]))
    assert exact[0, j] == pytest.approx(0.0006) and fixed[0, j] == exact[0, j]  # depths agree
    # exact: the second "tangent" is the plate's normal, so in-plane slip shows only through
    # the first, which (turned 30 deg with the pad) sees half of it
    assert abs(exact[2, j]) < 1e-12 and exact[1, j] == pytest.approx(0.04 * 0.5, rel=1e-4)
    # corrected: the slip lies in the tangent plane, split by the pad's 30 deg heading
    np.testing.assert_allclose(np.hypot(fixed[1, j], fixed[2, j]), 0.04, rtol=1e-9)
    assert min(fixed[1, j], fixed[2, j]) > 0.01


def test_models_difftaxel_cannot_compute_are_refused_in_one_line():
    xml = model_xml(("sphere",)).replace(
        '<geom type="sphere" size="0.01"/>', '<geom type="mesh" mesh="plate"/>'
    )
    xml = xml.replace(
        '<mesh name="plate" builtin="plate" params="5 5" scale="0.02 0.02 0.005"/>',
        '<mesh name="plate" builtin="plate" params="5 5" scale="0.02 0.02 0.005"/>'
        '<mesh name="cube" builtin="supersphere" params="8 1 1" scale="0.01 0.01 0.01"/>',
    ).replace('mesh="plate"/></body>', 'mesh="cube"/></body>')
    m = mujoco.MjModel.from_xml_string(xml)
    tac = mjcf_tactile(m)
    assert tac is not None  # a mesh without an octree: skipped, as MuJoCo does
    assert tac.replace(mode="corrected", smoothing=1e-4).smoothing == 1e-4
    with pytest.raises(ValueError, match=r"only mode, smoothing and visit change"):
        tac.replace(vertices=tac.vertices)
    assert tac.replace(visit="contacts").visit == "contacts"
    with pytest.raises(ValueError, match=r"visit: expected one of"):
        tac.replace(visit="broadphase")
    with pytest.raises(ValueError, match=r"visit: expected one of"):
        mjcf_tactile(m, visit="all")
    with pytest.raises(ValueError, match=r"smoothing: expected a finite length"):
        tac.replace(smoothing=np.nan)
    with pytest.raises(ValueError, match=r"mode: expected"):
        mjcf_tactile(m, mode="exact")
    with pytest.raises(ValueError, match=r"smoothing: expected a finite length"):
        mjcf_tactile(m, smoothing=-1.0)
    plain = mujoco.MjModel.from_xml_string("<mujoco><worldbody/></mujoco>")
    assert mjcf_tactile(plain) is None


GRAD = """
<mujoco>
  <option timestep="0.002" iterations="1" ls_iterations="1"/>
  <asset><mesh name="plate" builtin="plate" params="3 3" scale="0.02 0.02 0.005"/></asset>
  <worldbody>
    <geom name="pad" type="box" size="0.02 0.02 0.005"/>
    <geom name="skin" type="mesh" mesh="plate" pos="0 0 0.0101" contype="0" conaffinity="0"/>
    <body name="ball" pos="0 0 0.0145">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="z" type="slide" axis="0 0 1"/>
      <geom name="ball" type="sphere" size="0.01" mass="0.02"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" gear="1"/></actuator>
  <sensor><tactile name="touch" geom="skin" mesh="plate"/></sensor>
</mujoco>"""


@pytest.mark.slow  # one compilation of a 6-step MJX rollout and its gradient: ~25 s
def test_gradients_through_mjx_step_match_finite_differences():
    """A loss on the smooth tactile readings of a rollout (a ball pressed and pushed over the
    plate), differentiated with respect to the initial velocity, the controls and the ball's
    radius (a model parameter): float64 central differences. At zero depth and zero velocity
    the gradients of the exact and smooth readings are finite."""
    m = mujoco.MjModel.from_xml_string(GRAD)
    mx = mjx.put_model(m)
    d0 = mjx.make_data(mx)
    T = 6

    def loss_with(tac):
        def loss(qvel0, u, r):
            mxr = mx.replace(geom_size=mx.geom_size.at[2, 0].set(r))
            _, sd = tactile_rollout(mxr, d0.replace(qvel=qvel0), tac, u)
            return jnp.sum(sd**2) * 1e6

        return loss

    loss = loss_with(mjcf_tactile(m, smoothing=2e-4))
    f = jax.jit(loss)
    g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    q0, u, r = jnp.array([0.02, -0.01]), jnp.full((T, 1), 0.01), 0.01
    assert float(f(q0, u, r)) > 0.01
    gq, gu, gr = g(q0, u, r)
    h = 1e-6
    for i in range(2):
        e = jnp.zeros(2).at[i].set(h)
        fd = float((f(q0 + e, u, r) - f(q0 - e, u, r)) / (2 * h))
        assert float(gq[i]) == pytest.approx(fd, rel=1e-4, abs=1e-9)
    for k in (0, 3):
        e = jnp.zeros((T, 1)).at[k, 0].set(h)
        fd = float((f(q0, u + e, r) - f(q0, u - e, r)) / (2 * h))
        assert float(gu[k, 0]) == pytest.approx(fd, rel=1e-4, abs=1e-9)
    fd = float((f(q0, u, r + 1e-7) - f(q0, u, r - 1e-7)) / 2e-7)
    assert float(gr) == pytest.approx(fd, rel=1e-4)
    # the ball resting exactly on the taxels' plane, still: no NaN either way
    rest = d0.replace(qpos=jnp.array([0.0, 0.0101 - 0.005 + 0.01 - 0.0145]))
    for smoothing in (0.0, 2e-4):
        tac = mjcf_tactile(m, smoothing=smoothing)
        g0 = jax.grad(
            lambda q, tac=tac: jnp.sum(
                tactile_rollout(mx, rest.replace(qpos=q), tac, jnp.zeros((2, 1)))[1] ** 2
            )
        )(rest.qpos)
        assert np.all(np.isfinite(np.asarray(g0)))


def test_difftaxel_forces_on_the_same_taxels():
    """``tactile_kinematic``: KinematicTaxel probes on the tactile mesh's vertices (body frame)
    read a force of magnitude k * (depth + r) where MuJoCo reads the depth (a sphere: the same
    signed distance), pushing in against the taxel's outward normal."""
    from difftaxel.mjx import sensor_inputs, tactile_kinematic

    m = mujoco.MjModel.from_xml_string(model_xml(("sphere",)))
    r, k = 1e-6, 500.0
    tt = tactile_kinematic(m, "touch", probe_radius=r, normal_stiffness=k)
    assert tt.sensor.n_probes == m.sensor_dim[0] // 3 and tt.frames.shape == (25, 3, 3)
    states = random_states(m, 6, seed=11)
    want = c_readings(m, states)
    mx = mjx.put_model(m)
    d0 = mjx.make_data(mx)
    n = 25
    forward = jax.jit(mjx.forward)
    for (q, v), c in zip(states, want):
        d = forward(mx, d0.replace(qpos=jnp.asarray(q), qvel=jnp.asarray(v * 0)))
        inp = sensor_inputs(tt.scene, m, d)
        F = np.asarray(tt.sensor.step(tt.sensor.init_state(), inp)[1].ground_truth.force)
        depth = c[:n]
        on = depth > 0
        if not on.any():
            continue
        np.testing.assert_allclose(np.linalg.norm(F[on], axis=1), k * (depth[on] + r), rtol=1e-6)
        # the plate's normal is its third stored vector: the force pushes in against it
        assert np.all(np.einsum("nd,nd->n", F[on], tt.frames[on, 2]) < 0)
    with pytest.raises(ValueError, match=r"sensor: 'nope' is not a <tactile> sensor"):
        tactile_kinematic(m, "nope")


def test_a_convex_mesh_with_an_octree_is_refused_or_read_through_its_hull():
    """MuJoCo reads a mesh through its octree's trilinear field (``needsdf``); difftaxel
    refuses it by default and with ``meshes="hull"`` reads its convex hull's exact distance.
    Measured on a box-shaped mesh (16 x 12 x 10 mm), 32 random presses: the same taxels touched,
    the same sliding speeds, depths equal to ~1e-10 at most taxels and up to ~0.5 mm near the
    mesh's edges (the octree rounds them)."""
    box = " ".join(
        f"{x * 0.008} {y * 0.006} {z * 0.005}" for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)
    )
    xml = (
        model_xml(("sphere",))
        .replace("</asset>", f'<mesh name="blk" vertex="{box}"/></asset>')
        .replace('<geom type="sphere" size="0.01"/>', '<geom type="mesh" mesh="blk"/>')
    )
    spec = mujoco.MjSpec.from_string(xml)
    spec.mesh("blk").needsdf = True
    m = spec.compile()
    assert int(m.mesh_octadr[m.mesh("blk").id]) >= 0
    with pytest.raises(ValueError, match=r"senses geom .* octree SDF .*meshes='hull'"):
        mjcf_tactile(m)
    with pytest.raises(ValueError, match=r"meshes: expected"):
        mjcf_tactile(m, meshes="octree")
    states = random_states(m, 32, seed=7)
    want = c_readings(m, states)
    got = mjx_readings(m, states, meshes="hull")
    n = m.sensor_dim[0] // 3
    touched = want[:, :n] > 0
    assert touched.sum() > 20
    np.testing.assert_array_equal(got[:, :n] > 0, touched)
    np.testing.assert_allclose(got[:, n:], want[:, n:], rtol=1e-9, atol=1e-12)
    diff = np.abs(got[:, :n] - want[:, :n])[touched]
    assert np.median(diff) < 1e-8 and diff.max() < 1e-3


TWO_SKINS = """
<mujoco>
  <option timestep="0.002" gravity="0 0 0"/>
  {custom}
  <asset>
    <mesh name="plate" builtin="plate" params="4 4" scale="0.02 0.02 0.005"/>
    <mesh name="plate3" builtin="plate" params="3 3" scale="0.02 0.02 0.005"/>
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1" pos="0 0 0.0062"/>
    <body name="pad" quat="0.9659 0 0 0.2588"><freejoint/>
      <geom name="ball" type="sphere" size="0.02" pos="0 0 -0.0145"/>
      <geom name="slab" type="box" size="0.012 0.012 0.004" pos="0.004 0 0.0015"/>
      <geom name="skin" type="mesh" mesh="plate" pos="0.001 -0.002 0.0106" contype="0"
        conaffinity="0" mass="0"/>
      <geom name="skin2" type="mesh" mesh="plate3" pos="0.003 0.001 0.0104" contype="0"
        conaffinity="0" mass="0"/>
    </body>
    <body name="o0" pos="0 0 0.02"><freejoint/><geom type="box" size="0.008 0.006 0.005"/></body>
    <body name="o1" pos="0 0 0.02"><freejoint/><geom type="capsule" size="0.006 0.01"/></body>
  </worldbody>
  <sensor><tactile geom="skin" mesh="plate"/><tactile geom="skin2" mesh="plate3"/></sensor>
</mujoco>"""


@pytest.mark.parametrize("culled", [True, False], ids=["max_contact_points", "every-slot"])
def test_the_contact_list_pass_reads_what_every_pair_reads(culled):
    """``visit="contacts"`` evaluates only the contact list's entries; ``"pairs"`` every pair
    that could touch. Two sensors (16 and 9 taxels) on one body, a geom touching two of its colliders and a
    box-box contact of four points (a geom listed several times for one sensor, read once), a
    floor; MJX culling the list to 4 contacts (geoms known only at run time) or not. Exact and
    smooth readings are equal; unculled, both are the C engine's. Derivatives (with respect to
    every pose, velocity and contact distance they read): culled (the slow set), both passes'
    are equal; unculled (the default run, one backward pass fewer to compile), the contact
    list's reach the contact distances of gates that do not saturate."""
    custom = '<custom><numeric name="max_contact_points" data="4"/></custom>' if culled else ""
    m = mujoco.MjModel.from_xml_string(TWO_SKINS.format(custom=custom))
    mx = mjx.put_model(m)
    d0 = mjx.make_data(mx)
    tacs = [
        mjcf_tactile(m, smoothing=w, visit=v) for w in (0.0, 2e-4) for v in ("pairs", "contacts")
    ]
    assert tacs[1].weld_sensors.shape[1] == 2  # two sensors share the pad
    assert tacs[1].out_start == -1  # 16 and 9 taxels: written one by one, not as one block
    assert mjcf_tactile(mujoco.MjModel.from_xml_string(model_xml())).out_start == 0
    leaves = ("geom_xpos", "geom_xmat", "cvel", "subtree_com")

    def readings(d, tac):
        return tactile_sensordata(tac, d).sensordata

    def grads(d, tac):
        def loss(z, dist):
            dd = d.replace(**dict(zip(leaves, z))).tree_replace({"_impl.contact.dist": dist})
            r = tactile_readings(tac, dd)
            return jnp.sum(r * jnp.linspace(1.0, 2.0, r.size).reshape(r.shape))

        return jax.grad(loss, (0, 1))(tuple(getattr(d, k) for k in leaves), d._impl.contact.dist)

    @jax.jit
    @jax.vmap
    def run(q, v):
        d = mjx.forward(mx, d0.replace(qpos=q, qvel=v))
        return [readings(d, t) for t in tacs], [grads(d, t) for t in tacs[2 if culled else 3 :]]

    states = random_states(m, 16, seed=11, spread=0.01)
    (exact_p, exact_c, smooth_p, smooth_c), g = run(
        *(jnp.asarray(np.stack(z)) for z in zip(*states))
    )
    assert np.count_nonzero(exact_p) > 50 and np.count_nonzero(smooth_p) > 50
    np.testing.assert_allclose(exact_c, exact_p, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(smooth_c, smooth_p, rtol=1e-12, atol=1e-15)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(g))
    assert np.count_nonzero(np.asarray(g[0][0][0])) > 0
    if culled:
        jax.tree.map(lambda a, b: np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-9), *g)
    else:  # the 4 deepest contacts (culled) are deep enough to saturate their gates
        assert np.count_nonzero(np.asarray(g[0][1])) > 0
        np.testing.assert_allclose(exact_p, c_readings(m, states), rtol=1e-9, atol=1e-12)


def test_the_smooth_depth_ignores_geoms_that_are_not_in_contact():
    """The smooth depth weighs each geom by its gate: a far geom that could touch (a pair
    with no contact) does not dilute it."""
    far = '<body name="far" pos="0.5 0 0.02"><freejoint/><geom type="sphere" size="0.01"/></body>'
    base = model_xml(("sphere",))
    m1 = mujoco.MjModel.from_xml_string(base)
    m2 = mujoco.MjModel.from_xml_string(base.replace("</worldbody>", far + "</worldbody>"))
    states = random_states(m1, 8, seed=4)
    states2 = [(np.r_[q, 0.5, 0, 0.02, 1, 0, 0, 0], np.r_[v, np.zeros(6)]) for q, v in states]
    a = mjx_readings(m1, states, smoothing=1e-4)
    b = mjx_readings(m2, states2, smoothing=1e-4)
    assert np.count_nonzero(a) > 10
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-15)
