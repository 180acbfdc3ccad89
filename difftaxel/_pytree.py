"""Frozen dataclasses registered as pytrees, and validated option classes whose ``replace``
cannot leave an option without effect.

``jax.tree_util`` rebuilds nodes when it maps, flattens or transposes a tree, so validation in
``__post_init__`` would also run on tracers, on gradient pytrees (a negative gradient of a
radius is legitimate) and on JAX's placeholder objects. :func:`pytree_dataclass` therefore
rebuilds nodes with ``object.__new__``: ``__post_init__`` runs exactly when a user calls the
constructor.

Fields:

* :func:`static_field`: pytree metadata (shapes, flags, counts, code paths). Changing one
  recompiles.
* :func:`derived_field`: static data the constructor computes from the options (which stages
  run, resolved layouts). Never a constructor argument, never set by :meth:`Options.replace`.
* every other field is a leaf (arrays, floats, nested pytrees): traced and differentiable.

:class:`Options` is the base of every validated option class (the sensors and
:class:`~difftaxel.Imperfections`). Its :meth:`Options.replace` gives exactly what the
constructor gives, or raises an error naming the option; see there.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import numpy as np

__all__ = ["Options", "derived_field", "pytree_dataclass", "replace", "static_field"]


def static_field(default=dataclasses.MISSING, **kw):
    """A dataclass field that is pytree metadata (hashable; changing it recompiles)."""
    md = dict(kw.pop("metadata", {}) or {})
    md["static"] = True
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=md, **kw)
    return dataclasses.field(default=default, metadata=md, **kw)


def derived_field(default=None):
    """Static data computed by the constructor (not an argument; ``replace`` refuses it)."""
    return dataclasses.field(
        default=default, init=False, repr=False, metadata=dict(static=True, derived=True)
    )


def _is_static(f) -> bool:
    return f.metadata.get("static", False)


def _is_derived(f) -> bool:
    return f.metadata.get("derived", False)


def pytree_dataclass(cls=None, *, kw_only: bool = False):
    """Decorator: frozen dataclass + pytree registration that bypasses ``__init__`` on unflatten.

    ``kw_only=True`` makes every constructor argument keyword-only (option classes).
    """
    if cls is None:
        return lambda c: pytree_dataclass(c, kw_only=kw_only)
    cls = dataclasses.dataclass(frozen=True, kw_only=kw_only)(cls)
    fields = dataclasses.fields(cls)
    data_names = tuple(f.name for f in fields if not _is_static(f))
    meta_names = tuple(f.name for f in fields if _is_static(f))
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
    if "replace" not in cls.__dict__ and not issubclass(cls, Options):
        cls.replace = replace
    return cls


def replace(obj, **changes):
    """A copy of a plain pytree dataclass (states, inputs) with ``changes``, stored as given.

    For option classes (sensors, :class:`~difftaxel.Imperfections`) this dispatches to
    :meth:`Options.replace`, which validates.
    """
    if isinstance(obj, Options):
        return obj.replace(**changes)
    names = {f.name for f in dataclasses.fields(obj)}
    for k in changes:
        if k not in names:
            raise TypeError(f"{type(obj).__name__}.replace: no field named {k!r}")
    new = object.__new__(type(obj))
    for f in dataclasses.fields(obj):
        object.__setattr__(new, f.name, changes.get(f.name, getattr(obj, f.name)))
    return new


def has_tracer(x) -> bool:
    """Whether any leaf of the pytree ``x`` is a JAX tracer (a value unknown on the host)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


