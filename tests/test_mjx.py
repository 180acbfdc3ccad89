"""Taxels inside MuJoCo MJX (optional extra): scene mapping, twists against MuJoCo's own,
rollouts (jit, vmap), float64 gradients through the physics, the iterations guard, the Shadow
Hand test model and the stiffness fit to MJX contact forces."""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco", reason="the [mjx] extra is not installed")
pytest.importorskip("mujoco.mjx", reason="the [mjx] extra is not installed")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from mujoco import mjx  # noqa: E402

from difftaxel.geometry import Box, Capsule, ConvexHull, Cylinder, Plane, Sphere  # noqa: E402
from difftaxel.mjx import (  # noqa: E402
    body_poses_twists,
    contact_mask,
    grid_on_geom,
    load_shadow_hand,
    rollout,
    scene_from_model,
    sensor_inputs,
)
from difftaxel.sensors import KinematicTaxel  # noqa: E402


@pytest.fixture(autouse=True)
def _mjx_allows_rank_promotion():
    """MJX's own code relies on implicit rank promotion, which the suite otherwise refuses."""
    with jax.numpy_rank_promotion("allow"):
        yield


@pytest.fixture(scope="module")
def pad_ball():
    from difftaxel.mjx import pad_and_ball

    m, sensor, scene = pad_and_ball()
    return m, mjx.put_model(m), scene, sensor


def test_mjx_taxels_placed_on_geoms_grid_and_dex01_pattern(pad_ball):
    from difftaxel.mjx import pattern_on_geom
    from difftaxel.patterns import grid_pattern

    m = pad_ball[0]
    pos, nrm = grid_on_geom(m, "pad", 3, 2, extent=0.5)
    assert pos.shape == (2, 3, 3)
    np.testing.assert_allclose(pos[..., 2], 0.005, atol=1e-12)  # the pad's top face
    np.testing.assert_allclose(pos[0, :, 0], [-0.01, 0.0, 0.01], atol=1e-12)
    np.testing.assert_allclose(nrm, np.broadcast_to([0, 0, 1.0], nrm.shape), atol=1e-12)
    pat = grid_pattern((2, 3), 0.004)
    p2, _ = pattern_on_geom(m, "pad", pat, face="-z")
    np.testing.assert_allclose(p2[:, 2], -0.005, atol=1e-12)  # the bottom face
    np.testing.assert_allclose(p2[:, :2], pat.poses[:, :2, 3], atol=1e-12)
    with pytest.raises(ValueError, match="face: expected"):
        grid_on_geom(m, "pad", 2, 2, face="top")
    with pytest.raises(ValueError, match="geom: no geom 'nope'"):
        grid_on_geom(m, "nope", 2, 2)


