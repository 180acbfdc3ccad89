"""Every public name (each module's ``__all__``) is documented."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import difftaxel


def test_every_public_function_and_class_has_a_docstring():
    missing, seen = [], 0
    for info in pkgutil.walk_packages(difftaxel.__path__, "difftaxel."):
        try:
            mod = importlib.import_module(info.name)
        except ImportError:  # an optional extra (difftaxel.mjx without MuJoCo)
            continue
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                seen += 1
                if len((obj.__doc__ or "").strip()) < 20:
                    missing.append(f"{info.name}.{name}")
    assert seen > 100 and not missing, missing