class Options:
    """Base of validated option pytrees: a constructor that checks every option on the host,
    static data derived once from the options, and a ``replace`` that cannot make an option lie.

    A subclass implements:

    * ``_check_field(name, value)``: host check and normalisation of one concrete option
      (shapes may be read from the other fields, values only from concrete ones); raises a
      ``ValueError``/``TypeError`` naming ``<Class>.<name>``.
    * ``_derive()``: cross-option checks and the derived fields (called once every option is
      checked; every option is concrete then).

    and may declare ``_STAGE_OF`` (option -> the stage it drives) and ``_REDERIVES`` (static
    options the derived fields depend on).
    """

    _STAGE_OF: ClassVar[dict] = {}
    _REDERIVES: ClassVar[frozenset] = frozenset()

    def __post_init__(self):
        name = type(self).__name__
        for f in dataclasses.fields(self):
            if f.init and has_tracer(getattr(self, f.name)):
                raise TypeError(
                    f"{name}.{f.name}: options are validated on the host and cannot be traced "
                    f"at construction; build the {name} outside jit and use "
                    f"replace({f.name}=value) to trace or differentiate an option"
                )
        # host checks on concrete values, also when the options are built inside a trace
        with jax.ensure_compile_time_eval():
            for f in dataclasses.fields(self):
                if f.init:
                    v = self._check_field(f.name, getattr(self, f.name))
                    object.__setattr__(self, f.name, v)
            for k, v in self._derive().items():
                object.__setattr__(self, k, v)

    def _check_field(self, name: str, value):
        return value

    def _derive(self) -> dict:
        return {}

    def _accepts_shape(self, name: str, shape: tuple) -> bool:
        """Whether a traced option may take ``shape`` in place of its stored one (e.g. a
        per-probe option given as a scalar, ``[N]`` or ``[*layout]``)."""
        return False

    def stage_on(self, stage: str) -> bool:
        """Static: whether ``stage`` runs (resolved at construction; see ``stages``)."""
        return stage in self.active_stages

    def options(self) -> dict:
        """The constructor arguments that rebuild this object (``type(x)(**x.options())``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    def replace(self, **changes):
        """A copy with ``changes``: exactly what constructing with them gives, or an error.

        * Every value concrete (the usual case, outside jit): the object is rebuilt through its
          constructor, so every check runs and every derived static (which stages run,
          layouts, switches left to their default ``None``) is derived again from the new
          values.
        * Some value traced (inside ``jit``, ``grad``, ``vmap``): the options are set as given,
          after these checks: a traced option must keep its stored shape (a scalar broadcasts
          up; per-probe options take any of their documented shapes) or, for a nested pytree, its static structure; an option whose stage is off
          raises (a stage's static switch cannot change under a trace: enable it at
          construction, e.g. ``stages=(...)`` or a non-zero value, and then trace its
          value); a static option that derived data depends on raises (set it before tracing);
          a concrete value goes through the constructor's check of that option.
        """
        cls = type(self)
        name = cls.__name__
        fields = {f.name: f for f in dataclasses.fields(self)}
        for k in changes:
            f = fields.get(k)
            if f is None:
                raise TypeError(f"{name}.replace: no option named {k!r}")
            if not f.init:
                raise TypeError(
                    f"{name}.{k}: derived by the constructor from the other options; change "
                    "those instead"
                )
        if not has_tracer(changes) and not has_tracer(self):
            return cls(**{**self.options(), **changes})
        new = object.__new__(cls)
        for f in dataclasses.fields(self):
            object.__setattr__(new, f.name, getattr(self, f.name))
        for k, v in changes.items():
            object.__setattr__(new, k, self._traced_value(k, fields[k], v))
        return new

    def _traced_value(self, k: str, f, v):
        name = type(self).__name__
        stage = self._STAGE_OF.get(k)
        if stage is not None and not self.stage_on(stage):
            raise ValueError(
                f"{name}.{k}: its stage {stage!r} was off at construction and a traced "
                f"replace cannot turn it on; construct the {name} with {k} non-zero or with "
                f"{stage!r} in stages=(...), then trace its value"
            )
        if _is_static(f):
            if k in self._REDERIVES:
                raise ValueError(
                    f"{name}.{k}: derived static data depends on it, and this {name} holds "
                    f"traced options; set {k} on a concrete {name} (outside jit) before tracing"
                )
            with jax.ensure_compile_time_eval():
                return self._check_field(k, v)
        old = getattr(self, k)
        if not has_tracer(v):
            with jax.ensure_compile_time_eval():
                v = self._check_field(k, v)
        old_leaves, old_def = jax.tree_util.tree_flatten(old)
        new_leaves, new_def = jax.tree_util.tree_flatten(v)
        if old_def != new_def:
            raise ValueError(
                f"{name}.{k}: a traced replace must keep the option's static structure "
                f"({old_def}), got {new_def}; construct with it outside jit instead"
            )
        if len(old_leaves) == 1 and old_def.num_nodes == 1:  # a single array leaf
            want, got = np.shape(old), np.shape(v)
            if want != got and not self._accepts_shape(k, got):
                try:
                    v = jax.numpy.broadcast_to(v, want)
                except ValueError:
                    raise ValueError(
                        f"{name}.{k}: a traced value must have the stored shape {want} (or "
                        f"broadcast to it), got {got}; change its shape with a concrete value"
                    ) from None
            return v
        for i, (a, b) in enumerate(zip(old_leaves, new_leaves, strict=True)):
            if np.shape(a) != np.shape(b):
                raise ValueError(
                    f"{name}.{k}: a traced replace must keep the shape of every leaf; leaf "
                    f"{i} has shape {np.shape(b)}, stored {np.shape(a)}"
                )
        return v
