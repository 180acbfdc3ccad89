"""Compile time against the number of shapes in the scene: KinematicTaxel (5 x 5 probes) among
``n`` spheres, its jitted step and the jitted gradient of a scalar of its readings with respect
to every body pose (``jit(f).lower(...).compile()``, wall time). Shapes of one kind are one
batched evaluation, so both stay flat as spheres are added.

Usage: python benchmarks/bench_compile.py [--spheres 1 12 50 200]
Last line: {"compile_s": {"step": {n: s}, "grad": {n: s}}, "jaxpr_eqns": {"step": {n: k}}}
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import emit  # noqa: E402

from difftaxel.geometry import Bodies, Sphere  # noqa: E402
from difftaxel.sensors import KinematicTaxel, make_inputs  # noqa: E402


def scene(n):
    g = np.stack(np.meshgrid(np.arange(5) * 2e-3, np.arange(5) * 2e-3), -1).reshape(-1, 2)
    s = KinematicTaxel(probe_local_pos=np.c_[g, np.zeros(25)], probe_radius=1e-3)
    rng = np.random.default_rng(0)
    poses = np.concatenate([rng.normal(size=(n, 3)) * 0.05, np.tile([0, 0, 0, 1.0], (n, 1))], 1)
    poses[0, :3] = [0.004, 0.004, 0.0095]  # one sphere touches the pad
    b = Bodies(tuple(Sphere(radius=0.01, body=i) for i in range(n)), poses)
    return s, make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spheres", type=int, nargs="+", default=[1, 12, 50, 200])
    args = ap.parse_args()
    jax.config.update("jax_enable_x64", True)
    out = {"compile_s": {"step": {}, "grad": {}}, "jaxpr_eqns": {"step": {}}}
    for n in args.spheres:
        s, inp = scene(n)
        st = s.init_state()

        def step(inp, s=s, st=st):
            return s.step(st, inp)

        def loss(P, inp, s=s, st=st):
            return jnp.sum(
                s.step(st, inp.replace(bodies=inp.bodies.with_state(P)))[1].measured.force ** 2
            )

        t = time.perf_counter()
        jax.jit(step).lower(inp).compile()
        out["compile_s"]["step"][n] = time.perf_counter() - t
        t = time.perf_counter()
        jax.jit(jax.grad(loss)).lower(inp.bodies.poses, inp).compile()
        out["compile_s"]["grad"][n] = time.perf_counter() - t
        out["jaxpr_eqns"]["step"][n] = len(jax.make_jaxpr(step)(inp).jaxpr.eqns)
        print(f"{n:4d} spheres: step {out['compile_s']['step'][n]:.2f} s, gradient "
              f"{out['compile_s']['grad'][n]:.2f} s, {out['jaxpr_eqns']['step'][n]} operations")  # fmt: skip
    emit(out)


if __name__ == "__main__":
    main()
