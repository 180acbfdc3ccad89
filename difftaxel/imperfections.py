"""The measured branch of a real tactile sensor: Genesis 1.4.5's imperfection chain.

Order (GENESIS_MODELS.md section 9.1), each stage pure with explicit state:

1. **spatial crosstalk** (taxel sensors on a grid): depthwise cross-correlation of each
   channel field ``[ny, nx]`` with a kernel, zero padding, 1, 2 or 3 groups (all channels;
   normal vs rest; normal, shear, torque); filler probes re-zeroed;
2. **viscoelastic hysteresis** (single Maxwell element) per channel:
   ``xi_k = a xi_{k-1} + (x_k - x_{k-1})``, ``y_k = x_k + strength xi_k``, ``a = exp(-dt/tau)``;
3. **random walk** ``rho += N(0, random_walk)``, value += rho;
4. **white noise** ``+ noise * N(0, 1)`` (reparameterised: differentiable in ``noise``);
5. **bias** ``+ bias``;
6. **resolution** ``round(x / res) * res`` (round half to even), optionally straight-through
   (identity gradient) for training;
7. **dead taxels**: a probe drawn dead at reset reads its dead value on every channel;
8. the sensor's own thresholds (ContactProbe latch) - applied by the sensor;
9. **delay and jitter** through a ring of past readings; **history** of the last H readings
   (index 0 newest; history reads bypass the delay, as Genesis).

Values travel as ``[N, C]`` arrays: N probes, C channels per probe (1 for depths, 6 for a
taxel's force then torque), or channels first as ``[C, N]`` (KinematicTaxel: every stage is
then elementwise on contiguous probe rows). ``noise``, ``bias``, ``resolution`` and
``random_walk`` may be scalars or arrays broadcastable to ``[N, C]`` in either layout.

Every random draw comes from an explicit key: ``init`` draws dead taxels (per reset) and
``step`` draws noise, random-walk increments and jitter. The ground-truth branch never sees
any of this.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ._numerics import eps as _eps
from ._pytree import pytree_dataclass, replace, static_field
from .layout import gaussian_crosstalk_kernel

Array = jax.Array

__all__ = [
    "Imperfections",
    "ChainState",
    "crosstalk_correlate",
    "crosstalk_matrix",
    "grid_metadata",
    "hash_normal",
]


def grid_metadata(grid: np.ndarray):
    """Averaged grid spacings and tangents of a ``[ny, nx, 3]`` probe grid (Genesis's rule).

    Spacings are computed from float32 positions (as Genesis does: e.g. a 0.03 m pitch becomes
    0.029999995604157448). Returns ``(s_v, s_u, t_u [3], t_v [3])``: row and column spacings
    (m) and unit column (u) and row (v) directions.
    """
    g = np.asarray(grid, dtype=np.float32).astype(np.float64)
    du = (g[:, 1:] - g[:, :-1]).reshape(-1, 3).mean(0)
    dv = (g[1:] - g[:-1]).reshape(-1, 3).mean(0)
    s_u, s_v = float(np.linalg.norm(du)), float(np.linalg.norm(dv))
    return s_v, s_u, du / max(s_u, 1e-300), dv / max(s_v, 1e-300)


def crosstalk_correlate(field: Array, kernel: Array) -> Array:
    """Same-size cross-correlation with zero padding of ``field [ny, nx, C]`` by ``kernel``.

    ``out[y, x, c] = sum_ij K[i, j] in[y + i - r_v, x + j - r_u, c]`` (torch's conv2d
    semantics; no flip). ``kernel`` is ``[kr, kc]`` (shared by all channels) with odd sizes.

    Grids of up to 1024 taxels use a dense ``[N, N]`` operator built from the kernel by a static
    index map (one matrix product; under ``vmap`` over environments the operator is shared and
    the product is a single GEMM); larger grids sum shifted copies of the padded field.
    Both are differentiable in the kernel and the field.
    """
    ny, nx, C = field.shape
    if ny * nx <= 1024:
        M = crosstalk_matrix(kernel.astype(field.dtype), ny, nx)
        return (M @ field.reshape(ny * nx, C)).reshape(ny, nx, C)
    kr, kc = kernel.shape
    pad = jnp.pad(field, ((kr // 2, kr // 2), (kc // 2, kc // 2), (0, 0)))
    out = jnp.zeros_like(field)
    for i in range(kr):  # static loop over the (small) kernel, not over taxels
        for j in range(kc):
            out = out + kernel[i, j].astype(field.dtype) * pad[i : i + ny, j : j + nx]
    return out


def _crosstalk_index(kr: int, kc: int, ny: int, nx: int):
    y = np.arange(ny)[:, None, None, None]
    x = np.arange(nx)[None, :, None, None]
    yy = np.arange(ny)[None, None, :, None]
    xx = np.arange(nx)[None, None, None, :]
    i = yy - y + kr // 2
    j = xx - x + kc // 2
    ok = (i >= 0) & (i < kr) & (j >= 0) & (j < kc)
    flat = np.where(ok, i * kc + j, 0).reshape(ny * nx, ny * nx)
    return flat, ok.reshape(ny * nx, ny * nx)


def crosstalk_matrix(kernel: Array, ny: int, nx: int) -> Array:
    """Dense ``[ny*nx, ny*nx]`` operator of the zero-padded cross-correlation by ``kernel``."""
    kr, kc = kernel.shape
    idx, ok = _crosstalk_index(kr, kc, ny, nx)
    return jnp.where(jnp.asarray(ok), kernel.reshape(-1)[jnp.asarray(idx)], 0.0)


def standard_normal(key, shape: tuple, dtype) -> Array:
    """Standard normal draws from ``jax.random`` bits (threefry) by the Box-Muller transform.

    Each pair of normals takes two uniforms (four 32-bit words in float64): see
    :func:`_box_muller`. Exactly Gaussian up to the uniforms' resolution and floating point;
    3x cheaper than ``jax.random.normal`` on this project's CPU (``benchmarks/RESULTS.md``),
    whose inverse error function costs more than the bits. Not the ``jax.random.normal``
    stream.
    """
    n = int(np.prod(shape))
    dtype = jnp.dtype(dtype)
    h = (n + 1) // 2
    w = 4 if dtype.itemsize >= 8 else 2
    b = jax.random.bits(key, (w, h), jnp.uint32)
    z = _box_muller(b[0], b[1], *((b[2], b[3]) if w == 4 else (None, None)), dtype=dtype)
    return jnp.concatenate(z)[:n].reshape(shape)


def _lowbias32(h: Array) -> Array:
    """Wellons's ``lowbias32`` integer hash (xorshift-multiply, full avalanche) on uint32."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x7FEB352D)
    h = h ^ (h >> 15)
    h = h * jnp.uint32(0x846CA68B)
    return h ^ (h >> 16)


def hash_normal(key, shape: tuple, dtype) -> Array:
    """Standard normal draws from a counter-based hash seeded by ``key`` (the fast generator).

    The key gives two 32-bit seeds (one small threefry call); word ``i`` hashes the counter,
    ``lowbias32(lowbias32(i ^ s0) + s1)`` (a bijection of the counter for fixed seeds, so no
    two words of one call share their bits; float64 takes a second word
    ``lowbias32(b ^ s0 ^ 0x9E3779B9)`` per draw), and pairs of words become pairs of normals
    by :func:`_box_muller`. The same key gives the same draws; split keys give independent
    seeds. Not a cryptographic generator, and its streams are not those of ``jax.random``;
    measured 4x cheaper than :func:`standard_normal` (threefry bits) on this project's CPU
    (``benchmarks/RESULTS.md``). Tails are bounded at ``|z| <= 5.77`` (float32) / ``8.57``
    (float64) by the uniforms' resolution.
    """
    n = int(np.prod(shape))
    dtype = jnp.dtype(dtype)
    h = (n + 1) // 2
    seed = jax.random.bits(key, (2,), jnp.uint32)
    i = jnp.arange(2 * h, dtype=jnp.uint32)
    b = _lowbias32(_lowbias32(i ^ seed[0]) + seed[1])
    b2 = (None, None)
    if dtype.itemsize >= 8:
        c = _lowbias32(b ^ seed[0] ^ jnp.uint32(0x9E3779B9))
        b2 = (c[:h], c[h:])
    z = _box_muller(b[:h], b[h:], *b2, dtype=dtype)
    return jnp.concatenate(z)[:n].reshape(shape)


def _taylor(coefs: tuple, x2: Array) -> Array:
    p = jnp.full_like(x2, coefs[-1])
    for c in coefs[-2::-1]:
        p = c + p * x2
    return p


_SIN = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(9))  # x^1 .. x^17
_COS = tuple((-1) ** k / math.factorial(2 * k) for k in range(10))  # x^0 .. x^18


