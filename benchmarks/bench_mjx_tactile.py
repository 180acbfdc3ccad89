"""MuJoCo's ``<tactile>`` sensor inside MJX: its cost over the bare physics, and against the C
engine.

Two models from :func:`difftaxel.mjx.shadow_hand_with_tactile` (the Shadow Hand of the
mujoco-mjx wheel, MJCF ``<tactile>`` plates of ``--resolution`` squared taxels): on the five
fingertips, and on every hand link. For each and each of ``--envs``:

* ``overhead_over_physics`` = (``mjx.step`` + the tactile values, :func:`tactile_rollout`) /
  ``mjx.step`` - 1, vmapped over the environments, ``--steps`` steps, both jitted, timed in
  alternating rounds (median of ``--rounds``), random controls;
* ``overhead_every_pair``: the same with ``visit="pairs"`` (every pair that could touch,
  evaluated then gated: the check the default's contact-list pass is tested against);
* ``visit``: what the default evaluates there (:mod:`difftaxel.mjx.tactile_visit`);
* ``tactile_us_per_env_step``: that difference per environment-step (microseconds);
* ``c_tactile_us_per_env_step``: the C engine's own tactile cost per environment-step,
  ``mj_step`` with the sensors on minus off (``mjDSBL_SENSOR``), one environment on one
  thread, the same controls (median of ``--rounds``);
* ``ratio_c_over_difftaxel``: the second over the first (> 1: difftaxel's batched tactile
  values cost less per environment-step than the C engine's).

Run: ``python benchmarks/bench_mjx_tactile.py [--envs 64 1024] [--steps 10] [--rounds 3]``; the
last line is JSON. Needs the ``[mjx]`` extra.
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


def _c_tactile_cost(m, u, rounds):
    """Seconds per step of the C engine's tactile sensors (sensors on minus off)."""
    import mujoco

    flags = m.opt.disableflags

    def run(disable):
        m.opt.disableflags = flags | int(mujoco.mjtDisableBit.mjDSBL_SENSOR) if disable else flags
        d = mujoco.MjData(m)
        t = time.perf_counter()
        for k in range(u.shape[0]):
            d.ctrl[:] = u[k]
            mujoco.mj_step(m, d)
        dt = time.perf_counter() - t
        m.opt.disableflags = flags
        return dt / u.shape[0]

    on, off = [], []
    for _ in range(rounds):
        on.append(run(False))
        off.append(run(True))
    return statistics.median(on) - statistics.median(off), statistics.median(off)


def measure(links, envs, steps, rounds, resolution) -> dict:
    from mujoco import mjx

    from difftaxel.mjx import mjcf_tactile, shadow_hand_with_tactile, tactile_rollout
    from difftaxel.mjx.tactile_visit import choose_visit

    m = shadow_hand_with_tactile(resolution, links)
    mx = mjx.put_model(m)
    tac = mjcf_tactile(m)
    d0 = mjx.make_data(mx)
    rng = np.random.default_rng(0)
    lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    u = lo + (hi - lo) * rng.uniform(size=(envs, steps, m.nu))
    uj = jnp.asarray(u)
    ds = jax.vmap(lambda z: d0.replace(qpos=d0.qpos.at[-5].add(z)))(jnp.linspace(0, 1e-3, envs))

    def physics(d, u):
        return jax.lax.scan(lambda d, uu: (mjx.step(mx, d.replace(ctrl=uu)), None), d, u)[0].qpos

    def with_tactile(d, u, tac):
        d, sd = tactile_rollout(mx, d, tac, u)
        return d.qpos, sd

    f_phys = jax.jit(jax.vmap(physics))
    f_tac = jax.jit(jax.vmap(with_tactile, (0, 0, None)))
    every = tac.replace(visit="pairs")
    for f, *extra in ((f_phys,), (f_tac, tac), (f_tac, every)):
        _time(f, ds, uj, *extra)
    tp, tt, te = [], [], []
    for _ in range(rounds):  # alternating rounds on a shared machine
        tp.append(_time(f_phys, ds, uj))
        tt.append(_time(f_tac, ds, uj, tac))
        te.append(_time(f_tac, ds, uj, every))
    mp, mt, me = (statistics.median(z) for z in (tp, tt, te))
    c_tac, c_step = _c_tactile_cost(m, np.repeat(u[0], 20, axis=0), rounds)
    ours = (mt - mp) / (envs * steps)
    taxels = int(sum(m.sensor_dim) // 3)
    return {
        "links": links,
        "envs": envs,
        "steps": steps,
        "sensors": int(m.nsensor),
        "taxels": taxels,
        "physics_s": mp,
        "physics_and_tactile_s": mt,
        "overhead_over_physics": mt / mp - 1.0,
        "overhead_every_pair": me / mp - 1.0,
        "visit": choose_visit(tac, d0),
        "tactile_us_per_env_step": ours * 1e6,
        "c_tactile_us_per_env_step": c_tac * 1e6,
        "c_step_without_sensors_us": c_step * 1e6,
        "ratio_c_over_difftaxel": c_tac / ours if ours > 0 else float("inf"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--envs", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--resolution", type=int, default=7, help="taxels per plate side")
    a = ap.parse_args()
    rows = []
    for links in ("fingertips", "all"):
        for envs in a.envs:
            r = measure(links, envs, a.steps, a.rounds, a.resolution)
            rows.append(r)
            print(
                f"{links:>10} ({r['taxels']} taxels), {envs} envs: tactile overhead "
                f"{r['overhead_over_physics']:+.1%} over mjx.step ({r['visit']}; every pair "
                f"{r['overhead_every_pair']:+.1%}); {r['tactile_us_per_env_step']:.2f}"
                f" us per env-step vs the C engine's {r['c_tactile_us_per_env_step']:.2f} us "
                f"(x{r['ratio_c_over_difftaxel']:.2f})"
            )
    print(
        json.dumps(
            {
                "rows": rows,
                "device": jax.devices()[0].device_kind,
                "machine": platform.processor() or platform.machine(),
                "date": time.strftime("%Y-%m-%d"),
            }
        )
    )


if __name__ == "__main__":
    main()
