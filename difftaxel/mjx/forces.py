"""MJX contact forces over a trajectory, and taxel stiffness fitted to them."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco  # the package's __init__ checked the extra is installed
import numpy as np
from mujoco import mjx as _mjx

from .placement import mujoco_quat_to_matrix
from .scene import _body_id, _inputs, _rootids, _timestep

Array = jax.Array

__all__ = ["trajectory", "contact_force_on", "taxel_forces_over", "ForceMatch", "fit_taxel_forces"]

# ----------------------------------------------------------------------------- forces


def trajectory(mx, d0, controls, xfrc=None):
    """``mjx.Data`` stacked over ``T`` steps: ``controls [T, nu]``, optional applied body
    wrenches ``xfrc [T, nbody, 6]`` (world force then torque, at the body's centre of mass)."""
    T = controls.shape[0]
    if xfrc is None:
        xfrc = jnp.zeros((T,) + tuple(d0.xfrc_applied.shape), d0.xfrc_applied.dtype)

    def step(d, xs):
        u, f = xs
        d = _mjx.step(mx, d.replace(ctrl=u, xfrc_applied=f))
        return d, d

    return jax.lax.scan(step, d0, (controls, xfrc))[1]


def contact_force_on(m, traj, body) -> Array:
    """World force ``[T, 3]`` (N) that constraints (contacts, when nothing else constrains it)
    exert on ``body`` over a trajectory, read from ``qfrc_constraint`` on its translational
    dofs: a free joint's first three dofs, or slide joints (their world axes; the body's
    parent must be the world). Rotational dofs are ignored."""
    b = _body_id(m, body)
    if int(m.body_jntnum[b]) < 1:
        raise ValueError(f"body: {body!r} has no joint")
    cols, axes = [], []
    for j in range(int(m.body_jntadr[b]), int(m.body_jntadr[b] + m.body_jntnum[b])):
        t, a = int(m.jnt_type[j]), int(m.jnt_dofadr[j])
        if t == mujoco.mjtJoint.mjJNT_FREE:
            cols += [a, a + 1, a + 2]
            axes += list(np.eye(3))
        elif t == mujoco.mjtJoint.mjJNT_SLIDE:
            if int(m.body_parentid[b]) != 0:
                raise ValueError(f"body: {body!r} slides on a moving parent")
            R = mujoco_quat_to_matrix(m.body_quat[b])
            cols.append(a)
            axes.append(R @ np.asarray(m.jnt_axis[j], float))
    if not cols:
        raise ValueError(f"body: {body!r} has no translational joint (free or slide)")
    A = jnp.asarray(np.asarray(axes))  # [k, 3]
    return traj.qfrc_constraint[:, np.asarray(cols)] @ A


def taxel_forces_over(sensor, scene, m, traj) -> Array:
    """Ground-truth taxel forces ``[T, *layout, 3]`` (N, sensor link frame) of a stateless
    sensor (KinematicTaxel) over a recorded trajectory (``jax.vmap`` over time)."""
    root = np.asarray(_rootids(m))
    dt = _timestep(m)

    def one(d):
        return sensor.step(sensor.init_state(), _inputs(d, scene, root, dt, False))[1]

    return jax.vmap(one)(traj).ground_truth.force


class ForceMatch(NamedTuple):
    """Result of :func:`fit_taxel_forces`: the fitted ``sensor``, its ``normal_stiffness``
    and ``shear_scalar``, and the relative error of the summed taxel force against MJX's
    contact force, before and after, on the ``rest`` and ``sliding`` frames."""

    sensor: object
    normal_stiffness: float
    shear_scalar: float
    error_before: dict
    error_after: dict


def _phase_means(F, frames):
    return jnp.stack([jnp.mean(F[np.asarray(sel, bool)], 0) for sel in frames.values()])


def _force_errors(F_sum, F_ref, frames):
    got, ref = np.asarray(_phase_means(F_sum, frames)), np.asarray(_phase_means(F_ref, frames))
    out = {}
    for k, name in enumerate(frames):
        n = max(abs(ref[k, 2]), 1e-12)
        out[name] = {
            "normal": float(abs(got[k, 2] - ref[k, 2]) / n),
            "tangential": float(np.linalg.norm(got[k, :2] - ref[k, :2]) / n),
        }
    return out


def fit_taxel_forces(sensor, scene, m, traj, F_pad, frames: dict, steps: int = 300):
    """Fit a KinematicTaxel's ``normal_stiffness`` and ``shear_scalar`` so that its summed
    taxel force matches MJX's contact force on the pad, ``F_pad [T, 3]`` (world; the force
    the touching body exerts on the sensor link, e.g. ``-contact_force_on(m, traj, probe)``),
    with :func:`difftaxel.calibrate.fit` (log parameters).

    MuJoCo's soft contact and the taxels' spring-damper are different models: the spring's
    stiffness sets the summed normal force for MuJoCo's penetration, the viscous shear gain
    the tangential one. ``frames`` names boolean ``[T]`` phases (e.g. ``{"rest": ...,
    "sliding": ...}``); the fit and the report compare each phase's **mean** force (with
    ``iterations="1"`` MJX resolves sliding friction with frame-to-frame chatter that a
    spring-damper does not have). The report is the error of the normal and of the
    tangential mean force, both relative to the phase's mean normal force. The sensor link
    must be static and aligned with the world (forces compared in the world frame).
    """
    from ..calibrate import fit

    F_ref = jnp.asarray(F_pad)
    target = _phase_means(F_ref, frames)
    scale = float(jnp.abs(target).max()) or 1.0

    def summed(k, c):
        s = sensor.replace(normal_stiffness=k, shear_scalar=c)
        F = taxel_forces_over(s, scene, m, traj)
        return F.reshape(F.shape[0], -1, 3).sum(1)

    def loss(p, _):
        return jnp.mean((_phase_means(summed(p["k"], p["c"]), frames) - target) ** 2) / scale**2

    k0 = float(jnp.mean(jnp.asarray(sensor.normal_stiffness)))
    c0 = max(float(jnp.mean(jnp.asarray(sensor.shear_scalar))), 1e-3)
    before = _force_errors(summed(k0, c0), F_ref, frames)
    r = fit(
        loss,
        {"k": jnp.asarray(k0), "c": jnp.asarray(c0)},
        steps=steps,
        learning_rate=0.05,
        transforms={"k": "log", "c": "log"},
    )
    k, c = float(r.params["k"]), float(r.params["c"])
    after = _force_errors(summed(k, c), F_ref, frames)
    return ForceMatch(sensor.replace(normal_stiffness=k, shear_scalar=c), k, c, before, after)