def _box_muller(b_r: Array, b_a: Array, b_r2=None, b_a2=None, *, dtype) -> tuple[Array, Array]:
    """Two independent standard normals ``(r cos t, r sin t)`` per pair of uint32 words.

    Radius ``r = sqrt(-2 log u)`` with ``u = (k + 1) 2^-m`` in ``(0, 1]``, ``k`` the top 24
    bits of ``b_r`` (float32, ``m = 24``) or 53 bits of ``b_r`` and ``b_r2`` (float64):
    every ``u`` is exact, so ``0 <= r <= sqrt(2 m log 2)`` (5.77 / 8.57) and never infinite.
    Angle ``t = q pi/2 + f pi/2``: the quadrant ``q`` is the top two bits of ``b_a`` and
    ``f`` in ``(-1/2, 1/2)`` a grid point of the next 22 bits (float32) or of 51 bits of
    ``b_a`` and ``b_a2`` (float64); ``cos`` and ``sin`` of ``f pi/2`` (``|.| <= pi/4``) are
    Taylor polynomials (truncation below 3e-8 in float32, 1e-19 in float64) rotated by the
    quadrant with selects. XLA's CPU ``cos`` and ``sin`` each do a full range reduction:
    with them, a draw from the same hash bits cost 4.7x more (``benchmarks/RESULTS.md``).
    """
    dtype = jnp.dtype(dtype)
    if dtype.itemsize >= 8:
        k = b_r.astype(dtype) * 2.0**21 + (b_r2 >> 11).astype(dtype)  # < 2^53, exact
        u = (k + 1.0) * 2.0**-53
        ka = (b_a & 0x3FFFFFFF).astype(dtype) * 2.0**21 + (b_a2 >> 11).astype(dtype)
        f = ka * 2.0**-51 + (2.0**-52 - 0.5)
        ns, nc = 9, 10
    else:
        u = ((b_r >> 8).astype(dtype) + 1.0) * 2.0**-24
        f = ((b_a >> 8) & 0x3FFFFF).astype(dtype) * 2.0**-22 + (2.0**-23 - 0.5)
        ns, nc = 5, 5
    r = jnp.sqrt(-2.0 * jnp.log(u))
    phi = f * (np.pi / 2)
    p2 = phi * phi
    s = _taylor(_SIN[:ns], p2) * phi
    c = _taylor(_COS[:nc], p2)
    q = b_a >> 30
    odd = (q & 1) == 1  # quadrants 1, 3 swap cos and sin
    c1, s1 = jnp.where(odd, s, c), jnp.where(odd, c, s)
    x = jnp.where((q == 1) | (q == 2), -c1, c1)
    y = jnp.where(q >= 2, -s1, s1)
    return r * x, r * y


