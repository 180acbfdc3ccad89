"""Parity with Genesis World 1.4.5 on the shared parity kit: ContactProbe, ContactDepthProbe,
KinematicTaxel (measured and ground truth) and a KinematicTaxel with per-probe gain, Maxwell
hysteresis and an explicit 3 x 3 crosstalk kernel on its measured branch, float64.

Which steps are compared and why: **every step of every case**. Genesis's probe family reads
exactly zero unless its rigid solver reported a pad-sphere contact at the start of the step
(``n_contacts_pad_obj``); difftaxel gates geometrically, so the test passes that contact list as
``body_mask`` (the per-step gate). On steps with a contact this is the plain geometric query;
on steps without one both read zero, and the ContactProbe latch sees the same depths on both
sides, so its state stays in step across a whole sequence. The sensors see the sphere at its
post-integration pose (``*_after``), as Genesis does.

The sphere is analytic in Genesis (``|p - c| - r``); the parked box (link 2) is far away and is
included as a body to show it never contributes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import difftaxel as dt
from difftaxel import pose as P
from difftaxel.rollout import rollout
from difftaxel.sensors import (
    ContactDepthProbe,
    ContactProbe,
    KinematicTaxel,
    SensorInputs,
)


def _sensors(meta, data):
    s = meta["scene"]["sensors"]
    grid = data["probe_grid_local"]
    cp = s["contact_probe"]
    kt = s["kinematic_taxel"]
    kw = dict(
        normal_stiffness=kt["normal_stiffness"],
        normal_damping=kt["normal_damping"],
        normal_exponent=kt["normal_exponent"],
        shear_scalar=kt["shear_scalar"],
        twist_scalar=kt["twist_scalar"],
    )
    return {
        "contact_probe": ContactProbe(
            probe_local_pos=grid,
            probe_radius=cp["probe_radius"],
            contact_threshold=cp["contact_threshold"],
            release_threshold=cp["release_threshold"],
        ),
        "contact_depth_probe": ContactDepthProbe(
            probe_local_pos=grid, probe_radius=s["contact_depth_probe"]["probe_radius"]
        ),
        "kinematic_taxel": KinematicTaxel(
            probe_local_pos=grid, probe_radius=kt["probe_radius"], **kw
        ),
        "kinematic_taxel_imperfect": KinematicTaxel(
            probe_local_pos=grid,
            probe_radius=kt["probe_radius"],
            probe_gain=data["imperfect/probe_gain"],
            imperfections=dt.Imperfections(
                hysteresis_strength=s["kinematic_taxel_imperfect"]["hysteresis_strength"],
                hysteresis_tau=s["kinematic_taxel_imperfect"]["hysteresis_tau"],
                crosstalk_kernel=data["imperfect/crosstalk_kernel"],
            ),
            **kw,
        ),
    }


def _case_inputs(meta, data, case):
    ent = meta["scene"]["entities"]
    pre = f"case/{case}/"
    pos = data[pre + "pos_after"]
    quat = np.asarray(P.quat_wxyz_to_xyzw(jnp.asarray(data[pre + "quat_after"])))
    twist = np.concatenate([data[pre + "linvel_after"], data[pre + "angvel_after"]], -1)
    T = pos.shape[0]
    box_pose = np.r_[ent["box"]["parked_pos"], 0, 0, 0, 1.0]
    shapes = (
        dt.Sphere(radius=ent["sphere"]["radius"], body=0),
        dt.Box(size=ent["box"]["size"], body=1),
    )
    bodies0 = dt.Bodies(shapes, np.stack([np.r_[pos[0], quat[0]], box_pose]))
    poses = np.stack([np.concatenate([pos, quat], -1), np.broadcast_to(box_pose, (T, 7))], 1)
    twists = np.stack([twist, np.zeros((T, 6))], 1)
    gate = data[pre + "n_contacts_pad_obj"] > 0
    mask = np.stack([gate, gate], 1)
    pad = ent["pad"]
    T_world_link = np.r_[pad["pos"], P.quat_wxyz_to_xyzw(jnp.asarray(pad["quat"], float))]
    return SensorInputs(
        T_world_link=jnp.broadcast_to(jnp.asarray(T_world_link), (T, 7)),
        twist_link=jnp.zeros((T, 6)),
        bodies=jax.vmap(lambda p, t: bodies0.with_state(p, t))(
            jnp.asarray(poses), jnp.asarray(twists)
        ),
        body_mask=jnp.asarray(mask),
        dt=jnp.full((T,), meta["scene"]["sim"]["dt"]),
    )


@jax.jit
def _run_all(sensors, inputs_seq):
    out = {}
    for name, s in sensors.items():
        _, r = rollout(s, s.init_state(), inputs_seq)
        out[name] = r
    return out


def _max_rel(ours, ref):
    ours, ref = np.asarray(ours, float), np.asarray(ref, float)
    scale = np.max(np.abs(ref))
    err = np.max(np.abs(ours - ref))
    return err, scale


def test_parity_probe_family(parity_kit):
    meta, data = parity_kit
    sensors = _sensors(meta, data)
    cases = [c["name"] for c in meta["cases"]]
    compared_steps = 0
    longest = max(c["n_steps"] for c in meta["cases"])
    for case in cases:
        inputs = _case_inputs(meta, data, case)
        T = inputs.dt.shape[0]
        # every case padded to the longest by repeating its last step: one compilation of the
        # rollouts, not one per case length; a rollout is causal, so its first T steps are the
        # case's own
        padded = jax.tree.map(
            lambda x, T=T: jnp.concatenate([x, jnp.repeat(x[-1:], longest - T, 0)]), inputs
        )
        out = jax.tree.map(lambda a, T=T: a[:T], _run_all(sensors, padded))
        pre = f"case/{case}/"
        for branch, idx in (("measured", 0), ("gt", 1)):
            ref = data[pre + f"contact_probe/{branch}/value"]
            np.testing.assert_array_equal(
                np.asarray(out["contact_probe"][idx]), ref, err_msg=f"{case} contact_probe {branch}"
            )
            ref = data[pre + f"contact_depth_probe/{branch}/value"]
            err, scale = _max_rel(out["contact_depth_probe"][idx], ref)
            assert err <= 1e-9 * max(scale, 1e-300) or (scale == 0 and err == 0), (
                f"{case} contact_depth_probe {branch}: max abs err {err:.3g} vs scale {scale:.3g}"
            )
            for name in ("kinematic_taxel", "kinematic_taxel_imperfect"):
                for field in ("force", "torque"):
                    ref = data[pre + f"{name}/{branch}/{field}"]
                    ours = getattr(out[name][idx], field)
                    err, scale = _max_rel(ours, ref)
                    assert err <= 1e-9 * scale or (scale == 0 and err == 0), (
                        f"{case} {name} {branch} {field}: err {err:.3g}, scale {scale:.3g}"
                    )
        compared_steps += len(data[pre + "n_contacts_pad_obj"])
    assert compared_steps == 12 + 60 + 19


def test_parity_kit_has_contacts_and_readings(parity_kit):
    """Guard against a vacuous parity test: the kit exercises contact, sliding and latching."""
    meta, data = parity_kit
    f = data["case/slide_sphere_x/kinematic_taxel/gt/force"]
    assert np.abs(f[..., 0]).max() > 0.01  # shear present while sliding
    cp = data["case/press_sphere/contact_probe/gt/value"]
    assert cp.any() and not cp.all()
