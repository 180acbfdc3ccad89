"""Test harness helpers shared by difftaxel's tests (and usable by downstream projects).

* :func:`assert_jit_matches_eager` - ``jax.jit(f)(*args) == f(*args)``;
* :func:`assert_vmap_matches_loop` - ``jax.vmap(f)`` over a batch equals a Python loop;
* :func:`check_grad_fd` - reverse-mode gradient of a scalar function against float64 central
  finite differences along random directions (and every coordinate for small inputs);
* :func:`assert_no_recompile` - a jitted function does not retrace or recompile after its first call;
* :data:`TOLERANCES` - the tolerance table per dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

# the events JAX records when it traces a function for jit and when XLA compiles one
_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

__all__ = [
    "TOLERANCES",
    "tolerance",
    "assert_trees_close",
    "assert_jit_matches_eager",
    "assert_vmap_matches_loop",
    "check_grad_fd",
    "assert_no_recompile",
    "assert_finite_tree",
    "program_size",
]

#: (rtol, atol) by dtype name for comparisons of a computation with itself reordered.
TOLERANCES = {
    "float64": (1e-10, 1e-12),
    "float32": (2e-5, 1e-6),
    "float16": (2e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}


def tolerance(dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for ``dtype`` from :data:`TOLERANCES`."""
    return TOLERANCES[jnp.dtype(dtype).name]


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def assert_trees_close(a, b, rtol=None, atol=None, err_msg=""):
    """Every leaf of ``a`` equals the matching leaf of ``b`` within tolerances (same structure)."""
    sa, sb = jax.tree_util.tree_structure(a), jax.tree_util.tree_structure(b)
    assert sa == sb, f"tree structures differ: {sa} vs {sb} {err_msg}"
    for x, y in zip(_leaves(a), _leaves(b), strict=False):
        assert x.shape == y.shape, f"shapes differ: {x.shape} vs {y.shape} {err_msg}"
        if x.dtype == bool or np.issubdtype(x.dtype, np.integer):
            np.testing.assert_array_equal(x, y, err_msg=err_msg)
            continue
        r, t = tolerance(x.dtype) if x.dtype.name in TOLERANCES else (1e-6, 1e-8)
        np.testing.assert_allclose(
            x,
            y,
            rtol=r if rtol is None else rtol,
            atol=t if atol is None else atol,
            err_msg=err_msg,
        )


def assert_finite_tree(tree, err_msg=""):
    """No NaN or inf in any float leaf."""
    for x in _leaves(tree):
        if np.issubdtype(x.dtype, np.floating):
            assert np.all(np.isfinite(x)), f"non-finite values {err_msg}"


def assert_jit_matches_eager(f, *args, rtol=None, atol=None):
    """``jax.jit(f)(*args)`` equals ``f(*args)``; returns the jitted result."""
    eager = f(*args)
    jitted = jax.jit(f)(*args)
    assert_trees_close(jitted, eager, rtol, atol, "jit vs eager")
    return jitted


def assert_vmap_matches_loop(f, batched_args, in_axes=0, rtol=None, atol=None, jit=True):
    """``jax.vmap(f, in_axes)(*batched_args)`` equals stacking ``f`` over the batch axis.

    ``jit``: both sides jitted (``f`` compiled once for every element), which for a function
    of many small operations costs far less than running them one by one; ``False`` runs
    both eagerly (an ``f`` that cannot be traced)."""
    if jit:
        f = jax.jit(f)
    out = jax.vmap(f, in_axes=in_axes)(*batched_args)
    axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(batched_args)
    sizes = [
        jax.tree_util.tree_leaves(a)[0].shape[ax]
        for a, ax in zip(batched_args, axes, strict=False)
        if ax is not None
    ]
    n = sizes[0]
    results = []
    for i in range(n):
        args_i = [
            a if ax is None else jax.tree_util.tree_map(lambda x, i=i, ax=ax: jnp.take(x, i, ax), a)
            for a, ax in zip(batched_args, axes, strict=False)
        ]
        results.append(f(*args_i))
    looped = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *results)
    assert_trees_close(out, looped, rtol, atol, "vmap vs loop")
    return out


