"""Taxels inside MuJoCo MJX: overhead over the physics, and the gradient through it.

* ``overhead_over_physics`` = (MJX step + fingertip taxels) / MJX step - 1, for the Shadow Hand
  of the mujoco-mjx wheel with a taxel grid on each of its five fingertips, ``--envs``
  environments (vmap), ``--steps`` steps per rollout, both jitted, timed in alternating rounds
  (median of ``--rounds``). The fingertips sense the ball and the floor, or with
  ``--include-hand`` every other hand link too, whose collision meshes are convex hulls
  (``--mesh exact``: triangle meshes).
* ``grad_fd_rel_err``: the float64 gradient of a summed taxel reading with respect to a ball's
  initial height and mass, through ``mjx.step`` (pad-and-ball model, ``iterations="1"``),
  against central finite differences: the largest relative error.

Run: ``python benchmarks/bench_mjx.py [--envs 256] [--steps 20] [--rounds 5]``; the last line is
JSON. Needs the ``[mjx]`` extra.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np


def _time(f, *args):
    t = time.perf_counter()
    jax.block_until_ready(f(*args))
    return time.perf_counter() - t


def overhead(envs, steps, rounds, taxels, mesh, include_hand, links="fingertips", broad="auto"):
    from mujoco import mjx

    from difftaxel.mjx import load_shadow_hand, rollout, scene_from_model

    h = load_shadow_hand(taxels, taxels, include_hand=include_hand, links=links, broad_phase=broad)
    scenes = h.scenes
    if mesh == "exact":
        scenes = tuple(
            scene_from_model(
                h.m,
                s.sensor_body,
                mesh="exact",
                exclude_bodies=()
                if include_hand
                else [
                    b
                    for b in range(1, h.m.nbody)
                    if b not in (s.sensor_body, h.m.body("object").id)
                ],
            )
            for s in h.scenes
        )
    mx = mjx.put_model(h.m)
    d0 = mjx.make_data(mx)
    rng = np.random.default_rng(0)
    lo, hi = h.m.actuator_ctrlrange[:, 0], h.m.actuator_ctrlrange[:, 1]
    u = jnp.asarray(lo + (hi - lo) * rng.uniform(size=(envs, steps, h.m.nu)))
    ds = jax.vmap(lambda z: d0.replace(qpos=d0.qpos.at[-5].add(z)))(jnp.linspace(0, 1e-3, envs))

    def physics(d, u):
        return jax.lax.scan(lambda d, uu: (mjx.step(mx, d.replace(ctrl=uu)), None), d, u)[0].qpos

    def with_taxels(d, u):
        d, _, r = rollout(mx, d, h.sensors, scenes, u, m=h.m)
        return d.qpos, tuple(x.measured.force for x in r)

    f_phys = jax.jit(jax.vmap(physics))
    f_tax = jax.jit(jax.vmap(with_taxels))
    _time(f_phys, ds, u)
    _time(f_tax, ds, u)
    tp, tt = [], []
    for _ in range(rounds):  # alternating rounds on a shared machine
        tp.append(_time(f_phys, ds, u))
        tt.append(_time(f_tax, ds, u))
    mp, mt = statistics.median(tp), statistics.median(tt)
    return {
        "envs": envs,
        "steps": steps,
        "links": len(h.sensors),
        "taxels": sum(s.n_probes for s in h.sensors),
        "broad_phase": broad,
        "mesh": mesh,
        "include_hand": include_hand,
        "shapes_per_link": max(len(s.bodies.shapes) for s in scenes),
        "physics_s": mp,
        "physics_and_taxels_s": mt,
        "overhead_over_physics": mt / mp - 1.0,
    }


def gradient_check(steps: int = 40) -> float:
    from mujoco import mjx

    from difftaxel.mjx import pad_and_ball, rollout

    jax.config.update("jax_enable_x64", True)
    m, sensor, scene = pad_and_ball()
    mx = mjx.put_model(m)
    d0 = mjx.make_data(mx)

    def loss(z0, mass):
        mm = mx.replace(body_mass=mx.body_mass.at[2].set(mass))
        d = d0.replace(qpos=d0.qpos.at[2].set(z0))
        _, _, r = rollout(mm, d, sensor, scene, jnp.zeros((steps, 0)), m=m)
        return jnp.sum(r.ground_truth.force[..., 2]) * 1e-2

    g = jax.jit(jax.grad(loss, argnums=(0, 1)))(0.0158, 0.05)
    f = jax.jit(loss)
    h = 1e-6
    fd = (
        (f(0.0158 + h, 0.05) - f(0.0158 - h, 0.05)) / (2 * h),
        (f(0.0158, 0.05 + h) - f(0.0158, 0.05 - h)) / (2 * h),
    )
    return max(abs(float(a) - float(b)) / abs(float(b)) for a, b in zip(g, fd))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--envs", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--taxels", type=int, default=4, help="grid side per fingertip (4: 4x4)")
    ap.add_argument("--mesh", choices=("hull", "exact"), default="hull")
    ap.add_argument(
        "--include-hand",
        action="store_true",
        help="fingertips also sense every other hand link (meshes matter only then)",
    )
    ap.add_argument("--links", choices=("fingertips", "all"), default="fingertips")
    ap.add_argument("--broad-phase", choices=("auto", "links", "off"), default="auto")
    a = ap.parse_args()
    out = overhead(
        a.envs, a.steps, a.rounds, a.taxels, a.mesh, a.include_hand, a.links, a.broad_phase
    )
    print(
        f"Shadow Hand, {a.envs} envs x {a.steps} steps: physics {out['physics_s']:.3f} s, "
        f"with taxels {out['physics_and_taxels_s']:.3f} s, overhead "
        f"{out['overhead_over_physics']:+.1%}"
    )
    err = gradient_check()
    print(f"gradient through mjx.step vs finite differences: max relative error {err:.2e}")
    out.update(
        grad_fd_rel_err=err,
        device=jax.devices()[0].device_kind,
        machine=platform.processor() or platform.machine(),
        date=time.strftime("%Y-%m-%d"),
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
