"""Gaussian draws for the imperfection chain: exact in distribution, cheap on every backend.

Two generators, both seeded only by the key they are given (no hidden state):

* :func:`standard_normal`: ``jax.random`` bits (threefry) through the Box-Muller transform;
* :func:`hash_normal`: a counter-based integer hash seeded by two words of the key, through the
  same transform (several times cheaper, for large rollouts).

Neither reproduces the ``jax.random.normal`` stream.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

__all__ = ["hash_normal", "standard_normal"]


def standard_normal(key, shape: tuple, dtype) -> Array:
    """Standard normal draws from ``jax.random`` bits (threefry) by the Box-Muller transform.

    Each pair of normals takes two uniforms (four 32-bit words in float64): see
    :func:`_box_muller`. Exactly Gaussian up to the uniforms' resolution and floating point.
    Cheaper than ``jax.random.normal``, whose inverse error function costs more than the
    bits. Not the ``jax.random.normal`` stream.
    """
    n = int(np.prod(shape))
    return jnp.concatenate(_threefry_halves(key, (n + 1) // 2, dtype))[:n].reshape(shape)


def _threefry_halves(key, h: int, dtype) -> tuple[Array, Array]:
    dtype = jnp.dtype(dtype)
    w = 4 if dtype.itemsize >= 8 else 2
    b = _bits32(key, (w, h))
    return _box_muller(b[0], b[1], *((b[2], b[3]) if w == 4 else (None, None)), dtype=dtype)


def _rotl(x: Array, r: int) -> Array:
    return (x << jnp.uint32(r)) | (x >> jnp.uint32(32 - r))


def _threefry2x32(k1: Array, k2: Array, x1: Array, x2: Array) -> tuple[Array, Array]:
    """Threefry-2x32 (20 rounds, Random123), the hash of ``jax.random``, unrolled."""
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    ks = (k1, k2, k1 ^ k2 ^ jnp.uint32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in rot[i % 2]:
            x1 = x1 + x2
            x2 = _rotl(x2, r) ^ x1
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x1, x2


def _unrolled_threefry_ok(key) -> bool:
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    impl = str(jax.random.key_impl(key)) if typed else "threefry2x32"
    return "threefry" in impl and bool(jax.config.jax_threefry_partitionable) and not key.ndim


def _threefry_counts(key, shape: tuple) -> tuple[Array, Array]:
    """The two threefry words of counters ``0 .. prod(shape) - 1`` under ``key`` (what
    ``jax.random`` hashes for ``split`` and ``bits`` with partitionable threefry)."""
    d = jax.random.key_data(key).astype(jnp.uint32)
    lo = jnp.arange(int(np.prod(shape)), dtype=jnp.uint32).reshape(shape)
    return _threefry2x32(d[0], d[1], jnp.zeros(shape, jnp.uint32), lo)


def _bits32(key, shape: tuple) -> Array:
    """``jax.random.bits(key, shape, uint32)``, bit for bit, with the threefry hash unrolled
    (one fusion with its consumer instead of a rolled loop over materialised words); other
    key implementations call ``jax.random.bits``."""
    if not _unrolled_threefry_ok(key) or int(np.prod(shape)) >= 2**32:
        return jax.random.bits(key, shape, jnp.uint32)
    b1, b2 = _threefry_counts(key, shape)
    return b1 ^ b2


def split_key(key, num: int) -> tuple:
    """``tuple(jax.random.split(key, num))``, bit for bit, for threefry keys (typed or raw).

    Why: on CPU ``jax.random`` runs threefry as a rolled loop of five launches, which costs a
    small sensor step more than its arithmetic; this is the same hash unrolled into one fusion.
    Other key implementations, or ``jax_threefry_partitionable`` off, use
    ``jax.random.split``.
    """
    if not _unrolled_threefry_ok(key):
        return tuple(jax.random.split(key, num))
    out = jnp.stack(_threefry_counts(key, (num,)), axis=-1)
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        out = jax.random.wrap_key_data(out, impl=jax.random.key_impl(key))
    return tuple(out[i] for i in range(num))


def _lowbias32(h: Array) -> Array:
    """Wellons's ``lowbias32`` integer hash (xorshift-multiply, full avalanche) on uint32."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x7FEB352D)
    h = h ^ (h >> 15)
    h = h * jnp.uint32(0x846CA68B)
    return h ^ (h >> 16)


