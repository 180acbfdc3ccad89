"""KinematicTaxel throughput: 11 x 11 grid vs a sphere, vmapped over environments.

Forward: one jitted step for E environments (``jax.vmap``). Forward+grad: value and gradient
of a scalar loss of all readings with respect to every environment's object pose, two ways:
``jax.vmap`` (plain) and ``difftaxel.vmap_envs(..., grad_chunk=256)`` (the reverse pass
chunked over environments; the same values and gradients). Reported as taxel-steps/s
(E * 121 / time) and the ratios grad / forward, timed round-robin (every round runs the
forward and both gradients once) so the shared machine's drift hits all three alike.

Usage: python benchmarks/bench_kinematic.py [--envs 64 1024 4096] [--grad-chunk 256]
Last line: {"taxel_steps_per_s": {...}, "grad_over_forward": {...} (vmap_envs),
"grad_over_forward_plain_vmap": {...}, "compile_s": ...}
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
    time_interleaved,
)

import difftaxel as dt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", type=int, nargs="+", default=[64, 1024, 4096])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--grad-chunk", type=int, default=256)
    a = ap.parse_args()
    kt, bodies, inp = kinematic_scene()
    st = kt.init_state()

    forward, loss = kinematic_forward_and_loss(inp, st)
    _, loss_c = kinematic_forward_and_loss(
        inp, st, vmap=lambda f: dt.vmap_envs(f, grad_chunk=a.grad_chunk)
    )
    grad_plain = jax.value_and_grad(loss, argnums=1)
    grad_chunked = jax.value_and_grad(loss_c, argnums=1)
    rate, ratio, ratio_plain, comp = {}, {}, {}, {}
    rng = np.random.default_rng(0)
    for E in a.envs:
        poses = np.tile(bodies.poses[0], (E, 1))
        poses[:, :2] += rng.uniform(-0.01, 0.01, (E, 2))
        poses[:, 2] += rng.uniform(-0.0015, 0.0005, E)
        poses = jnp.asarray(poses, jnp.float32)
        cases = {
            "forward": (forward, (kt, poses)),
            "grad_plain": (grad_plain, (kt, poses)),
            "grad_chunked": (grad_chunked, (kt, poses)),
        }
        c, t, r = time_interleaved(cases, rounds=a.rounds)
        rate[str(E)] = E * kt.n_probes / t["forward"]
        ratio[str(E)] = r["grad_chunked"]
        ratio_plain[str(E)] = r["grad_plain"]
        comp[str(E)] = {"forward": c["forward"], "grad": c["grad_chunked"]}
        print(
            f"E={E:5d}  forward {rate[str(E)]:.3e} taxel-steps/s  grad/forward "
            f"{ratio[str(E)]:.2f} (vmap_envs) {ratio_plain[str(E)]:.2f} (jax.vmap)"
            f"  compile {c['forward']:.2f}/{c['grad_chunked']:.2f} s"
        )
    emit(
        {
            "taxel_steps_per_s": rate,
            "grad_over_forward": ratio,
            "grad_over_forward_plain_vmap": ratio_plain,
            "grad_chunk": a.grad_chunk,
            "compile_s": comp[str(a.envs[-1])]["forward"],
            "compile_detail_s": comp,
            "dtype": "float32",
            "taxels": kt.n_probes,
        }
    )


if __name__ == "__main__":
    main()
