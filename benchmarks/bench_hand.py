"""Touch over the whole Shadow Hand inside MJX: the overhead of taxels over the bare physics.

Configurations, each a jitted, vmapped ``rollout`` (``mjx.step`` and the taxels in one scan)
timed against the jitted ``mjx.step`` scan alone, alternating; each round times every
configuration and the physics once, and the overhead is the median over ``--rounds`` of each
round's own ratio (the machine's drift between rounds cancels):

* ``fingertips``: a 4 x 4 grid on each of the five fingertips (80 taxels) sensing the ball and
  the floor;
* ``fingertips_all``: the same taxels sensing every other hand link too (31 shapes each);
* ``hand``: a 7 x 7 grid on each of the 21 hand links with a collision geom (1,029 taxels),
  sensing the ball and the floor;
* ``hand_all``: those 1,029 taxels, each link sensing every other hand link, the ball and the
  floor (31 shapes), in the default configuration (``broad_phase="auto"``: the per-link broad
  phase);
* ``hand_all_exhaustive`` (``--exhaustive``): the same with ``broad_phase="off"``;
* ``hand_all_loop``: ``hand_all`` with ``rollout(..., link_loops=1)``: the 21 links stepped in
  one loop (compiles about ten times faster).

The Shadow Hand is the mujoco-mjx wheel's test model (convex hull meshes), random controls,
``--steps`` steps per rollout, float32.

Run: ``python benchmarks/bench_hand.py [--envs 256 1024] [--steps 10] [--rounds 5]
[--exhaustive] [--configs hand hand_all]``; the last line is JSON (the machine on the line before). Needs the ``[mjx]`` extra.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import emit  # noqa: E402

CONFIGS = {
    "fingertips": dict(nx=4, links="fingertips", include_hand=False, broad_phase="auto"),
    "fingertips_all": dict(nx=4, links="fingertips", include_hand=True, broad_phase="auto"),
    "hand": dict(nx=7, links="all", include_hand=False, broad_phase="auto"),
    "hand_all": dict(nx=7, links="all", include_hand=True, broad_phase="auto"),
    "hand_all_exhaustive": dict(nx=7, links="all", include_hand=True, broad_phase="off"),
    "hand_all_loop": dict(nx=7, links="all", include_hand=True, broad_phase="auto", loops=1),
}


def _time(f, *args):
    t = time.perf_counter()
    jax.block_until_ready(f(*args))
    return time.perf_counter() - t


def run(envs: int, steps: int, rounds: int, names) -> dict:
    from mujoco import mjx

    from difftaxel.mjx import load_shadow_hand, rollout

    fns, info = {}, {}
    for name in names:
        c = CONFIGS[name]
        h = load_shadow_hand(
            c["nx"],
            c["nx"],
            include_hand=c["include_hand"],
            links=c["links"],
            broad_phase=c["broad_phase"],
        )
        mx = mjx.put_model(h.m)
        d0 = mjx.make_data(mx)
        if "physics" not in fns:
            rng = np.random.default_rng(0)
            lo, hi = h.m.actuator_ctrlrange[:, 0], h.m.actuator_ctrlrange[:, 1]
            u = jnp.asarray(lo + (hi - lo) * rng.uniform(size=(envs, steps, h.m.nu)))
            z = jnp.linspace(0, 1e-3, envs)
            ds = jax.vmap(lambda z, d0=d0: d0.replace(qpos=d0.qpos.at[-5].add(z)))(z)

            def physics(d, u, mx=mx):
                step = lambda d, uu: (mjx.step(mx, d.replace(ctrl=uu)), None)  # noqa: E731
                return jax.lax.scan(step, d, u)[0].qpos

            fns["physics"] = jax.jit(jax.vmap(physics))
            _time(fns["physics"], ds, u)

        loops = c.get("loops")

        def with_taxels(d, u, h=h, mx=mx, loops=loops):
            d, _, r = rollout(mx, d, h.sensors, h.scenes, u, m=h.m, link_loops=loops)
            return d.qpos, tuple(x.measured.force for x in r)

        f = jax.jit(jax.vmap(with_taxels))
        compile_s = _time(f, ds, u)
        fns[name] = f
        info[name] = {
            "links": len(h.sensors),
            "taxels": sum(s.n_probes for s in h.sensors),
            # the shapes each link senses (a scene may keep the link's own, masked out)
            "shapes_per_link": max(
                sum(x.body != s.sensor_body for x in s.bodies.shapes) for s in h.scenes
            ),
            "first_call_s": compile_s,
        }
        print(f"{name}: compiled and ran once in {compile_s:.1f} s", flush=True)
    times = {k: [] for k in fns}
    for _ in range(rounds):  # alternating rounds on a shared machine
        for k, f in fns.items():
            times[k].append(_time(f, ds, u))
    phys = statistics.median(times["physics"])
    out = {"envs": envs, "steps": steps, "physics_s": phys}
    for name in names:
        t = statistics.median(times[name])
        ratios = [a / b for a, b in zip(times[name], times["physics"], strict=True)]
        over = statistics.median(ratios) - 1.0
        out[name] = {**info[name], "with_taxels_s": t, "overhead": over}
        print(
            f"{envs} envs, {name}: {info[name]['taxels']} taxels, physics {phys:.3f} s, "
            f"with taxels {t:.3f} s, overhead {over:+.1%} (rounds "
            + ", ".join(f"{r - 1:+.1%}" for r in ratios)
            + ")",
            flush=True,
        )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--envs", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--exhaustive", action="store_true", help="also time broad_phase='off'")
    ap.add_argument(
        "--configs",
        nargs="+",
        choices=list(CONFIGS),
        help="only these configurations (default: all but the exhaustive one)",
    )
    a = ap.parse_args()
    names = [n for n in CONFIGS if a.exhaustive or n != "hand_all_exhaustive"]
    if a.configs:
        names = [n for n in CONFIGS if n in a.configs]
    res = [run(e, a.steps, a.rounds, names) for e in a.envs]
    emit({"results": res})


if __name__ == "__main__":
    main()
