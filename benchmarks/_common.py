"""Shared benchmark helpers: compile time apart from run time, medians, machine facts."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time

import jax


def machine() -> dict:
    return {
        "date": time.strftime("%Y-%m-%d"),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
    }


def time_jitted(fn, *args, repeats: int = 7, min_time: float = 0.2):
    """``(compile_s, median_s)`` of a jitted ``fn(*args)``; each sample runs >= ``min_time``."""
    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(*args))  # warm up
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    one = max(time.perf_counter() - t0, 1e-6)
    inner = max(1, int(min_time / one))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            out = compiled(*args)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - t0) / inner)
    return compile_s, statistics.median(samples)


def time_interleaved(cases: dict, rounds: int = 9, min_time: float = 0.2):
    """Compile every ``name -> (fn, args)`` of ``cases``, then time them round-robin:
    each round runs every case once (>= ``min_time`` each), so the machine's drift (shared,
    noisy CPUs) hits all of them alike. Returns ``(compile_s, median_s, ratio_median)``
    dicts; ``ratio_median[name]`` is the median over rounds of ``t[name] / t[first]``. A
    ``fn`` that is already a ``jax.stages.Compiled`` is used as is (compile time 0)."""
    compiled, compile_s, inner = {}, {}, {}
    for name, (fn, args) in cases.items():
        t0 = time.perf_counter()
        c = fn if isinstance(fn, jax.stages.Compiled) else jax.jit(fn).lower(*args).compile()
        compile_s[name] = time.perf_counter() - t0
        jax.block_until_ready(c(*args))
        t0 = time.perf_counter()
        jax.block_until_ready(c(*args))
        inner[name] = max(1, int(min_time / max(time.perf_counter() - t0, 1e-6)))
        compiled[name] = (c, args)
    samples = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (c, args) in compiled.items():
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                out = c(*args)
            jax.block_until_ready(out)
            samples[name].append((time.perf_counter() - t0) / inner[name])
    first = next(iter(cases))
    med = {k: statistics.median(v) for k, v in samples.items()}
    ratio = {
        k: statistics.median(a / b for a, b in zip(v, samples[first], strict=True))
        for k, v in samples.items()
    }
    return compile_s, med, ratio


def emit(figures: dict) -> None:
    """Print the machine then, on the last line, one JSON object of the figures."""
    print("# machine:", json.dumps(machine()))
    print(json.dumps(figures))


def kinematic_scene(**extra):
    """The benchmarks' KinematicTaxel scene: an 11 x 11 grid (3 mm pitch) on a pad whose link
    sits at z = 5 mm, a 1 cm sphere 1 mm deep sliding at 8 cm/s and spinning at 1 rad/s.

    Returns ``(sensor, bodies, inputs)``; ``extra`` goes to the KinematicTaxel constructor.
    """
    import numpy as np

    import difftaxel as dt
    from difftaxel.sensors import KinematicTaxel, make_inputs

    grid = dt.generate_grid_points_on_plane(
        (-0.015, -0.015, 0.005), (0.015, 0.015, 0.005), (0, 0, 1), 11, 11
    )
    kw = dict(
        probe_local_pos=grid,
        probe_radius=0.002,
        normal_stiffness=2000.0,
        normal_damping=50.0,
        normal_exponent=1.5,
        shear_scalar=3.0,
        twist_scalar=0.5,
    )
    kw.update(extra)
    bodies = dt.Bodies(
        (dt.Sphere(radius=0.01),),
        np.array([[0, 0, 0.019, 0, 0, 0, 1.0]]),
        np.array([[0.08, 0, 0, 0, 0, 1.0]]),
    )
    inputs = make_inputs(np.array([0, 0, 0.005, 0, 0, 0, 1.0]), bodies, dt=0.005)
    return KinematicTaxel(**kw), bodies, inputs


def kinematic_forward_and_loss(inputs, state, vmap=jax.vmap):
    """``(forward, loss)`` for the KinematicTaxel benchmarks: ``forward(sensor, poses)`` is one
    vmapped step (measured readings) of the scene ``inputs`` with the object at each of
    ``poses [E, 7]``; ``loss(sensor, poses)`` sums every force and torque component.
    ``vmap`` maps a per-environment function over the poses (``jax.vmap`` or
    ``difftaxel.vmap_envs(..., grad_chunk=...)``)."""
    import jax.numpy as jnp

    def forward(sensor, poses):
        def one(pose):
            b = inputs.bodies.with_state(pose[None])
            return sensor.step(state, inputs.replace(bodies=b))[1].measured

        return vmap(one)(poses)

    def loss(sensor, poses):
        r = forward(sensor, poses)
        return jnp.sum(r.force) + jnp.sum(r.torque)

    return forward, loss
