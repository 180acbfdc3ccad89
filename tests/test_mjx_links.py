"""Sensor links stepped in one loop inside MJX rollouts: scenes that keep the sensor body's
geoms (masked out), the grouping of alike links, and readings, states and noise equal to
those of one program per link (optional ``[mjx]`` extra)."""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco", reason="the [mjx] extra is not installed")
pytest.importorskip("mujoco.mjx", reason="the [mjx] extra is not installed")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from mujoco import mjx  # noqa: E402

import difftaxel as dt  # noqa: E402
from difftaxel.mjx import grid_on_geom, link_groups, rollout, scene_from_model  # noqa: E402
from difftaxel.sensors import KinematicTaxel  # noqa: E402

# three fixed pads side by side, a ball resting across the first two, a floor below
PADS = """<mujoco>
  <option timestep="0.002" iterations="1" ls_iterations="4"/>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1" pos="0 0 -0.001"/>
    <body name="p1" pos="0 0 0.005"><geom name="g1" type="box" size="0.01 0.01 0.005"/></body>
    <body name="p2" pos="0.02 0 0.005"><geom name="g2" type="box" size="0.01 0.01 0.005"/></body>
    <body name="p3" pos="0.04 0 0.005"><geom name="g3" type="box" size="0.01 0.01 0.005"/></body>
    <body name="ball" pos="0.01 0 0.0198">
      <freejoint/><geom name="ball" type="sphere" size="0.01" mass="0.05"/>
    </body>
  </worldbody>
</mujoco>"""


@pytest.fixture(autouse=True)
def _mjx_allows_rank_promotion():
    with jax.numpy_rank_promotion("allow"):
        yield


@pytest.fixture(scope="module")
def pads():
    m = mujoco.MjModel.from_xml_string(PADS)
    imp = dt.Imperfections(noise=0.01, hysteresis_strength=0.2, hysteresis_tau=0.01)
    sensors = tuple(
        KinematicTaxel(
            probe_local_pos=grid_on_geom(m, f"g{i}", 3, 3, extent=0.9)[0],
            probe_radius=1e-3,
            imperfections=imp,
        )
        for i in (1, 2, 3)
    )
    apart = tuple(scene_from_model(m, f"p{i}") for i in (1, 2, 3))
    kept = tuple(scene_from_model(m, f"p{i}", keep_sensor_body=True) for i in (1, 2, 3))
    return m, mjx.put_model(m), sensors, apart, kept


def test_a_scene_keeping_the_sensor_body_maps_its_geoms_and_masks_them(pads):
    m, _, sensors, apart, kept = pads
    assert len(kept[0].bodies.shapes) == len(apart[0].bodies.shapes) + 1
    own = [g for g in kept[0].geom_ids if m.geom_bodyid[g] == kept[0].sensor_body]
    assert [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) for g in own] == ["g1"]
    # the three kept scenes hold the same shapes: one group; the others: one group each
    states = tuple(s.init_state() for s in sensors)
    assert link_groups(sensors, kept, states) == ((0, 1, 2),)
    assert link_groups(sensors, apart, states) == ((0,), (1,), (2,))
    # the inputs mask the sensor body out, whichever scene
    mx = mjx.put_model(m)
    host = mujoco.MjData(m)
    mujoco.mj_forward(m, host)
    d = mjx.put_data(m, host)
    from difftaxel.mjx import sensor_inputs

    for sc in (apart[0], kept[0]):
        mask = np.asarray(sensor_inputs(sc, m, d).body_mask)
        assert not mask[sc.sensor_body] and mask.sum() == m.nbody - 1
    # another grid, another option: a link of its own, order kept
    other = KinematicTaxel(probe_local_pos=grid_on_geom(m, "g3", 2, 2)[0], probe_radius=1e-3)
    mixed = (sensors[0], other, sensors[1])
    st = tuple(s.init_state() for s in mixed)
    assert link_groups(mixed, (kept[0], kept[2], kept[1]), st) == ((0, 2), (1,))
    with pytest.raises(ValueError, match="scene: 2 scenes for 3 sensors"):
        rollout(mx, d, sensors, kept[:2], jnp.zeros((1, 0)), m=m)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="link_loops: expected None or an int >= 1"):
            rollout(mx, d, sensors, kept, jnp.zeros((1, 0)), m=m, link_loops=bad)


@pytest.mark.slow  # four compilations of a three-link MJX rollout, two of its gradient: ~170 s
def test_links_in_one_loop_read_what_one_program_per_link_reads(pads):
    """Readings, final states and noise draws of the three pads under vmap, gated by MJX's
    contact list (each looped link reads its own geoms' contacts), and the gradient of the
    readings: the looped links (kept scenes) equal one program per link (float64)."""
    m, mx, sensors, apart, kept = pads
    d0 = mjx.make_data(mx)
    dz = jax.vmap(lambda z: d0.replace(qpos=d0.qpos.at[2].add(z)))(jnp.array([0.0, -3e-4]))
    keys = jax.random.split(jax.random.key(3), 2)

    def run(scenes, loops):
        def one(d, k):
            u = jnp.zeros((3, 0))
            return rollout(mx, d, sensors, scenes, u, m=m, key=k, gated=True, link_loops=loops)

        return jax.jit(jax.vmap(one))(dz, keys)

    _, s_loop, r_loop = run(kept, 1)
    _, s_each, r_each = run(apart, None)
    for a, b in zip(jax.tree.leaves((s_loop, r_loop)), jax.tree.leaves((s_each, r_each))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    f = np.asarray(r_loop[0].ground_truth.force)  # [E, T, 3, 3, 3]
    assert f.shape == (2, 3, 3, 3, 3)
    # the ball presses the first two pads (in MJX's contact list with each), not the third
    for i, touched in enumerate((True, True, False)):
        assert bool(np.any(r_loop[i].ground_truth.force != 0)) == touched
    # each link draws its own noise
    n = [np.asarray(r_loop[i].measured.force - r_loop[i].ground_truth.force) for i in (1, 2)]
    assert not np.allclose(n[0], n[1])
    # and the derivatives through the physics and the loop are the unrolled links' (the ball's
    # initial height; float64)

    def grad(scenes, loops):
        def loss(z):
            d = d0.replace(qpos=d0.qpos.at[2].add(z))
            r = rollout(mx, d, sensors, scenes, jnp.zeros((3, 0)), m=m, link_loops=loops)[2]
            return sum(jnp.sum(x.ground_truth.force[..., 2]) for x in r)

        return jax.jit(jax.grad(loss))(jnp.asarray(-1e-4))

    g_loop, g_each = grad(kept, 1), grad(apart, None)
    assert np.isfinite(g_loop) and float(g_loop) != 0.0
    np.testing.assert_allclose(g_loop, g_each, rtol=1e-10)
