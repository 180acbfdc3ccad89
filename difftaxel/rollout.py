"""Time rollouts: ``lax.scan`` of a sensor's ``step`` over a sequence of inputs."""

from __future__ import annotations

import jax

__all__ = ["rollout", "rollout_envs", "env_mesh", "shard_envs"]


def rollout(sensor, state, inputs_seq, key=None, *, checkpoint: bool = False):
    """Run ``sensor.step`` over time with ``lax.scan`` (one environment).

    Args:
      sensor: any sensor following the contract (``step(state, inputs, key)``).
      state: initial state (``sensor.init_state(key)``).
      inputs_seq: :class:`~difftaxel.sensors.SensorInputs` whose leaves carry a leading time
        axis ``[T, ...]`` (e.g. ``jax.tree.map(lambda *x: jnp.stack(x), *inputs_list)``).
      key: PRNG key split into one key per step, or None (no randomness drawn).
      checkpoint: wrap the step in ``jax.checkpoint`` (rematerialise in the backward pass;
        memory O(1) in the horizon for activations, for long horizons).

    Returns:
      ``(final_state, readings)`` where every leaf of ``readings`` has a leading ``[T]`` axis.
      Vmap this function over environments (``in_axes`` on ``state``, ``inputs_seq``, ``key``).
    """
    n = jax.tree_util.tree_leaves(inputs_seq)[0].shape[0]
    keys = None if key is None else jax.random.split(key, n)

    def body(st, xs):
        inp, k = xs
        return sensor.step(st, inp, k)

    if checkpoint:
        body = jax.checkpoint(body)
    return jax.lax.scan(body, state, (inputs_seq, keys))


def rollout_envs(sensor, states, inputs_seq, keys=None, *, checkpoint: bool = False):
    """:func:`rollout` vmapped over environments.

    ``states`` and ``inputs_seq`` carry a leading environment axis ``[E, ...]`` (inputs:
    ``[E, T, ...]``); ``keys`` is ``[E]`` keys or None. The sensor (its options) is shared.
    Returns ``(final_states [E, ...], readings [E, T, ...])``.
    """
    if keys is None:
        return jax.vmap(lambda s, i: rollout(sensor, s, i, None, checkpoint=checkpoint))(
            states, inputs_seq
        )
    return jax.vmap(lambda s, i, k: rollout(sensor, s, i, k, checkpoint=checkpoint))(
        states, inputs_seq, keys
    )


def env_mesh(devices=None, axis_name: str = "env"):
    """A 1-D device mesh over ``devices`` (default: all devices) for the environment axis."""
    import numpy as np
    from jax.sharding import Mesh

    devs = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devs), (axis_name,))


def shard_envs(tree, mesh=None, axis_name: str = "env"):
    """Place every array leaf of ``tree`` with its leading (environment) axis split over
    ``mesh`` (a 1-D mesh, default :func:`env_mesh`); scalars are replicated.

    The environment count must be a multiple of the device count. Jitted functions of the
    result run sharded (XLA partitions the vmapped computation); the code path is the same on
    1 device and on many.
    """
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = env_mesh(axis_name=axis_name) if mesh is None else mesh
    n = mesh.devices.size

    def put(x):
        if not hasattr(x, "ndim"):
            return x
        if x.ndim == 0:
            return jax.device_put(x, NamedSharding(mesh, PartitionSpec()))
        if x.shape[0] % n:
            raise ValueError(
                f"tree: leading (environment) axis {x.shape[0]} is not a multiple of the "
                f"{n} devices of the mesh"
            )
        return jax.device_put(x, NamedSharding(mesh, PartitionSpec(axis_name)))

    return jax.tree_util.tree_map(put, tree)