def test_mjx_scene_mapping_sizes_exclusions_and_unmapped():
    xml = """
    <mujoco>
      <asset><mesh name="tet" vertex="0 0 0  0.02 0 0  0 0.02 0  0 0 0.02"/></asset>
      <worldbody>
        <geom name="floor" type="plane" size="1 1 0.1"/>
        <body name="link"><geom name="pad" type="box" size="0.02 0.02 0.005"/></body>
        <body name="a" pos="0.1 0 0">
          <geom type="sphere" size="0.01"/>
          <geom type="capsule" size="0.01 0.02" pos="0 0 0.05"/>
          <geom type="box" size="0.01 0.02 0.03" pos="0 0.1 0"/>
          <geom type="cylinder" size="0.01 0.02" pos="0 0.2 0"/>
          <geom type="mesh" mesh="tet" pos="0 0.3 0"/>
          <geom name="egg" type="ellipsoid" size="0.01 0.02 0.03" pos="0 0.4 0"/>
          <geom name="look" type="sphere" size="0.05" contype="0" conaffinity="0"/>
        </body>
      </worldbody>
    </mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    sc = scene_from_model(m, "link")
    kinds = [type(s) for s in sc.bodies.shapes]
    assert kinds == [Plane, Sphere, Capsule, Box, Cylinder, ConvexHull]
    assert sc.unmapped == [("egg", "mjGEOM_ELLIPSOID")]
    assert m.geom("pad").id not in sc.geom_ids and m.geom("look").id not in sc.geom_ids
    assert sc.sensor_geoms.tolist() == [m.geom("pad").id]
    # every MuJoCo body is a difftaxel body of the same index; each shape sits on its geom's
    assert sc.body_ids.tolist() == list(range(m.nbody)) and len(sc.bodies.poses) == m.nbody
    assert [s.body for s in sc.bodies.shapes] == [int(m.geom_bodyid[g]) for g in sc.geom_ids]
    cap, box, cyl, hull = sc.bodies.shapes[2:]
    assert float(cap.length) == pytest.approx(0.04) and float(cap.radius) == pytest.approx(0.01)
    np.testing.assert_allclose(box.size, [0.02, 0.04, 0.06])  # MuJoCo's half sizes doubled
    assert float(cyl.height) == pytest.approx(0.04)
    # the tetrahedron's hull (MuJoCo recentres meshes: the geom pose carries the shift): a
    # vertex on the surface, the centroid inside, in the body frame
    from difftaxel import pose as P

    p_body = jnp.asarray([[0.02, 0.3, 0], [0.005, 0.305, 0.005]])
    sd, _ = hull.sdf_local(P.inverse_apply(hull.T_body_shape, p_body))
    assert abs(float(sd[0])) < 1e-8 and float(sd[1]) < 0
    exact = scene_from_model(m, "link", mesh="exact").bodies.shapes[-1]
    from difftaxel.geometry import TriangleMesh

    assert isinstance(exact, TriangleMesh)
    sd_exact, _ = exact.sdf_local(P.inverse_apply(exact.T_body_shape, p_body))
    np.testing.assert_allclose(sd_exact, sd, atol=1e-6)  # inside and on a vertex they agree
    with pytest.raises(ValueError, match="sensor_body: no body named 'nope'"):
        scene_from_model(m, "nope")


@pytest.mark.slow
def test_mjx_twists_match_mujoco_object_velocity():
    """Bodies whose centre of mass is off their origin, on a chain: ``cvel`` is about the
    subtree's centre of mass, the twist must be the velocity of the body origin."""
    xml = """
    <mujoco><worldbody>
      <body name="base" pos="0 0 0.1"><joint type="hinge" axis="0 1 0"/>
        <geom type="box" size="0.05 0.01 0.01" pos="0.05 0 0" mass="1"/>
        <body name="tip" pos="0.1 0 0"><joint type="hinge" axis="0 0 1"/>
          <geom type="capsule" size="0.01 0.03" pos="0.03 0.02 0" euler="0 90 0" mass="0.3"/>
        </body>
      </body>
      <body name="free" pos="0.3 0 0.2"><freejoint/>
        <geom type="box" size="0.02 0.01 0.01" pos="0.02 0.01 0" mass="0.2"/></body>
    </worldbody></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    d.qpos[:2] = rng.normal(size=2)
    d.qvel[:] = rng.normal(size=m.nv)
    mujoco.mj_forward(m, d)
    mx = mjx.put_model(m)
    dx = jax.jit(mjx.forward)(mx, mjx.put_data(m, d))
    ids = np.arange(1, m.nbody)
    poses, twists = body_poses_twists(dx, ids, np.asarray(m.body_rootid)[ids])
    for k, b in enumerate(ids):
        ov = np.zeros(6)
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_BODY, int(b), ov, 0)
        # mj_objectVelocity answers for a body at its centre of mass (xipos): move ours there
        v_origin, w = np.asarray(twists[k, :3]), np.asarray(twists[k, 3:])
        v_com = v_origin + np.cross(w, d.xipos[b] - d.xpos[b])
        np.testing.assert_allclose(np.r_[v_com, w], np.r_[ov[3:], ov[:3]], atol=1e-9)
        assert b != 1 or np.abs(v_origin).max() < 1e-12  # the hinge sits at base's origin
        np.testing.assert_allclose(np.asarray(poses[k, :3]), d.xpos[b], atol=1e-12)
        np.testing.assert_allclose(
            np.asarray(poses[k, 3:]), np.r_[d.xquat[b][1:], d.xquat[b][:1]], atol=1e-12
        )


@pytest.mark.slow  # 10-35 s; CI runs it with the slow cases
def test_mjx_rollout_reads_the_resting_ball_vmap_and_gating(pad_ball):
    m, mx, scene, sensor = pad_ball
    d0 = mjx.make_data(mx)
    run = jax.jit(lambda d: rollout(mx, d, sensor, scene, jnp.zeros((150, 0)), m=m))
    d, _, r = run(d0)
    fz = np.asarray(r.ground_truth.force[..., 2])
    assert fz.shape == (150, 4, 4) and fz[-1].sum() < 0  # pressed into the pad: -z
    # two environments in one vmapped call equal two calls
    dz = jax.vmap(lambda z: d0.replace(qpos=d0.qpos.at[2].set(z)))(jnp.array([0.0158, 0.0162]))
    _, _, rv = jax.jit(jax.vmap(lambda d: rollout(mx, d, sensor, scene, jnp.zeros((150, 0)), m=m)))(
        dz
    )
    np.testing.assert_allclose(
        rv.ground_truth.force[0], r.ground_truth.force, rtol=1e-9, atol=1e-12
    )
    # the resting ball is in MJX's contact list with the pad; gating keeps it (the mask is
    # indexed by MuJoCo body id) and no other body
    ball = int(
        m.geom_bodyid[
            scene.geom_ids[[type(s).__name__ for s in scene.bodies.shapes].index("Sphere")]
        ]
    )
    mask = np.asarray(contact_mask(scene, d))
    assert mask[ball] and mask.sum() == 1
    inp = sensor_inputs(scene, m, d, gated=True)
    assert bool(inp.body_mask[ball])


@pytest.mark.slow
def test_mjx_gradient_through_physics_matches_finite_differences(pad_ball):
    """With respect to a model parameter (the ball's mass) and the initial state (its
    height), float64, along both coordinates and random directions."""
    from difftaxel.testing import check_grad_fd

    m, mx, scene, sensor = pad_ball
    d0 = mjx.make_data(mx)

    @jax.jit
    def loss(p):
        mm = mx.replace(body_mass=mx.body_mass.at[2].set(p["mass"]))
        d = d0.replace(qpos=d0.qpos.at[2].set(p["z0"]))
        _, _, r = rollout(mm, d, sensor, scene, jnp.zeros((40, 0)), m=m)
        return jnp.sum(r.ground_truth.force[..., 2]) * 1e-2

    g = check_grad_fd(loss, {"z0": 0.0158, "mass": 0.05}, rtol=1e-3)
    assert float(g["z0"]) != 0 and float(g["mass"]) != 0


def test_mjx_more_solver_iterations_is_a_clear_error(pad_ball):
    _, _, scene, sensor = pad_ball
    from difftaxel.mjx import PAD_AND_BALL

    m4 = mujoco.MjModel.from_xml_string(PAD_AND_BALL.replace('iterations="1"', 'iterations="4"'))
    mx4 = mjx.put_model(m4)
    with pytest.raises(ValueError, match=r'm.opt.iterations: 4; .*iterations="1"'):
        rollout(mx4, mjx.make_data(mx4), sensor, scene, jnp.zeros((2, 0)), m=m4)
    _, _, r = rollout(
        mx4, mjx.make_data(mx4), sensor, scene, jnp.zeros((2, 0)), m=m4, differentiable=False
    )
    assert r.ground_truth.force.shape == (2, 4, 4, 3)


@pytest.mark.slow
def test_mjx_shadow_hand_fingertip_taxels():
    h = load_shadow_hand(3, 3)
    assert len(h.sensors) == 5 and all(s.unmapped == [] for s in h.scenes)
    for name, sensor, scene in zip(h.fingertips, h.sensors, h.scenes):
        assert sensor.probe_local_pos.shape == (3, 3, 3)
        assert scene.sensor_body == h.m.body(name).id
    # taxels lie on their fingertip's collision hull (body frame)
    b = h.scenes[0].sensor_body
    g = next(
        x
        for x in range(h.m.ngeom)
        if h.m.geom_bodyid[x] == b and (h.m.geom_contype[x] or h.m.geom_conaffinity[x])
    )
    everything = scene_from_model(h.m, 0, include_world=False)
    hull = everything.bodies.shapes[list(everything.geom_ids).index(g)]
    from difftaxel import pose as P

    p_geom = P.inverse_apply(hull.T_body_shape, jnp.asarray(h.sensors[0].probe_local_pos))
    sd, _ = hull.sdf_local(p_geom)
    assert float(jnp.abs(sd).max()) < 1e-9
    mx = mjx.put_model(h.m)
    _, _, r = jax.jit(lambda d: rollout(mx, d, h.sensors, h.scenes, jnp.zeros((3, h.m.nu)), m=h.m))(
        mjx.make_data(mx)
    )
    assert len(r) == 5 and r[0].ground_truth.force.shape == (3, 3, 3, 3)


def test_mjx_whole_hand_taxels_on_every_link():
    """``links="all"``: a grid on each of the 21 hand links with a collision geom; sensing the
    whole hand, every link senses up to 31 shapes (its scene keeps its own, masked out: one scene
    for all, so the links can be stepped in one loop) and takes the broad phase by default."""
    from difftaxel.mjx import link_groups

    h = load_shadow_hand(7, 7, include_hand=True, links="all")
    assert len(h.sensors) == 21 and sum(s.n_probes for s in h.sensors) == 1029
    assert all(n.startswith("rh_") for n in h.fingertips)
    assert all(s.uses_broad_phase(sc.bodies) for s, sc in zip(h.sensors, h.scenes))
    sensed = [sum(x.body != sc.sensor_body for x in sc.bodies.shapes) for sc in h.scenes]
    assert max(sensed) == 31  # a link with two collision geoms senses 30
    assert all(list(sc.geom_ids) == list(h.scenes[0].geom_ids) for sc in h.scenes)
    states = tuple(s.init_state() for s in h.sensors)
    assert link_groups(h.sensors, h.scenes, states) == (tuple(range(21)),)
    with pytest.raises(ValueError, match="links"):
        load_shadow_hand(links="palm")


PRESS_SLIDE = """
<mujoco>
  <option timestep="0.002" iterations="1" ls_iterations="4" gravity="0 0 0"/>
  <worldbody>
    <body name="pad"><geom name="pad" type="box" size="0.03 0.03 0.005"/></body>
    <body name="probe" pos="0 0 0.016">
      <joint name="x" type="slide" axis="1 0 0"/><joint name="z" type="slide" axis="0 0 1"/>
      <geom name="probe" type="sphere" size="0.01" mass="0.05" friction="0.5"/>
    </body>
  </worldbody>
  <actuator><position joint="x" kp="50" kv="2"/><position joint="z" kp="50" kv="2"/></actuator>
