"""The environment axis over two jax.distributed processes (localhost, CPU): the same loss,
gradient and fit as one process."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import difftaxel as dt
from difftaxel.sensors import KinematicTaxel, make_inputs

ROOT = pathlib.Path(__file__).resolve().parents[1]


def distributed_problem(E: int = 8):
    """Sphere heights ``z [E]``, target summed forces ``[E]`` (stiffness 2000) and
    ``loss(k, data)`` over the environments in ``data``."""
    grid = dt.generate_grid_points_on_plane((-4e-3, -4e-3, 0), (4e-3, 4e-3, 0), (0, 0, 1), 3, 3)
    sensor = KinematicTaxel(probe_local_pos=grid, probe_radius=1e-3)
    bodies = dt.Bodies((dt.Sphere(radius=0.01),), np.array([[0, 0, 0.0105, 0, 0, 0, 1.0]]))
    inp = make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), bodies)

    def summed(k, z):
        b = bodies.with_state(bodies.poses.at[0, 2].set(z))
        s = sensor.replace(normal_stiffness=k)
        return jnp.sum(s.step(s.init_state(), inp.replace(bodies=b))[1].ground_truth.force[..., 2])

    def loss(k, data):
        f = jax.vmap(lambda z: summed(k, z))(data["z"])
        return jnp.mean((f - data["target"]) ** 2)

    z = np.linspace(0.0095, 0.0104, E)
    target = np.asarray(jax.vmap(lambda zz: summed(2000.0, zz))(jnp.asarray(z)))
    return z, target, loss


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # 10-35 s; CI runs it with the slow cases
def test_distributed_two_processes_match_one(tmp_path):
    out = tmp_path / "two.json"
    port = str(_free_port())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XLA_FLAGS": ""}
    cmd = [sys.executable, str(ROOT / "tests" / "_distributed_check.py"), port, "2"]
    procs = [
        subprocess.Popen(
            [*cmd, str(i), str(out)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=240) for p in procs]
    for p, (_, e) in zip(procs, logs):
        if p.returncode != 0 and "gloo" in e.lower() and "not" in e.lower():
            pytest.skip(f"this jaxlib has no CPU collectives: {e.splitlines()[-1]}")
        assert p.returncode == 0, e[-2000:]
    two = json.loads(out.read_text())
    one_out = tmp_path / "one.json"
    r = subprocess.run(
        [*cmd[:-1], "1", "0", str(one_out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    one = json.loads(one_out.read_text())
    for k in ("value", "grad", "k"):
        assert two[k] == pytest.approx(one[k], rel=1e-10), (k, two, one)
    assert one["grad"] != 0.0
