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
