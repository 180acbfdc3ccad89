"""KinematicTaxel throughput: 11 x 11 grid vs a sphere, vmapped over environments.

Forward: one jitted step for E environments. Forward+grad: value and gradient of a scalar loss
of all readings with respect to every environment's object pose. Reported as taxel-steps/s
(E * 121 / time) and the ratio grad / forward measured side by side in one run.

Usage: python benchmarks/bench_kinematic.py [--envs 64 1024 4096] [--dtype float32]
Last line: {"taxel_steps_per_s": {...}, "grad_over_forward": {...}, "compile_s": ...}
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import (  # noqa: E402
    emit,
    kinematic_forward_and_loss,
    kinematic_scene,
    time_jitted,
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", type=int, nargs="+", default=[64, 1024, 4096])
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    kt, bodies, inp = kinematic_scene()
    st = kt.init_state()

    forward, loss = kinematic_forward_and_loss(inp, st)

    grad_fn = jax.value_and_grad(loss, argnums=1)
    rate, ratio, comp = {}, {}, {}
    rng = np.random.default_rng(0)
    for E in a.envs:
        poses = np.tile(bodies.poses[0], (E, 1))
        poses[:, :2] += rng.uniform(-0.01, 0.01, (E, 2))
        poses[:, 2] += rng.uniform(-0.0015, 0.0005, E)
        poses = jnp.asarray(poses, jnp.float32)
        c_f, t_f = time_jitted(forward, kt, poses, repeats=a.repeats)
        c_g, t_g = time_jitted(grad_fn, kt, poses, repeats=a.repeats)
        rate[str(E)] = E * kt.n_probes / t_f
        ratio[str(E)] = t_g / t_f
        comp[str(E)] = {"forward": c_f, "grad": c_g}
        print(
            f"E={E:5d}  forward {rate[str(E)]:.3e} taxel-steps/s  grad/forward {ratio[str(E)]:.2f}"
            f"  compile {c_f:.2f}/{c_g:.2f} s"
        )
    emit(
        {
            "taxel_steps_per_s": rate,
            "grad_over_forward": ratio,
            "compile_s": comp[str(a.envs[-1])]["forward"],
            "compile_detail_s": comp,
            "dtype": "float32",
            "taxels": kt.n_probes,
        }
    )


if __name__ == "__main__":
    main()