def _check_layout(state, value, where: str) -> None:
    """``value`` must have the per-channel shape of ``state`` (``[N, C]`` or ``[C, N]``)."""
    if tuple(value.shape) != tuple(state.walk.shape):
        layout = "[C, N]" if state.channels_first else "[N, C]"
        raise ValueError(
            f"value: Imperfections.{where} expected shape {tuple(state.walk.shape)} (the "
            f"state's {layout} layout), got {tuple(value.shape)}"
        )


@pytree_dataclass
class ChainState:
    """State of the imperfection chain for one environment.

    Per-channel arrays are ``[N, C]``, or ``[C, N]`` for a sensor that runs the chain
    channels first (``KinematicTaxel``; ``Imperfections.init(..., channels_first=True)``).

    Attributes:
      hyst_xi: ``[N, C]`` Maxwell element state.
      hyst_prev: ``[N, C]`` previous hysteresis input.
      walk: ``[N, C]`` random-walk offset.
      dead: ``[N]`` bool, drawn at reset.
      dead_value: ``[N]`` value a dead probe reads.
      channels_first: static; True when the per-channel arrays are ``[C, N]``.
      ring: tuple of ``D`` arrays ``[N, C]``, the past post-processed measured readings
        (index 0 newest); ``()`` when no delay or history is configured. A tuple, not one
        ``[D, N, C]`` array, so a push renames buffers instead of shifting the whole ring
        (a shifted array let XLA fuse the sensor kernel into the shift, which its CPU
        backend does not vectorise: 25 ms against 2 ms per step at 1024 environments).
    """

    hyst_xi: Array
    hyst_prev: Array
    walk: Array
    dead: Array
    dead_value: Array
    ring: Array
    channels_first: bool = static_field(False)


