"""Cost of the full imperfection chain per step relative to the bare KinematicTaxel.

11 x 11 grid vs a sphere, 1024 environments, one jitted vmapped step each, timed
round-robin (each round runs every configuration once; ratios are medians over rounds).
The chain: radius noise, per-reset gain, Gaussian crosstalk, Maxwell hysteresis, random
walk, white noise, bias, quantisation, dead taxels, delay with jitter; run with the default
Gaussian generator (threefry + Box-Muller) and with ``noise_generator="hash"``, and once
without per-step random draws. Two more cases time the chain's per-step Gaussian draws alone
(random walk + white noise: ``[2, 121, 6]`` normals per environment, written out), with each
generator: ``chain_over_bare`` cannot fall much below ``1 + draws_over_bare`` while every
channel draws its own exact normals each step.

Usage: python benchmarks/bench_imperfections.py [--envs 1024]
Last line: {"chain_over_bare": ..., "draws_over_bare": ..., ...}
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import emit, kinematic_scene, time_interleaved  # noqa: E402

import difftaxel as dt  # noqa: E402
from difftaxel.imperfections import hash_normal, standard_normal  # noqa: E402
from difftaxel.sensors.base import split3  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args()
    chain = dict(
        hysteresis_strength=0.5,
        hysteresis_tau=0.1,
        crosstalk_strength=0.3,
        crosstalk_sigma=0.003,
        dead_taxel_probability=0.02,
        dead_taxel_value_range=(0, 0.1),
        bias=5e-4,
        resolution=5e-4,
        delay=0.01,
        dt=0.005,
    )
    bare, bodies, inp = kinematic_scene()
    full, _, _ = kinematic_scene(
        probe_radius_noise=1e-4,
        probe_gain_resample_range=(0.8, 1.2),
        imperfections=dt.Imperfections(**chain, noise=1e-3, random_walk=1e-4, jitter=0.001),
    )
    full_hash, _, _ = kinematic_scene(
        probe_radius_noise=1e-4,
        probe_gain_resample_range=(0.8, 1.2),
        imperfections=dt.Imperfections(
            **chain, noise=1e-3, random_walk=1e-4, jitter=0.001, noise_generator="hash"
        ),
    )
    deterministic, _, _ = kinematic_scene(
        probe_gain_resample_range=(0.8, 1.2), imperfections=dt.Imperfections(**chain)
    )
    E = a.envs
    rng = np.random.default_rng(0)
    poses = np.tile(bodies.poses[0], (E, 1))
    poses[:, :2] += rng.uniform(-0.01, 0.01, (E, 2))
    poses[:, 2] += rng.uniform(-0.0015, 0.0005, E)
    poses = jnp.asarray(poses, jnp.float32)
    keys = jax.random.split(jax.random.key(0), E)

    def make_step(sensor):
        def step(states, poses, keys):
            def one(st, pose, k):
                return sensor.step(st, inp.replace(bodies=inp.bodies.with_state(pose[None])), k)

            return jax.vmap(one)(states, poses, keys)

        return step

    def make_draws(draw):
        def draws(keys):
            def one(k):
                _, k_hw, _ = split3(k)  # the chain's own key for its hardware stage
                return draw(k_hw, (2, 121, 6), jnp.float32)

            return jax.vmap(one)(keys)

        return draws

    cases = {}
    for name, s in (
        ("bare", bare),
        ("full", full),
        ("full_hash", full_hash),
        ("no_random", deterministic),
    ):
        states = jax.vmap(s.init_state)(keys)
        cases[name] = (make_step(s), (states, poses, keys))
    cases["draws"] = (make_draws(standard_normal), (keys,))
    cases["draws_hash"] = (make_draws(hash_normal), (keys,))
    # round-robin timing: every round runs each case once, ratios are medians over rounds
    comp, times, ratios = time_interleaved(cases, rounds=a.repeats)
    for name in cases:
        print(
            f"{name:10s} {E * 121 / times[name]:.3e} taxel-steps/s  compile {comp[name]:.2f} s"
            f"  / bare {ratios[name]:.2f}"
        )
    ratio, ratio_h, ratio_nr = ratios["full"], ratios["full_hash"], ratios["no_random"]
    print(
        f"chain / bare = {ratio:.2f}; with noise_generator='hash' = {ratio_h:.2f}; "
        f"without per-step random draws = {ratio_nr:.2f}; the draws alone / bare = "
        f"{ratios['draws']:.2f} (hash {ratios['draws_hash']:.2f})"
    )
    emit(
        {
            "chain_over_bare": ratio,
            "chain_hash_generator_over_bare": ratio_h,
            "chain_without_random_draws_over_bare": ratio_nr,
            "draws_over_bare": ratios["draws"],
            "draws_hash_over_bare": ratios["draws_hash"],
            "envs": E,
            "bare_taxel_steps_per_s": E * 121 / times["bare"],
            "full_taxel_steps_per_s": E * 121 / times["full"],
        }
    )


if __name__ == "__main__":
    main()