def check_grad_fd(
    f,
    x,
    *,
    step: float = 1e-6,
    rtol: float = 1e-4,
    atol: float = 1e-9,
    n_directions: int = 3,
    seed: int = 0,
    coordinates: bool | None = None,
    jit: bool = False,
):
    """Compare ``jax.grad(f)(x)`` with float64 central finite differences.

    ``f`` maps a pytree of float64 arrays to a scalar. Directional derivatives
    ``(f(x + h d) - f(x - h d)) / 2h`` are compared with ``<grad, d>`` along ``n_directions``
    random unit directions and, for inputs with at most 24 scalars (or ``coordinates=True``),
    along every coordinate. Also checks the gradient is finite. Requires x64 enabled.
    ``jit=True`` evaluates ``f`` for the differences through one ``jax.jit`` (``f`` must be
    jittable): one compilation instead of op-by-op dispatch, faster when ``f`` is a whole
    sensor step evaluated many times.

    Returns the gradient.
    """
    if not jax.config.jax_enable_x64:
        raise RuntimeError("check_grad_fd needs jax_enable_x64 (float64 finite differences)")
    x = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), x)
    g = jax.grad(f)(x)
    assert_finite_tree(g, "in the gradient")
    flat_x, unravel = ravel_pytree(x)
    flat_g, _ = ravel_pytree(g)
    n = flat_x.size
    rng = np.random.default_rng(seed)
    dirs = [d / np.linalg.norm(d) for d in rng.standard_normal((n_directions, n))]
    if coordinates or (coordinates is None and n <= 24):
        dirs += list(np.eye(n))
    fv = jax.jit(lambda v: f(unravel(v))) if jit else (lambda v: f(unravel(v)))
    fx = lambda v: float(fv(v))  # noqa: E731
    for d in dirs:
        d = jnp.asarray(d)
        fd = (fx(flat_x + step * d) - fx(flat_x - step * d)) / (2 * step)
        ad = float(jnp.dot(flat_g, d))
        assert abs(fd - ad) <= atol + rtol * max(abs(fd), abs(ad)), (
            f"gradient mismatch along a direction: autodiff {ad:.10g} vs finite differences "
            f"{fd:.10g}"
        )
    return g


def assert_no_recompile(jitted, *calls):
    """Call ``jitted`` with each argument tuple in ``calls``: after the first, none may retrace.

    ``jitted`` is any jitted callable; ``calls`` are at least two argument tuples. The first
    call may trace and compile; every later one must reuse it: JAX records no trace and no
    backend compilation while they run (``jax.monitoring`` events, so this counts what JAX
    does, not the size of a cache that is shared between functions and may drop entries).
    """
    if len(calls) < 2:
        raise ValueError(f"calls: expected at least two argument tuples, got {len(calls)}")
    jax.block_until_ready(jitted(*calls[0]))
    events = []

    def listen(event, duration, **kwargs):
        if event in (_TRACE_EVENT, _COMPILE_EVENT):
            events.append((event, kwargs.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        for args in calls[1:]:
            jax.block_until_ready(jitted(*args))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert not events, f"expected no recompilation after the first call, got {events}"


def program_size(sensor, inputs) -> tuple[int, int]:
    """``(step, gradient)``: the numbers of top-level operations in the jaxprs of
    ``sensor.step`` on ``inputs`` (a :class:`~difftaxel.sensors.SensorInputs`, the sensor's
    initial state) and of the gradient of its summed squared measured force with respect to
    the body poses ``[B, 7]``. Two scenes of one structure and different sizes with the same
    numbers compile the same program: nothing is unrolled per shape or per body."""

    def loss(P, inp):
        i2 = inp.replace(bodies=inp.bodies.with_state(P))
        return jnp.sum(sensor.step(sensor.init_state(), i2)[1].measured.force ** 2)

    step = jax.make_jaxpr(lambda i: sensor.step(sensor.init_state(), i))(inputs)
    grad = jax.make_jaxpr(jax.grad(loss))(inputs.bodies.poses, inputs)
    return len(step.jaxpr.eqns), len(grad.jaxpr.eqns)
