"""Frozen dataclasses registered as pytrees, whose constructor validates only user input.

``jax.tree_util.register_dataclass`` rebuilds nodes through ``__init__``, so any validation in
``__post_init__`` would also run on tracers, on gradient pytrees (a negative gradient of a radius
is legitimate) and on JAX's placeholder objects. :func:`pytree_dataclass` instead rebuilds nodes
with ``object.__new__``: ``__post_init__`` runs exactly when a user calls the constructor.

Fields with ``metadata=dict(static=True)`` (see :func:`static_field`) are static (part of the
tree structure: shapes, flags, counts); every other field is a leaf (arrays, floats).
"""

from __future__ import annotations

import dataclasses

import jax


def static_field(default=dataclasses.MISSING, **kw):
    """A dataclass field that is pytree metadata (hashable; changing it recompiles)."""
    md = dict(kw.pop("metadata", {}) or {})
    md["static"] = True
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=md, **kw)
    return dataclasses.field(default=default, metadata=md, **kw)


def pytree_dataclass(cls):
    """Decorator: frozen dataclass + pytree registration that bypasses ``__init__`` on unflatten."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    data_names = tuple(f.name for f in fields if not f.metadata.get("static", False))
    meta_names = tuple(f.name for f in fields if f.metadata.get("static", False))
    keys = tuple(jax.tree_util.GetAttrKey(n) for n in data_names)

    def flatten_with_keys(x):
        return (
            tuple(zip(keys, (getattr(x, n) for n in data_names), strict=False)),
            tuple(getattr(x, n) for n in meta_names),
        )

    def flatten(x):
        return tuple(getattr(x, n) for n in data_names), tuple(getattr(x, n) for n in meta_names)

    def unflatten(meta, data):
        obj = object.__new__(cls)
        for n, v in zip(data_names, data, strict=False):
            object.__setattr__(obj, n, v)
        for n, v in zip(meta_names, meta, strict=False):
            object.__setattr__(obj, n, v)
        return obj

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    if "replace" not in cls.__dict__:
        cls.replace = replace
    return cls


def replace(obj, **changes):
    """A copy of ``obj`` with ``changes``, skipping validation (for traced or gradient values).

    Use it to differentiate with respect to an option:
    ``jax.grad(lambda k: loss(sensor.replace(normal_stiffness=k)))(k0)``. Values are stored as
    given: arrays must already have the stored (flattened) shapes.
    """
    leaves_meta = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    leaves_meta.update(changes)
    new = object.__new__(type(obj))
    for k, v in leaves_meta.items():
        object.__setattr__(new, k, v)
    return new