def hash_normal(key, shape: tuple, dtype) -> Array:
    """Standard normal draws from a counter-based hash seeded by ``key`` (the fast generator).

    The key's data words give two 32-bit seeds (folded and mixed by the same hash, no
    threefry call: a threefry call costs as much as the draws for a small grid); word ``i``
    hashes the counter,
    ``lowbias32(lowbias32(i ^ s0) + s1)`` (a bijection of the counter for fixed seeds, so no
    two words of one call share their bits; float64 takes a second word per draw, that of
    counter ``n' + i`` with ``n'`` the draws rounded up to even, so each of its 53-bit
    uniforms holds two independent words), and pairs of words become pairs of normals by
    :func:`_box_muller`. At most ``2^32`` words per call (``2^31`` draws in float64). The
    same key gives the same draws; split keys give independent seeds. Not a cryptographic
    generator, and its streams are not those of ``jax.random``; cheaper than
    :func:`standard_normal` because hashing a counter costs less than threefry. Tails are
    bounded at ``|z| <= 5.77`` (float32) / ``8.57`` (float64) by the uniforms' resolution.
    """
    n = int(np.prod(shape))
    return jnp.concatenate(_hash_halves(key, (n + 1) // 2, dtype))[:n].reshape(shape)


def normal_halves(key, n: int, dtype, generator: str = "threefry") -> tuple[Array, Array]:
    """The first and the second half (``[n // 2]`` each, ``n`` even) of the flat draws of
    :func:`standard_normal` (``generator="threefry"``) or :func:`hash_normal` (``"hash"``)
    of ``n`` normals: the same numbers, never joined (a consumer that splits the draws in
    two reads each half where it was made, no concatenated copy)."""
    if n % 2:
        raise ValueError(f"normal_halves: n must be even, got {n}")
    fn = _hash_halves if generator == "hash" else _threefry_halves
    return fn(key, n // 2, dtype)


def _hash_halves(key, h: int, dtype) -> tuple[Array, Array]:
    dtype = jnp.dtype(dtype)
    wide = dtype.itemsize >= 8
    if (4 if wide else 2) * h > 2**32:
        raise ValueError(
            f"hash_normal: {2 * h} draws need more than 2^32 counter words in {dtype}; "
            "draw them in parts with split keys"
        )
    seed = _seeds(key)

    def words(start, n):  # the hash of counters start .. start + n - 1
        i = jnp.arange(n, dtype=jnp.uint32) + jnp.uint32(start)
        return _lowbias32(_lowbias32(i ^ seed[0]) + seed[1])

    b = words(0, 2 * h)
    b2 = (None, None)
    if wide:  # the words of the next 2h counters, not a function of b's
        c = words(2 * h, 2 * h)
        b2 = (c[:h], c[h:])
    return _box_muller(b[:h], b[h:], *b2, dtype=dtype)


def _seeds(key) -> tuple[Array, Array]:
    """Two mixed 32-bit seeds from the data words of ``key`` (typed or raw, any impl)."""
    w = jax.random.key_data(key).reshape(-1).astype(jnp.uint32)
    a = jnp.uint32(0x243F6A88)  # pi's digits: keys of all-zero data still get mixed seeds
    for k in range(0, w.shape[0], 2):
        a = _lowbias32(a ^ w[k])
    b = _lowbias32(a + jnp.uint32(0x85A308D3))
    for k in range(1, w.shape[0], 2):
        b = _lowbias32(b ^ w[k])
    return a, b


def _taylor(coefs: tuple, x2: Array) -> Array:
    p = jnp.full_like(x2, coefs[-1])
    for c in coefs[-2::-1]:
        p = c + p * x2
    return p


_SIN = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(11))  # x^1 .. x^21
_COS = tuple((-1) ** k / math.factorial(2 * k) for k in range(11))  # x^0 .. x^20


# Cephes's logf: log(1 + f) = f - f^2 / 2 + f^3 P(f) for sqrt(1/2) <= 1 + f < sqrt(2)
_LOGF = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
         1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
         3.3333331174e-1)  # fmt: skip


def _log_unit32(u: Array) -> Array:
    """``log u`` for float32 ``u`` in ``(0, 1]``, normal numbers only: the exponent from the
    bits, the mantissa folded into ``[sqrt(1/2), sqrt(2))``, Cephes's polynomial and ``ln 2``
    in two parts. Within 0.83 ulp of the exact log on every uniform ``k 2^-24`` (XLA's
    ``log``: 1.2 ulp). Why: XLA's CPU ``log`` also handles zero, negative, subnormal and
    non-finite inputs, which these uniforms never are (the chain step: 0.97x)."""
    bits = jax.lax.bitcast_convert_type(u, jnp.int32)
    m = jax.lax.bitcast_convert_type((bits & 0x7FFFFF) | 0x3F800000, jnp.float32)
    big = m > np.float32(np.sqrt(2.0))
    m = jnp.where(big, m * 0.5, m)
    e = ((bits >> 23) - jnp.where(big, 126, 127)).astype(jnp.float32)
    f = m - 1.0
    z = f * f
    p = jnp.full_like(f, _LOGF[0])
    for c in _LOGF[1:]:
        p = p * f + c
    y = f * z * p + e * np.float32(-2.12194440e-4) - 0.5 * z
    return (f + y) + e * np.float32(0.693359375)


def _box_muller(b_r: Array, b_a: Array, b_r2=None, b_a2=None, *, dtype) -> tuple[Array, Array]:
    """Two independent standard normals ``(r cos t, r sin t)`` per pair of uint32 words.

    Radius ``r = sqrt(-2 log u)`` with ``u = (k + 1) 2^-m`` in ``(0, 1]``, ``k`` the top 24
    bits of ``b_r`` (float32, ``m = 24``) or 53 bits of ``b_r`` and ``b_r2`` (float64):
    every ``u`` is exact, so ``0 <= r <= sqrt(2 m log 2)`` (5.77 / 8.57) and never infinite.
    Angle ``t = phi + h pi``: the half turn ``h`` is the top bit of ``b_a``, and
    ``phi = f pi`` with ``f`` in ``(-1/2, 1/2)`` a grid point of the next 23 bits of ``b_a``
    (float32) or of its other 31 bits and 21 bits of ``b_a2`` (float64). ``cos phi`` and
    ``sin phi`` (``|phi| <= pi/2``) are Taylor polynomials (truncation below 7e-9 in float32,
    2e-17 in float64), and the half turn flips both signs. Why: XLA's CPU ``cos`` and ``sin``
    each do a full range reduction, which cost several times the rest of the draw; and a half
    turn, not a quadrant, gives each normal of the pair its own polynomial and no swap.
    """
    dtype = jnp.dtype(dtype)
    if dtype.itemsize >= 8:
        k = b_r.astype(dtype) * 2.0**21 + (b_r2 >> 11).astype(dtype)  # < 2^53, exact
        u = (k + 1.0) * 2.0**-53
        ka = (b_a & 0x7FFFFFFF).astype(dtype) * 2.0**21 + (b_a2 >> 11).astype(dtype)  # < 2^52
        f = ka * 2.0**-52 + (2.0**-53 - 0.5)
        n = 11
    else:
        u = ((b_r >> 8).astype(dtype) + 1.0) * 2.0**-24
        f = ((b_a >> 8) & 0x7FFFFF).astype(dtype) * 2.0**-23 + (2.0**-24 - 0.5)
        n = 7
    r = jnp.sqrt(-2.0 * (jnp.log(u) if dtype.itemsize >= 8 else _log_unit32(u)))
    phi = f * np.pi
    p2 = phi * phi
    sign = jnp.where((b_a >> 31) == 1, -1.0, 1.0).astype(dtype)  # the half turn
    return r * (sign * _taylor(_COS[:n], p2)), r * (sign * (_taylor(_SIN[:n], p2) * phi))