</mujoco>
"""


@pytest.mark.slow
def test_mjx_taxel_stiffness_fitted_to_mjx_contact_forces():
    """A sphere pressed into a pad, held, then slid: the summed taxel force is fitted to
    MJX's contact force (calibrate.fit); the error at rest falls."""
    from difftaxel.mjx import contact_force_on, fit_taxel_forces, trajectory

    m = mujoco.MjModel.from_xml_string(PRESS_SLIDE)
    scene = scene_from_model(m, "pad")
    pos, _ = grid_on_geom(m, "pad", 15, 15, extent=1.0)
    sensor = KinematicTaxel(probe_local_pos=pos, probe_radius=1e-4)
    mx = mjx.put_model(m)
    T1, T2 = 200, 200
    u = np.zeros((T1 + T2, 2))
    u[:, 1] = -0.004
    u[T1:, 0] = np.linspace(0, 0.02, T2)
    traj = jax.jit(lambda d: trajectory(mx, d, jnp.asarray(u)))(mjx.make_data(mx))
    F = contact_force_on(m, traj, "probe")
    assert float(F[T1 - 1, 2]) > 0.1  # the pad pushes the probe up
    rest = np.zeros(T1 + T2, bool)
    rest[T1 - 50 : T1] = True
    slide = np.zeros(T1 + T2, bool)
    slide[T1 + 50 :] = True
    fm = fit_taxel_forces(sensor, scene, m, traj, -F, {"rest": rest, "sliding": slide})
    assert fm.error_after["rest"]["normal"] < 0.5 * fm.error_before["rest"]["normal"]
    assert fm.error_after["rest"]["normal"] < 0.25
    assert set(fm.error_after) == {"rest", "sliding"}
    with pytest.raises(ValueError, match="no joint"):
        contact_force_on(m, traj, "pad")


