"""The environment axis over several processes (``jax.distributed``), one code path.

Each process loads **its own** environments; :func:`global_envs` assembles them into global
arrays sharded over every process's devices (``jax.make_array_from_process_local_data``), which
jitted code takes as arguments (:func:`difftaxel.calibrate.fit`'s ``data=``: never closed over,
as non-addressable arrays cannot be constants); :func:`gather` brings results back to every
process (``process_allgather``) for logging. On one process these are plain device puts.

Start each process with :func:`initialize` (a thin wrapper of ``jax.distributed.initialize``
that also selects CPU collectives, so a localhost test with two CPU processes works).
"""

from __future__ import annotations

import jax
import numpy as np

__all__ = ["initialize", "env_mesh", "global_envs", "gather"]


def initialize(coordinator_address: str, num_processes: int, process_id: int) -> None:
    """``jax.distributed.initialize`` for this process (CPU collectives via gloo)."""
    if not 0 <= int(process_id) < int(num_processes):
        raise ValueError(f"process_id: expected 0..{num_processes - 1}, got {process_id}")
    if "jax_cpu_collectives_implementation" in jax.config.values:  # absent in some versions
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=int(num_processes),
        process_id=int(process_id),
    )


def env_mesh(axis_name: str = "env"):
    """A 1-D mesh over every device of every process."""
    from jax.sharding import Mesh

    return Mesh(np.asarray(jax.devices()), (axis_name,))


def global_envs(local_tree, mesh=None, axis_name: str = "env"):
    """Global arrays whose leading (environment) axis is the concatenation, in process order,
    of each process's ``local_tree`` leaves (each process passes the same structure and the
    same number of environments, a multiple of its local device count)."""
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = env_mesh(axis_name) if mesh is None else mesh
    sharding = NamedSharding(mesh, PartitionSpec(axis_name))

    def put(x):
        x = np.asarray(x)
        if x.ndim == 0:
            raise ValueError("local_tree: every leaf needs a leading environment axis")
        return jax.make_array_from_process_local_data(sharding, x)

    return jax.tree_util.tree_map(put, local_tree)


def gather(tree):
    """Every leaf as a full host array on every process (``process_allgather``)."""
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)
