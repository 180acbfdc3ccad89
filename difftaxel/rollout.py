"""Time rollouts: ``lax.scan`` of a sensor's ``step`` over a sequence of inputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["rollout", "rollout_envs", "vmap_envs", "env_mesh", "shard_envs"]


def _materialise_steps() -> bool:
    """Whether rollouts run each step inside a conditional (see :func:`_scan_steps`): on the
    CPU backend only, where it pays; read at trace time."""
    return jax.default_backend() == "cpu"


def _time_length(inputs_seq, axis_name: str = "time") -> int:
    """The leading (time) axis length of every leaf of ``inputs_seq``; a ValueError naming the
    missing or inconsistent axis otherwise."""
    from .sensors import SensorInputs

    if isinstance(inputs_seq, SensorInputs) and jnp.ndim(inputs_seq.T_world_link) < 2:
        raise ValueError(
            f"inputs_seq: expected a leading {axis_name} axis on every leaf (T_world_link "
            f"[T, 7]), got T_world_link of shape {jnp.shape(inputs_seq.T_world_link)}; stack "
            "the per-step inputs with jax.tree.map(lambda *x: jnp.stack(x), *inputs)"
        )
    leaves = jax.tree_util.tree_leaves_with_path(inputs_seq)
    if not leaves:
        raise ValueError("inputs_seq: expected arrays with a leading time axis, got no leaves")
    sizes = {jnp.shape(x)[0] if jnp.ndim(x) else None for _, x in leaves}
    if None in sizes or len(sizes) != 1:
        bad = [(jax.tree_util.keystr(k), jnp.shape(x)) for k, x in leaves if jnp.ndim(x) == 0] or [
            (jax.tree_util.keystr(k), jnp.shape(x)) for k, x in leaves
        ]
        raise ValueError(
            f"inputs_seq: every leaf needs the same leading {axis_name} axis; got {bad[:4]}"
        )
    return sizes.pop()


def _scan_steps(step, state, inputs_seq, keys, checkpoint: bool):
    """``lax.scan`` of ``step(state, inputs, key)`` over the leading axis of ``inputs_seq``
    (and of ``keys``, or None): ``(final_state, readings [T, ...])``."""
    n = jax.tree_util.tree_leaves(inputs_seq)[0].shape[0]

    def skip(st, inp, k):  # never taken: the state unchanged, readings zero
        shapes = jax.eval_shape(step, st, inp, k)[1]
        return st, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    materialise = _materialise_steps()

    def body(st, xs):
        inp, k, t = xs
        if not materialise:
            return step(st, inp, k)
        # On the CPU the step runs inside a conditional whose predicate is always true but
        # data-dependent (the step index), so XLA materialises the readings before they are
        # written into the stacked outputs. A plain body let XLA's CPU backend fuse the whole
        # sensor kernel into the per-step dynamic-update-slice of every reading, once per
        # output and not vectorised.
        # Not on accelerators: there a conditional may read its predicate on the host.
        return jax.lax.cond(t >= 0, step, skip, st, inp, k)

    if checkpoint:
        body = jax.checkpoint(body)
    return jax.lax.scan(body, state, (inputs_seq, keys, jnp.arange(n)))


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
    n = _time_length(inputs_seq)
    keys = None if key is None else jax.random.split(key, n)
    return _scan_steps(sensor.step, state, inputs_seq, keys, checkpoint)


def rollout_envs(
    sensor,
    states,
    inputs_seq,
    keys=None,
    *,
    checkpoint: bool = False,
    grad_chunk: int | None = None,
    time_major: bool = False,
):
    """:func:`rollout` vmapped over environments.

    ``states`` carry a leading environment axis ``[E, ...]``, ``inputs_seq`` leading
    ``[E, T, ...]`` axes (``[T, E, ...]`` with ``time_major``); ``keys`` is ``[E]`` keys or
    None. The sensor (its options) is shared and differentiable. ``grad_chunk``: see
    :func:`vmap_envs` (reverse mode evaluated that many environments at a time; with
    ``time_major``, within each step). Returns ``(final_states [E, ...], readings [E, T,
    ...])``, or readings ``[T, E, ...]`` with ``time_major``.

    ``time_major=True`` (static) scans a vmapped step instead of vmapping a scan: the same
    values (each environment splits its key into the same per-step keys), without the final
    transpose of every reading from ``[T, E]`` to ``[E, T]`` (a full pass over the readings).
    """
    if time_major:
        T = jax.tree_util.tree_leaves(inputs_seq)[0].shape[0]
        step_keys = None
        if keys is None:
            vstep = vmap_envs(lambda sen, s, i: sen.step(s, i), (None, 0, 0), grad_chunk=grad_chunk)
        else:
            vstep = vmap_envs(
                lambda sen, s, i, k: sen.step(s, i, k), (None, 0, 0, 0), grad_chunk=grad_chunk
            )
            split = jax.vmap(lambda k: jax.random.split(k, T))(keys)  # [E, T], as rollout
            step_keys = jax.tree.map(lambda k: jnp.swapaxes(k, 0, 1), split)

        def step(carry, inp, k):
            # the sensor travels in the carry: a custom_vjp (grad_chunk) cannot be
            # differentiated with respect to a value the scan body closes over
            sen, st = carry
            st, r = vstep(sen, st, inp) if k is None else vstep(sen, st, inp, k)
            return (sen, st), r

        (_, final), readings = _scan_steps(
            step, (sensor, states), inputs_seq, step_keys, checkpoint
        )
        return final, readings
    if keys is None:

        def one(sen, s, i):
            return rollout(sen, s, i, None, checkpoint=checkpoint)

        return vmap_envs(one, (None, 0, 0), grad_chunk=grad_chunk)(sensor, states, inputs_seq)

    def one_k(sen, s, i, k):
        return rollout(sen, s, i, k, checkpoint=checkpoint)

    return vmap_envs(one_k, (None, 0, 0, 0), grad_chunk=grad_chunk)(
        sensor, states, inputs_seq, keys
    )


def vmap_envs(f, in_axes=0, *, grad_chunk: int | None = None):
    """``jax.vmap(f, in_axes)`` over a leading environment axis, with an optional chunked
    reverse pass.

    Args:
      f: function of positional pytree arguments (e.g. ``f(sensor, state, inputs, key)``
        returning ``(state, reading)``).
      in_axes: ``0`` (every argument batched on its leading axis) or a tuple with ``0`` or
        ``None`` (shared, e.g. the sensor) per positional argument. Only the leading axis.
      grad_chunk: None (default): exactly ``jax.vmap``. An int ``C >= 1``: the same values,
        but reverse-mode derivatives (``jax.grad``, ``jax.vjp``) are computed ``C``
        environments at a time in a ``lax.scan``, each chunk recomputing its forward pass.
        With ``E <= C`` (one chunk) this is plain ``jax.vmap``.

    Why: a vmapped sensor step's backward pass is a chain of elementwise passes over
    ``[E, N]`` arrays. Once those no longer fit in cache (11 x 11 taxels: a few thousand
    environments on a CPU), each pass runs at memory bandwidth; chunks that fit in cache
    run faster, recomputation included. The forward pass and
    the values are unchanged: the chunking only changes how the cotangents are computed.

    With ``grad_chunk``:
    * derivatives w.r.t. shared arguments are summed over chunks; w.r.t. batched
      arguments, concatenated;
    * only floating-point leaves are differentiated (integer, bool and key leaves pass
      through);
    * forward mode (``jax.jvp``, ``jax.jacfwd``) is not available, since the chunked pass
      is a ``jax.custom_vjp``. Use ``grad_chunk=None`` there;
    * every quantity to differentiate must be an argument. JAX raises an error for a
      differentiated value that ``f`` closes over.

    Returns:
      the vmapped function; outputs carry the leading ``[E]`` axis.
    """
    if grad_chunk is not None and (
        isinstance(grad_chunk, bool)
        or not isinstance(grad_chunk, (int, np.integer))
        or grad_chunk < 1
    ):
        raise ValueError(f"grad_chunk: expected None or an int >= 1, got {grad_chunk!r}")

    def wrapped(*args):
        axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        if len(axes) != len(args) or any(a not in (0, None) for a in axes):
            raise ValueError(
                f"in_axes: expected 0 or one of 0 / None per positional argument "
                f"({len(args)}), got {in_axes!r}"
            )
        vf = jax.vmap(f, in_axes=axes)
        if grad_chunk is None:
            return vf(*args)
        return _chunked_vjp_call(vf, args, axes, int(grad_chunk))

    return wrapped


def _chunked_vjp_call(vf, args, axes, chunk):
    """``vf(*args)`` whose VJP runs over ``chunk`` environments at a time (see vmap_envs)."""
    leaves, tdef = jax.tree_util.tree_flatten(args)
    leaf_ax = [ax for a, ax in zip(args, axes, strict=True) for _ in jax.tree_util.tree_leaves(a)]
    batched = [x for x, a in zip(leaves, leaf_ax, strict=True) if a == 0]
    if not batched:
        raise ValueError("in_axes: at least one argument must be batched (0)")
    E = int(np.shape(batched[0])[0])
    if E <= chunk:  # one chunk: plain reverse mode, without the recomputed forward
        return vf(*args)
    C = chunk
    diff = [
        hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact)
        for x in leaves  # floating leaves are differentiated, the rest pass through
    ]
    dvals = [x for x, d in zip(leaves, diff, strict=True) if d]
    dax = [a for a, d in zip(leaf_ax, diff, strict=True) if d]
    rest = [x for x, d in zip(leaves, diff, strict=True) if not d]
    rax = [a for a, d in zip(leaf_ax, diff, strict=True) if not d]

    def rebuild(dv, rs):
        it, jt = iter(dv), iter(rs)
        return tdef.unflatten([next(it) if d else next(jt) for d in diff])

    # the non-float leaves (ints, bools, keys) are arguments too, never closed over: inside a
    # differentiated scan (rollout_envs(time_major=True)) they are traced values of the body
    @jax.custom_vjp
    def g(dv, rest):
        return vf(*rebuild(dv, rest))

    def g_fwd(dv, rest):
        # which leaves are differentiated (static): the others get no cotangent work
        pert = tuple(bool(p.perturbed) for p in dv)
        dv = [p.value for p in dv]
        rest = [p.value for p in rest]
        return g(dv, rest), (dv, rest, pert)

    def g_bwd(res, ct):
        dv, rest, pert = res
        idx_s = [i for i, (a, p) in enumerate(zip(dax, pert, strict=True)) if a is None and p]
        idx_b = [i for i, (a, p) in enumerate(zip(dax, pert, strict=True)) if a == 0 and p]

        def chunk_vjp(lo, size, ct_c):
            def sl(x):
                return jax.lax.dynamic_slice_in_dim(x, lo, size)

            rs = [sl(x) if a == 0 else x for x, a in zip(rest, rax, strict=True)]
            base = [sl(x) if a == 0 else x for x, a in zip(dv, dax, strict=True)]

            def h(sh, bt):
                full = list(base)
                for i, v in zip(idx_s, sh, strict=True):
                    full[i] = v
                for i, v in zip(idx_b, bt, strict=True):
                    full[i] = v
                return vf(*rebuild(full, rs))

            _, vjp = jax.vjp(h, [dv[i] for i in idx_s], [base[i] for i in idx_b])
            return vjp(ct_c)

        def ct_slice(lo, size):
            def one(c):
                if isinstance(c, jax.custom_derivatives.SymbolicZero):  # an unused output
                    shp, dt = (size,) + tuple(c.aval.shape[1:]), c.aval.dtype
                    if dt == jax.dtypes.float0:
                        return np.zeros(shp, jax.dtypes.float0)
                    return jnp.zeros(shp, dt)
                if c.dtype == jax.dtypes.float0:
                    return np.zeros((size,) + c.shape[1:], jax.dtypes.float0)
                return jax.lax.dynamic_slice_in_dim(c, lo, size)

            return jax.tree_util.tree_map(one, ct)

        n = E // C

        def body(acc, i):
            lo = i * C
            ds, db = chunk_vjp(lo, C, ct_slice(lo, C))
            return [a + d for a, d in zip(acc, ds, strict=True)], db

        acc0 = [jnp.zeros_like(dv[i]) for i in idx_s]
        acc, dbs = jax.lax.scan(body, acc0, jnp.arange(n))
        dbs = [d.reshape((n * C,) + d.shape[2:]) for d in dbs]
        if E % C:  # the tail, one smaller chunk
            lo = n * C
            ds, db = chunk_vjp(lo, E - lo, ct_slice(lo, E - lo))
            acc = [a + d for a, d in zip(acc, ds, strict=True)]
            dbs = [jnp.concatenate([a, b]) for a, b in zip(dbs, db, strict=True)]
        out = [None] * len(dv)
        for i, v in zip(idx_s, acc, strict=True):
            out[i] = v
        for i, v in zip(idx_b, dbs, strict=True):
            out[i] = v
        return (out, [None] * len(rest))

    g.defvjp(g_fwd, g_bwd, symbolic_zeros=True)
    return g(dvals, rest)


def env_mesh(devices=None, axis_name: str = "env"):
    """A 1-D device mesh over ``devices`` (default: all devices) for the environment axis."""
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