@pytest.mark.slow
def test_mjx_gradient_with_respect_to_controls():
    """d(summed taxel reading)/d(offset of the press target), through the actuators and the
    physics, against central finite differences (float64)."""
    m = mujoco.MjModel.from_xml_string(PRESS_SLIDE)
    scene = scene_from_model(m, "pad")
    pos, _ = grid_on_geom(m, "pad", 5, 5, extent=0.5)
    sensor = KinematicTaxel(probe_local_pos=pos, probe_radius=1e-4)
    mx = mjx.put_model(m)
    d0 = mjx.make_data(mx)
    base = np.zeros((60, 2))
    base[:, 1] = -0.004

    def loss(dz):
        u = jnp.asarray(base).at[:, 1].add(dz)
        _, _, r = rollout(mx, d0, sensor, scene, u, m=m)
        return jnp.sum(r.ground_truth.force[..., 2])

    g = float(jax.jit(jax.grad(loss))(0.0))
    f = jax.jit(loss)
    h = 1e-6
    fd = float((f(h) - f(-h)) / (2 * h))
    assert g != 0 and abs(g - fd) <= 1e-3 * abs(fd), (g, fd)


@pytest.mark.slow
def test_mjx_rollouts_sharded_over_devices_equal_one_device():
    """A subprocess with 4 simulated CPU devices."""
    from .conftest import run_with_cpu_devices

    out = run_with_cpu_devices("_mjx_shard_check.py", 4)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "MJX_SHARDED_OK devices=4" in out.stdout, out.stdout


