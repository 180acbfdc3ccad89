"""Cost of the full imperfection chain per step relative to the bare KinematicTaxel.

11 x 11 grid vs a sphere, 1024 environments, one jitted vmapped step each, timed
round-robin (each round runs every configuration once; ratios are medians over rounds).
The chain: radius noise, per-reset gain, Gaussian crosstalk, Maxwell hysteresis, random
walk, white noise, bias, quantisation, dead taxels, delay with jitter; run with the default
Gaussian generator (the counter hash + Box-Muller) and with ``noise_generator="threefry"``, and once
without per-step random draws. Three more cases, in the same rounds, time the chain's
per-step Gaussian draws alone (random walk + white noise: ``[2, 121, 6]`` float32 normals per
environment, 1.5 M in all, written out) from ``jax.random.normal`` and from the chain's two
generators: ``chain_over_bare`` cannot fall much below ``1 + draws_over_bare`` while every
channel draws its own exact normals each step.

The same four sensors are then timed inside ``difftaxel.rollout.rollout_envs`` over
``--steps`` (16) steps, per step (``*_rollout``): how a simulation runs the chain, with the
chain's state in the scan's carry instead of passed in and out of every call, and every
step's readings written into ``[E, T, ...]`` outputs; the bare sensor also with
``time_major=True`` (readings ``[T, E, ...]``, no final transpose).

Usage: python benchmarks/bench_imperfections.py [--envs 1024] [--steps 16]
Last line: {"chain_over_bare": ..., "chain_over_bare_rollout": ..., ...}
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
from difftaxel.rollout import rollout_envs  # noqa: E402
from difftaxel.sensors.base import split3  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--steps", type=int, default=16)
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
    full_threefry, _, _ = kinematic_scene(
        probe_radius_noise=1e-4,
        probe_gain_resample_range=(0.8, 1.2),
        imperfections=dt.Imperfections(
            **chain, noise=1e-3, random_walk=1e-4, jitter=0.001, noise_generator="threefry"
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

    T = a.steps
    # the rollout: the object slides 4 mm over the T steps from each environment's pose
    slide = jnp.asarray(np.linspace(0.0, 0.004, T), jnp.float32)
    poses_seq = jnp.repeat(poses[:, None], T, axis=1).at[:, :, 0].add(slide[None])

    def make_rollout(sensor, time_major=False):
        def roll(states, poses_seq, keys):
            def inputs_at(pose):
                return inp.replace(bodies=inp.bodies.with_state(pose[None]))

            seq = jax.vmap(jax.vmap(inputs_at))(poses_seq)
            if time_major:
                seq = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), seq)
            return rollout_envs(sensor, states, seq, keys, time_major=time_major)

        return roll

    sensors = {
        "bare": bare,
        "full": full,
        "full_threefry": full_threefry,
        "no_random": deterministic,
    }
    steps, rolls = {}, {}
    for name, s in sensors.items():
        states = jax.vmap(s.init_state)(keys)
        steps[name] = (make_step(s), (states, poses, keys))
        rolls[name] = (make_rollout(s), (states, poses_seq, keys))
        if name == "bare":  # readings [T, E, ...]: no final transpose
            rolls["bare_time_major"] = (make_rollout(s, True), (states, poses_seq, keys))
    draws = {
        "jax_random_normal": (make_draws(jax.random.normal), (keys,)),
        "standard_normal": (make_draws(standard_normal), (keys,)),
        "hash_normal": (make_draws(hash_normal), (keys,)),
    }
    # round-robin timing: every round runs each case once, ratios are medians over rounds
    comp, times, ratios = time_interleaved({**steps, **draws}, rounds=a.repeats)
    comp_r, times_r, ratios_r = time_interleaved(rolls, rounds=a.repeats)
    print(f"one jitted step, {E} environments:")
    for name in steps:
        print(
            f"  {name:10s} {E * 121 / times[name]:.3e} taxel-steps/s  compile "
            f"{comp[name]:.2f} s  / bare {ratios[name]:.2f}"
        )
    print(f"rollout_envs over {T} steps, per step:")
    for name in rolls:
        print(
            f"  {name:10s} {E * 121 * T / times_r[name]:.3e} taxel-steps/s  compile "
            f"{comp_r[name]:.2f} s  / bare {ratios_r[name]:.2f}"
        )
    print("the chain's per-step draws alone ([2, 121, 6] float32 normals per environment):")
    for name in draws:
        print(f"  {name:18s} {times[name] * 1e3:.3f} ms  / bare step {ratios[name]:.2f}")
    print(
        f"chain / bare = {ratios['full']:.2f} per step ({ratios_r['full']:.2f} in a rollout); "
        f"with noise_generator='threefry' = {ratios['full_threefry']:.2f} "
        f"({ratios_r['full_threefry']:.2f}); without per-step random draws = "
        f"{ratios['no_random']:.2f} ({ratios_r['no_random']:.2f})"
    )
    emit(
        {
            "chain_over_bare": ratios["full"],
            "chain_threefry_generator_over_bare": ratios["full_threefry"],
            "chain_without_random_draws_over_bare": ratios["no_random"],
            "chain_over_bare_rollout": ratios_r["full"],
            "chain_threefry_generator_over_bare_rollout": ratios_r["full_threefry"],
            "chain_without_random_draws_over_bare_rollout": ratios_r["no_random"],
            "draws_over_bare": ratios["standard_normal"],
            "draws_hash_over_bare": ratios["hash_normal"],
            "draws_jax_random_normal_over_bare": ratios["jax_random_normal"],
            "envs": E,
            "rollout_steps": T,
            "bare_taxel_steps_per_s": E * 121 / times["bare"],
            "full_taxel_steps_per_s": E * 121 / times["full"],
            "bare_rollout_taxel_steps_per_s": E * 121 * T / times_r["bare"],
            "bare_rollout_time_major_over_env_major": ratios_r["bare_time_major"],
        }
    )


if __name__ == "__main__":
    main()