def _validate_scalar(name, v, lo=None, hi=None, allow_array=True):
    a = np.asarray(v, dtype=float)
    if not allow_array and a.ndim:
        raise ValueError(f"{name}: expected a scalar, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: expected finite values, got {v!r}")
    if lo is not None and np.any(a < lo):
        raise ValueError(f"{name}: expected >= {lo}, got {v!r}")
    if hi is not None and np.any(a > hi):
        raise ValueError(f"{name}: expected <= {hi}, got {v!r}")
    return jnp.asarray(a, jnp.result_type(float))


@pytree_dataclass
class Imperfections:
    """Options of the measured-branch chain (Genesis names and defaults: everything off).

    Attributes:
      hysteresis_strength: ``s >= 0`` of the Maxwell element (0 = off).
      hysteresis_tau: relaxation time (s), must be > 0 when ``s > 0``.
      random_walk: std of the per-step increment of a cumulative offset (sensor units).
      noise: std of additive white Gaussian noise (sensor units).
      bias: constant offset (sensor units).
      resolution: quantisation step (0 = off).
      dead_taxel_probability: probability in [0, 1] that a probe is dead (drawn per reset).
      dead_taxel_value_range: ``(lo, hi)`` a dead probe's value is drawn from.
      crosstalk_strength: Gaussian crosstalk mix ``K = s G + (1 - s) delta`` (0 = off).
      crosstalk_sigma: Gaussian width (m), > 0 when ``crosstalk_strength > 0``.
      crosstalk_kernel: explicit kernel ``[kr, kc]``, ``[2, kr, kc]`` or ``[3, kr, kc]`` (odd
        sizes; groups normal/rest or normal/shear/torque), exclusive with the Gaussian options.
      delay: read latency (s); ``round(delay / dt)`` steps (``dt`` is required then).
      jitter: random extra latency (s), ``<= delay`` and ``<= dt``.
      dt: sensor step (s); needed for delay/jitter (static) - hysteresis uses ``inputs.dt``.
      history_length: H > 0 makes ``read`` return the last H post-processed readings.
      straight_through: quantisation passes gradients unchanged (for training).
      noise_generator: Gaussian source of the random walk and white noise: ``"threefry"``
        (default; ``jax.random`` bits through Box-Muller) or ``"hash"`` (:func:`hash_normal`, a
        counter hash seeded by the step's key, several times cheaper: for large rollouts on
        CPU). Either way the draws come only from the key passed to ``step``.

    Which stages run is fixed when the chain is built (static, so a chain that is all off costs
    nothing): a stage built with a zero scale (``hysteresis_strength``, ``random_walk``,
    ``noise``, ``bias``, ``resolution``, ``dead_taxel_probability``, ``jitter``) is skipped and
    stays off if its value is later replaced; build it with a non-zero value to train it.
    """

    hysteresis_strength: Array = 0.0
    hysteresis_tau: Array = 0.0
    random_walk: Array = 0.0
    noise: Array = 0.0
    bias: Array = 0.0
    resolution: Array = 0.0
    dead_taxel_probability: Array = 0.0
    dead_taxel_value_range: Array = (0.0, 0.0)
    crosstalk_strength: Array = 0.0
    crosstalk_sigma: Array = 0.0
    crosstalk_kernel: Array | None = None
    jitter: Array = 0.0
    delay: float = static_field(0.0)
    dt: float | None = static_field(None)
    history_length: int = static_field(0)
    straight_through: bool = static_field(False)
    noise_generator: str = static_field("threefry")
    # bound by the sensor (static): grid shape, kernel radii and spacings, grid normal
    grid_shape: tuple | None = static_field(None)
    crosstalk_radius: tuple | None = static_field(None)
    crosstalk_spacing: tuple | None = static_field(None)
    grid_normal: tuple | None = static_field(None)
    crosstalk_groups: int = static_field(0)
    active_stages: tuple = static_field(())

    def __post_init__(self):
        s = float(
            _validate_scalar(
                "hysteresis_strength", self.hysteresis_strength, lo=0, allow_array=False
            )
        )
        tau = float(_validate_scalar("hysteresis_tau", self.hysteresis_tau, allow_array=False))
        if s > 0 and tau <= 0:
            raise ValueError(
                f"hysteresis_tau: expected > 0 when hysteresis_strength > 0 ({s}), got {tau}"
            )
        p = _validate_scalar(
            "dead_taxel_probability", self.dead_taxel_probability, 0.0, 1.0, allow_array=False
        )
        rng = np.asarray(self.dead_taxel_value_range, dtype=float)
        if rng.shape != (2,) or rng[0] > rng[1] or not np.all(np.isfinite(rng)):
            raise ValueError(
                f"dead_taxel_value_range: expected (lo, hi) with lo <= hi, got {self.dead_taxel_value_range!r}"
            )
        lam = float(
            _validate_scalar("crosstalk_strength", self.crosstalk_strength, lo=0, allow_array=False)
        )
        sig = float(
            _validate_scalar("crosstalk_sigma", self.crosstalk_sigma, lo=0, allow_array=False)
        )
        K = self.crosstalk_kernel
        if K is not None:
            if lam > 0 or sig > 0:
                raise ValueError(
                    "crosstalk_kernel: an explicit kernel excludes crosstalk_strength and "
                    "crosstalk_sigma (got both)"
                )
            K = np.asarray(K, dtype=float)
            if K.ndim == 2:
                K = K[None]
            if K.ndim != 3 or K.shape[0] not in (1, 2, 3):
                raise ValueError(
                    "crosstalk_kernel: expected shape (kr, kc), (2, kr, kc) or (3, kr, kc), "
                    f"got {np.shape(self.crosstalk_kernel)}"
                )
            if K.shape[1] % 2 == 0 or K.shape[2] % 2 == 0:
                raise ValueError(f"crosstalk_kernel: expected odd kernel sizes, got {K.shape[1:]}")
            if not np.all(np.isfinite(K)):
                raise ValueError("crosstalk_kernel: expected finite values")
            K = jnp.asarray(K, jnp.result_type(float))
        elif lam > 0 and sig <= 0:
            raise ValueError(
                f"crosstalk_sigma: expected > 0 when crosstalk_strength > 0, got {sig}"
            )
        delay = float(self.delay)
        jit = float(_validate_scalar("jitter", self.jitter, lo=0, allow_array=False))
        if delay < 0 or not math.isfinite(delay):
            raise ValueError(f"delay: expected >= 0 (s), got {delay}")
        if (delay > 0 or jit > 0) and (self.dt is None or not float(self.dt) > 0):
            raise ValueError(
                f"dt: expected the sensor step (s) > 0 when delay or jitter is set, got {self.dt}"
            )
        if jit > 0:
            tol = 1e-12
            if jit > delay + tol:
                raise ValueError(f"jitter: expected <= delay ({delay}), got {jit}")
            if jit > float(self.dt) + tol:
                raise ValueError(f"jitter: expected <= dt ({self.dt}), got {jit}")
        if self.noise_generator not in ("threefry", "hash"):
            raise ValueError(
                f"noise_generator: expected 'threefry' or 'hash', got {self.noise_generator!r}"
            )
        H = int(self.history_length)
        if H < 0:
            raise ValueError(f"history_length: expected >= 0, got {H}")
        for name in ("random_walk", "noise", "resolution"):
            object.__setattr__(self, name, _validate_scalar(name, getattr(self, name), lo=0))
        object.__setattr__(self, "bias", _validate_scalar("bias", self.bias))
        object.__setattr__(self, "hysteresis_strength", jnp.asarray(s, jnp.result_type(float)))
        object.__setattr__(self, "hysteresis_tau", jnp.asarray(tau, jnp.result_type(float)))
        object.__setattr__(self, "dead_taxel_probability", p)
        object.__setattr__(self, "dead_taxel_value_range", jnp.asarray(rng, jnp.result_type(float)))
        object.__setattr__(self, "crosstalk_strength", jnp.asarray(lam, jnp.result_type(float)))
        object.__setattr__(self, "crosstalk_sigma", jnp.asarray(sig, jnp.result_type(float)))
        object.__setattr__(self, "crosstalk_kernel", K)
        groups = int(K.shape[0]) if K is not None else (1 if lam > 0 else 0)
        object.__setattr__(self, "crosstalk_groups", groups)
        # which random stages draw numbers is fixed at construction (static): a stage built
        # with a zero scale draws nothing, so a noise-free chain costs no random numbers
        stages = tuple(
            name
            for name, on in (
                ("random_walk", np.any(np.asarray(self.random_walk) > 0)),
                ("noise", np.any(np.asarray(self.noise) > 0)),
                ("jitter", jit > 0),
                ("hysteresis", s > 0),
                ("bias", np.any(np.asarray(self.bias) != 0)),
                ("resolution", np.any(np.asarray(self.resolution) > 0)),
                ("dead", float(p) > 0),
            )
            if on
        )
        object.__setattr__(self, "active_stages", stages)
        object.__setattr__(self, "jitter", jnp.asarray(jit, jnp.result_type(float)))
        object.__setattr__(self, "delay", delay)
        object.__setattr__(self, "history_length", H)
        object.__setattr__(self, "dt", None if self.dt is None else float(self.dt))

    # ------------------------------------------------------------------ binding to a layout

    @property
    def is_identity(self) -> bool:
        """Static: no stage is configured, so the measured branch equals its input."""
        return not self.active_stages and not self.has_crosstalk and self.ring_depth == 0

    @property
    def has_crosstalk(self) -> bool:
        """Static: crosstalk was configured at construction (explicit kernel or strength > 0)."""
        return self.crosstalk_groups > 0

    def bind(
        self,
        owner: str,
        layout: tuple,
        probe_grid: np.ndarray | None,
        allow_crosstalk: bool,
        grid_normal=None,
    ) -> Imperfections:
        """Resolve layout-dependent static data (kernel radii, spacings); called by sensors.

        Raises ``ValueError`` naming the option for crosstalk on a sensor class without it or
        on a non-grid layout.
        """
        if not self.has_crosstalk:
            return replace(self, grid_shape=tuple(layout))
        if not allow_crosstalk:
            raise ValueError(
                f"{owner}.imperfections.crosstalk_*: crosstalk is not applied to {owner} "
                "(Genesis applies it to KinematicTaxel and ProximityTaxel only)"
            )
        if len(layout) != 2 or layout[0] < 2 or layout[1] < 2:
            raise ValueError(
                f"{owner}.imperfections.crosstalk_*: crosstalk needs a grid layout (ny, nx, 3) "
                f"with nx, ny >= 2, got probe layout {tuple(layout)}"
            )
        s_v, s_u, t_u, t_v = grid_metadata(probe_grid.reshape(layout + (3,)))
        if s_u < 1e-12 or s_v < 1e-12:
            raise ValueError(f"{owner}.probe_local_pos: degenerate grid spacing for crosstalk")
        if grid_normal is None:
            n = np.cross(t_u, t_v)
            grid_normal = n / np.linalg.norm(n)
        if self.crosstalk_kernel is None:
            sig = float(self.crosstalk_sigma)
            r_v = max(1, math.ceil(3 * sig / s_v))
            r_u = max(1, math.ceil(3 * sig / s_u))
            radius = (r_v, r_u)
        else:
            radius = (self.crosstalk_kernel.shape[1] // 2, self.crosstalk_kernel.shape[2] // 2)
        return replace(
            self,
            grid_shape=tuple(layout),
            crosstalk_radius=radius,
            crosstalk_spacing=(s_v, s_u),
            grid_normal=tuple(float(v) for v in grid_normal),
        )

    # ------------------------------------------------------------------ state

    @property
    def ring_depth(self) -> int:
        """Depth ``D`` of the ring: ``history_length``, or the oldest slot a delayed
        (jittered) read can need. From ``delay_steps >= 1`` on, the read comes from the ring
        before the push, so ``delay_steps + 1`` past readings suffice (``+ 1`` for jitter)."""
        d = 0
        if self.delay > 0:
            steps = self.delay_steps
            if steps == 0:
                d = 2
            else:
                d = steps + (1 if "jitter" in self.active_stages else 0)
        return max(d, self.history_length)

    @property
    def delay_steps(self) -> int:
        if self.delay <= 0:
            return 0
        return int(np.round(self.delay / self.dt))

    def init(
        self, key, n_probes: int, n_channels: int, dtype=None, channels_first: bool = False
    ) -> ChainState:
        """Zeroed hysteresis, walk and ring; dead taxels drawn from ``key`` (a reset).

        ``channels_first`` (static) lays the per-channel state out ``[C, N]`` instead of
        ``[N, C]``, for a sensor that runs the chain on ``[C, N]`` values (see
        :meth:`apply_hardware`)."""
        dtype = dtype or jnp.result_type(float)
        shape = (n_channels, n_probes) if channels_first else (n_probes, n_channels)
        z = jnp.zeros(shape, dtype)
        p = self.dead_taxel_probability
        if key is None:
            if not isinstance(p, jax.core.Tracer) and float(p) > 0:
                raise ValueError("key: a PRNG key is needed to draw dead taxels at reset")
            dead = jnp.zeros((n_probes,), bool)
            val = jnp.zeros((n_probes,), dtype)
        else:
            k1, k2 = jax.random.split(key)
            dead = jax.random.uniform(k1, (n_probes,), dtype) < p
            lo, hi = self.dead_taxel_value_range[0], self.dead_taxel_value_range[1]
            val = jax.random.uniform(k2, (n_probes,), dtype, 0.0, 1.0) * (hi - lo) + lo
        ring = tuple(jnp.zeros(shape, dtype) for _ in range(self.ring_depth))
        return ChainState(
            hyst_xi=z,
            hyst_prev=z,
            walk=z,
            dead=dead,
            dead_value=val,
            ring=ring,
            channels_first=bool(channels_first),
        )

    # ------------------------------------------------------------------ stages

    def crosstalk_kernels(self, dtype) -> Array:
        """``[G, kr, kc]`` kernels (G groups) for the bound grid; built from traced sigma."""
        if self.crosstalk_kernel is not None:
            return self.crosstalk_kernel.astype(dtype)
        r_v, r_u = self.crosstalk_radius
        s_v, s_u = self.crosstalk_spacing
        G = gaussian_crosstalk_kernel(
            2 * r_v + 1,
            2 * r_u + 1,
            self.crosstalk_sigma.astype(dtype),
            spacing=jnp.asarray([s_v, s_u], dtype),
        )
        delta = jnp.zeros_like(G).at[r_v, r_u].set(1.0)
        lam = self.crosstalk_strength.astype(dtype)
        return (lam * G + (1.0 - lam) * delta)[None]

    def apply_crosstalk(self, value: Array, active: Array, channels_first: bool = False) -> Array:
        """Crosstalk on ``[N, C]`` taxel values (C = 6: force then torque; or C = 3).

        ``channels_first=True`` takes and returns ``[C, N]`` instead: on grids of up to 1024
        taxels the product is then ``value @ M.T`` with no transpose of the operand, so under
        ``vmap`` XLA can fuse the sensor's kernel into the GEMM's input in its natural order
        (a transposed operand was evaluated element by element, ~2x slower per step).
        """
        if not self.has_crosstalk:
            return value
        ny, nx = self.grid_shape
        if ny * nx > 1024:  # shifted sums on the [ny, nx, C] field
            if channels_first:
                return self._crosstalk_shifted(value.T, active).T
            return self._crosstalk_shifted(value, active)
        if not channels_first:
            return self.apply_crosstalk(value.T, active, True).T
        K = self.crosstalk_kernels(value.dtype)

        def corr(x, k):  # x [c, N]
            M = crosstalk_matrix(k.astype(value.dtype), ny, nx)
            return x @ M.T

        if K.shape[0] == 1:
            out = corr(value, K[0])
        else:
            n = jnp.asarray(self.grid_normal, value.dtype)
            F = value[:3]
            fn = jnp.sum(F * n[:, None], 0, keepdims=True)  # [1, N]
            Fs = F - fn * n[:, None]
            fn_o = corr(fn, K[0])
            if K.shape[0] == 2:
                rest = corr(jnp.concatenate([Fs, value[3:]], 0), K[1])
                Fs_o, T_o = rest[:3], rest[3:]
            else:
                Fs_o = corr(Fs, K[1])
                T_o = corr(value[3:], K[2])
            out = jnp.concatenate([fn_o * n[:, None] + Fs_o, T_o], 0)
        return jnp.where(active[None], out, 0.0)

    def _crosstalk_shifted(self, value: Array, active: Array) -> Array:
        """Crosstalk on ``[N, C]`` values of a large grid through :func:`crosstalk_correlate`."""
        ny, nx = self.grid_shape
        K = self.crosstalk_kernels(value.dtype)
        C = value.shape[1]
        field = value.reshape(ny, nx, C)
        if K.shape[0] == 1:
            out = crosstalk_correlate(field, K[0])
        else:
            n = jnp.asarray(self.grid_normal, value.dtype)
            F = field[..., :3]
            fn = jnp.sum(F * n[None, None], -1, keepdims=True)
            Fs = F - fn * n[None, None]
            fn_o = crosstalk_correlate(fn, K[0])
            if K.shape[0] == 2:
                rest = crosstalk_correlate(jnp.concatenate([Fs, field[..., 3:]], -1), K[1])
                Fs_o, T_o = rest[..., :3], rest[..., 3:]
            else:
                Fs_o = crosstalk_correlate(Fs, K[1])
                T_o = crosstalk_correlate(field[..., 3:], K[2])
            out = jnp.concatenate([fn_o * n[None, None] + Fs_o, T_o], -1)
        return jnp.where(active[:, None], out.reshape(-1, C), 0.0)

    def apply_hysteresis(self, state: ChainState, value: Array, dt) -> tuple[ChainState, Array]:
        """Single Maxwell element per channel; a no-op when built with ``hysteresis_strength == 0``."""
        if "hysteresis" not in self.active_stages:
            return state, value
        _check_layout(state, value, "apply_hysteresis")
        s = self.hysteresis_strength.astype(value.dtype)
        tau = self.hysteresis_tau.astype(value.dtype)
        pos = tau > 0
        a = jnp.where(pos, jnp.exp(-jnp.asarray(dt, value.dtype) / jnp.where(pos, tau, 1.0)), 0.0)
        xi = a * state.hyst_xi + (value - state.hyst_prev)
        return replace(state, hyst_xi=xi, hyst_prev=value), value + s * xi

    def apply_hardware(self, state: ChainState, value: Array, key) -> tuple[ChainState, Array]:
        """Random walk, white noise, bias, quantisation, dead taxels (in that order).

        ``value`` is ``[N, C]``, or ``[C, N]`` when ``state`` was made by
        ``init(..., channels_first=True)`` (the state carries its layout). Per-probe,
        per-channel options are given ``[N, C]``-broadcastable either way."""
        dtype = value.dtype
        channels_first = state.channels_first
        _check_layout(state, value, "apply_hardware")

        def per(x):  # an option broadcast to the layout of ``value``
            x = jnp.asarray(x).astype(dtype)
            if channels_first and x.ndim:
                x = jnp.broadcast_to(x, value.shape[::-1]).T
            return jnp.broadcast_to(x, value.shape)

        rw = per(self.random_walk)
        nz = per(self.noise)
        use_rw = "random_walk" in self.active_stages
        use_n = "noise" in self.active_stages
        z = None
        if key is not None and (use_rw or use_n):
            # one draw for both stages (fewer random bits and kernel launches)
            draw = hash_normal if self.noise_generator == "hash" else standard_normal
            z = draw(key, (int(use_rw) + int(use_n),) + value.shape, dtype)
        walk = state.walk
        if use_rw:
            if z is not None:
                walk = walk + rw * z[0]
            value = value + walk
        if use_n and z is not None:
            value = value + nz * z[-1]
        if "bias" in self.active_stages:
            value = value + per(self.bias)
        if "resolution" in self.active_stages:
            res = per(self.resolution)
            on = res > _eps(dtype)
            q = jnp.round(value / jnp.where(on, res, 1.0)) * res
            if self.straight_through:
                q = value + jax.lax.stop_gradient(q - value)
            value = jnp.where(on, q, value)
        if "dead" in self.active_stages:
            ax = 0 if channels_first else 1
            dead = jnp.expand_dims(state.dead, ax)
            value = jnp.where(dead, jnp.expand_dims(state.dead_value, ax).astype(dtype), value)
        return replace(state, walk=walk), value

    def apply_delay(self, state: ChainState, value: Array, key):
        """Push ``value [N, C]`` into the ring and read: history ``[H, N, C]`` (newest first,
        undelayed) if ``history_length > 0``, else the delayed (and jittered) reading. A
        chain run channels-first passes ``[C, N]`` (and gets ``[H, C, N]``)."""
        if self.ring_depth == 0:
            return state, value
        state_ring_old = state.ring
        ring = (value,) + tuple(state.ring[:-1])
        state = replace(state, ring=ring)
        if self.history_length > 0:
            return state, jnp.stack(ring[: self.history_length])
        base = self.delay_steps
        if base >= 1:
            # base >= 1 reads the previous ring (new ring[k] = old ring[k - 1]): the fresh
            # value then has one reader, the ring, and is not evaluated twice
            src, base = state_ring_old, base - 1
        else:
            src = ring
        if "jitter" in self.active_stages and key is not None:
            # the jittered slot is base + floor(j + u) with j <= jitter / dt <= 1 and u < 1:
            # one of two static slots, so the read is one select (a one-hot sum over the
            # ring fused with the push measured 4x slower on CPU)
            k1, k2 = jax.random.split(jax.random.fold_in(key, 7))
            j = jax.random.uniform(k1, (), value.dtype) * self.jitter.astype(value.dtype) / self.dt
            u = jax.random.uniform(k2, (), value.dtype)
            return state, jnp.where(j + u >= 1.0, src[base + 1], src[base])
        return state, src[base]