def test_mjx_measured_fingertip_layout_on_a_geom(pad_ball, shared_dir):
    """A flat layout lands on the pad's top face unchanged in x, y; the real iCub FTx2
    fingertip layout (12 taxels, ../shared/data) lands on a Shadow Hand fingertip's hull."""
    from difftaxel.mjx import layout_on_geom, shadow_hand_path

    m = pad_ball[0]
    flat = np.array([[0.001, 0.002, 0.0], [-0.004, 0.003, 0.0], [0.0, -0.006, 0.0]])
    up = np.tile([0.0, 0.0, 1.0], (3, 1))
    pos, nrm = layout_on_geom(m, "pad", flat + [0, 0, 0.004], up)
    np.testing.assert_allclose(pos[:, :2], flat[:, :2], atol=1e-12)
    np.testing.assert_allclose(pos[:, 2], 0.005, atol=1e-12)
    np.testing.assert_allclose(nrm, up, atol=1e-12)
    with pytest.raises(ValueError, match="normals"):
        layout_on_geom(m, "pad", flat, np.zeros((3, 3)))

    csv = shared_dir / "data" / "taxels" / "icub-ftx2-fingertip.csv"
    if not csv.exists():
        pytest.skip(f"{csv} absent")
    t = np.genfromtxt(csv, delimiter=",", names=True)
    p = np.stack([t["x_mm"], t["y_mm"], t["z_mm"]], 1) * 1e-3
    n = np.stack([t["nx"], t["ny"], t["nz"]], 1)
    hand = mujoco.MjModel.from_xml_path(shadow_hand_path())
    b = hand.body("rh_ffdistal").id
    g = next(
        x
        for x in range(hand.ngeom)
        if hand.geom_bodyid[x] == b and (hand.geom_contype[x] or hand.geom_conaffinity[x])
    )
    # the iCub tip points along -x; lay it along the Shadow fingertip's long axis (+z)
    T = np.array([0, 0, 0, 0, np.sin(-np.pi / 4), 0, np.cos(-np.pi / 4)])  # -90 deg about y
    pos, nrm = layout_on_geom(hand, g, p - p.mean(0), n, T_geom_layout=T)
    assert pos.shape == (12, 3) and np.allclose(np.linalg.norm(nrm, axis=1), 1.0)
    scene = scene_from_model(hand, 0, include_world=False)
    hull = scene.bodies.shapes[list(scene.geom_ids).index(g)]
    from difftaxel import pose as P

    sd, _ = hull.sdf_local(P.inverse_apply(hull.T_body_shape, jnp.asarray(pos)))
    assert float(jnp.abs(sd).max()) < 1e-9
    assert len({tuple(np.round(x, 6)) for x in pos}) >= 10  # the taxels stay apart


def test_mjx_placements_refuse_bad_poses_and_collapsed_layouts(pad_ball):
    """A pattern larger than the face lands several taxels on one point (5 x 5 onto the
    pad's 3 x 3 clamp positions): an error, not 25 taxels on 9 positions; a layout pose or
    standoff that is not one is named."""
    from difftaxel.mjx import layout_on_geom, pattern_on_geom
    from difftaxel.patterns import grid_pattern

    m = pad_ball[0]
    with pytest.raises(ValueError, match=r"25 taxels land on only 9 distinct points"):
        pattern_on_geom(m, "pad", grid_pattern((5, 5), 0.02))
    pos = np.c_[np.random.default_rng(0).uniform(-0.005, 0.005, (6, 2)), np.zeros(6)]
    nrm = np.tile([0, 0, 1.0], (6, 1))
    for kw, match in (
        ({"T_geom_layout": [0, 0, 0, 0, 0, 0, 1.1]}, r"T_geom_layout\[..., 3:\]"),
        ({"T_geom_layout": [np.nan, 0, 0, 0, 0, 0, 1]}, r"T_geom_layout: expected finite"),
        ({"T_geom_layout": [0, 0, 0, 1.0]}, r"T_geom_layout: expected a pose \[7\]"),
        ({"standoff": -0.01}, r"standoff: expected a finite distance >= 0"),
        ({"standoff": np.inf}, r"standoff"),
    ):
        with pytest.raises(ValueError, match=match):
            layout_on_geom(m, "pad", pos, nrm, **kw)
    x, _ = layout_on_geom(m, "pad", pos, nrm)
    assert x.shape == (6, 3)
