"""Host-side validation helpers: every error names the argument, what was expected, what came."""

from __future__ import annotations

import numpy as np


def _is_tracer(x) -> bool:
    import jax

    return isinstance(x, jax.core.Tracer)


def host_array(x, name: str, *, dtype=None) -> np.ndarray | None:
    """Concrete numpy view of ``x`` or ``None`` when ``x`` is traced (checks are then skipped)."""
    if _is_tracer(x):
        return None
    try:
        a = np.asarray(x)
    except Exception as e:  # pragma: no cover - defensive
        raise TypeError(f"{name}: expected an array-like, got {type(x).__name__}") from e
    if dtype is not None:
        a = a.astype(dtype)
    return a


def check_last_dim(x, n: int, name: str, min_ndim: int = 1) -> None:
    shape = np.shape(x)
    if len(shape) < min_ndim or shape[-1] != n:
        raise ValueError(f"{name}: expected shape (..., {n}), got {tuple(shape)}")


def check_shape(x, shape: tuple, name: str) -> None:
    s = tuple(np.shape(x))
    if len(s) != len(shape) or any(
        e is not None and e != g for e, g in zip(shape, s, strict=False)
    ):
        want = "(" + ", ".join("?" if e is None else str(e) for e in shape) + ")"
        raise ValueError(f"{name}: expected shape {want}, got {s}")


def check_finite(x, name: str) -> None:
    a = host_array(x, name)
    if a is not None and not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: expected finite values, got non-finite entries")


def check_positive(x, name: str, *, allow_zero: bool = False) -> None:
    a = host_array(x, name)
    if a is None:
        return
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: expected finite values, got {a}")
    bad = a < 0 if allow_zero else a <= 0
    if np.any(bad):
        rel = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected {rel}, got {a if a.size <= 8 else a[bad][:8]}")


def check_unit_quat(q, name: str, atol: float = 1e-6) -> None:
    a = host_array(q, name)
    if a is None:
        return
    check_last_dim(a, 4, name)
    n = np.linalg.norm(a, axis=-1)
    if not np.all(np.abs(n - 1.0) <= atol):
        worst = float(np.max(np.abs(n - 1.0)))
        raise ValueError(
            f"{name}: expected unit quaternions (x, y, z, w) within {atol}, "
            f"got a norm off by {worst:.3g}"
        )


def check_pose(T, name: str, atol: float = 1e-6) -> None:
    """A pose array ``(..., 7)``: position then a unit quaternion (x, y, z, w)."""
    check_last_dim(T, 7, name)
    a = host_array(T, name)
    if a is not None:
        check_finite(a, name)
        check_unit_quat(a[..., 3:], f"{name}[..., 3:] (quaternion x, y, z, w)", atol)


def check_odd(n: int, name: str) -> None:
    if not isinstance(n, (int, np.integer)) or n < 1 or n % 2 == 0:
        raise ValueError(f"{name}: expected a positive odd integer, got {n!r}")
