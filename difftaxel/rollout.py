"""Time rollouts: ``lax.scan`` of a sensor's ``step`` over a sequence of inputs."""

from __future__ import annotations

import jax

__all__ = ["rollout"]


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
