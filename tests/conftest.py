"""Test configuration: float64 on, implicit rank promotion is an error, shared-data paths."""

from __future__ import annotations

import os
import pathlib

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("DIFFTAXEL_SHARED", ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared_dir():
    if not SHARED.is_dir():
        pytest.skip(f"shared data not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def parity_kit(shared_dir):
    import json

    import numpy as np

    base = shared_dir / "reference" / "genesis-1.4.5"
    if not (base / "parity_kit.npz").exists():
        pytest.skip("parity kit absent")
    meta = json.loads((base / "parity_kit.json").read_text())
    data = dict(np.load(base / "parity_kit.npz"))
    return meta, data


def run_with_cpu_devices(script: str, n: int):
    """Run ``tests/<script>`` in a subprocess with ``n`` simulated CPU devices (the XLA flag
    must precede JAX's import, hence the subprocess); returns the CompletedProcess."""
    import subprocess
    import sys

    env = dict(
        os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}", JAX_PLATFORMS="cpu"
    )
    code = pathlib.Path(__file__).with_name(script)
    return subprocess.run(
        [sys.executable, str(code)], capture_output=True, text=True, env=env, timeout=600
    )
