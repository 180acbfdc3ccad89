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


def emit(figures: dict) -> None:
    """Print the machine then, on the last line, one JSON object of the figures."""
    print("# machine:", json.dumps(machine()))
    print(json.dumps(figures))
