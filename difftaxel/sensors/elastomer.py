"""ElastomerTaxel: marker displacement of a soft elastomer skin, HydroShear-style.

Formulas, defaults and quirks follow Genesis World 1.4.5's ``ElastomerTaxel`` (Dang et al., RSS
2026, arXiv 2603.00446). The sensor is not contact-gated: every body of ``inputs.bodies`` with
``inputs.body_mask`` True is tracked, through a :class:`~difftaxel.sensors.TrackedPoints`.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import channels_last, compute_once, dot, pinned_reshape, runtime_one, safe_pow
from .._numerics import eps as _eps
from .._pytree import pytree_dataclass, replace, static_field
from ..crosstalk import grid_axes
from ..geometry import Planes
from ..geometry.bodies import in_shape_order, shape_kinds, shape_rows
from ..geometry.shapes import sdf_local_xyz
from ..imperfections import ChainState
from .base import (
    Reading,
    SensorInputs,
    check_inputs_trace,
    check_per_probe,
    check_scalar,
    split3,
)
from .layer import elastomer_layer_kernel
from .shear import shear_sums
from .tracked import PointCloudSensor

Array = jax.Array

__all__ = ["ElastomerState", "ElastomerTaxel"]


#: grids of up to this many markers apply the FFT path's convolution as a dense operator
DENSE_GRID_MAX = 256


def _circulant_index(ny: int, nx: int, Ly: int, Lx: int) -> np.ndarray:
    """``[N, N]`` flat index into an ``[Ly, Lx]`` kernel plane of the circular offset
    ``((r_i - r_j) mod Ly, (c_i - c_j) mod Lx)`` from source marker ``j`` to target ``i``
    (row-major grid order): the FFT path's convolution written as a matrix."""
    r, c = np.divmod(np.arange(ny * nx), nx)
    dr = (r[:, None] - r[None]) % Ly
    dc = (c[:, None] - c[None]) % Lx
    return (dr * Lx + dc).astype(np.int32)


@pytree_dataclass
class ElastomerState:
    """Per-episode state of an ElastomerTaxel (one environment).

    Attributes:
      probe_gain: ``[N]`` gain this episode.
      chain: imperfection-chain state (``[3, N]``).
      anchored: ``[M]`` bool, shear anchors of the tracked points (``[0]`` without shear).
      anchor_entry: ``[M, 3]`` anchor positions in the sensor link frame (m; ``[0, 3]``
        without shear).
    """

    probe_gain: Array
    chain: ChainState
    anchored: Array
    anchor_entry: Array


def _is_grid(layout) -> bool:
    return len(layout) == 2 and layout[0] >= 2 and layout[1] >= 2


@pytree_dataclass(kw_only=True)
class ElastomerTaxel(PointCloudSensor):
    """Marker displacement per probe (m), HydroShear-style (Dang et al., RSS 2026,
    arXiv 2603.00446), with Genesis 1.4.5's compressibility and bonded-layer options.

    Per probe: indentation ``H = max(0, -min sd)`` of the tracked bodies at the marker; a
    dilation field (sum over indented probes ``j`` of a Gaussian ``exp(-lambda_d r^2)`` of the
    tangent-plane offset, times ``H_j`` times the offset, plus the normal bulge
    ``H_j^normal_exponent``) and a shear field from anchored tracked points (their tangential
    displacement since anchoring, weighted by ``exp(-lambda_s rho_t^2)`` and their depth in the
    elastomer). Output ``[*layout, 3]`` in the sensor link frame; fillers (radius 0) read 0.

    Paths: regular grids ``(ny, nx, 3)`` with ``nx, ny >= 2`` use FFT convolutions (zero padded
    to ``fft_size``, default the next power of two >= 2n - 1, so no wrap-around) with the grid's
    averaged tangents and mean normal; other layouts the direct sum. On a regular grid both give
    the same result (the bonded layer excepted: the direct path approximates it by the
    regularised 1/r kernel, as Genesis).

    Shear needs the sensor's own surface: ``elastomer_shapes`` (shapes whose ``T_body_shape`` is
    their pose in the **sensor link frame**). A tracked point anchors when its signed distance
    to that surface drops below ``-contact_threshold`` and releases above ``-release_threshold``
    or when it leaves the surface shapes' boxes (Genesis's AABB rule). The anchor state lives in
    :class:`ElastomerState` (empty arrays when the shear stage does not run).

    Stages: ``"shear"`` (``shear_scale``, with ``lambda_s``, the anchor thresholds and
    ``elastomer_shapes``). ``dilation_reg`` (m, default None) is the regularisation length of
    the ``1 / r`` kernels (compressibility < 1): None follows Genesis (the thickness if > 0,
    else the mean grid spacing on the FFT path, else ``sqrt(area / N)``).

    Depth is read from every tracked body at its current pose; ``stale_aabb=True`` (static)
    applies Genesis's rule instead: a body counts at a marker only if the marker lies in its box
    at the start of the step (``inputs.body_poses_start``); see :meth:`depths`.

    Measured branch: hysteresis, then ``x probe_gain``, then the hardware chain.
    """

    elastomer_shapes: tuple = ()
    lambda_d: Array = 700.0
    lambda_s: Array = 300.0
    dilate_scale: Array = 1.0
    shear_scale: Array = 1.0
    normal_exponent: Array = 2.0
    contact_threshold: Array = 1e-5
    release_threshold: Array = -1e-4
    dilation_reg: Array | None = None
    compressibility: float = static_field(1.0)
    elastomer_thickness: float = static_field(0.0)
    fft_size: tuple | None = static_field(None)
    use_fft: bool | None = static_field(None)
    stale_aabb: bool = static_field(False)

    STAGES = ("shear",)
    N_CHANNELS = 3
    _STAGE_OF = {
        "shear_scale": "shear",
        "lambda_s": "shear",
        "contact_threshold": "shear",
        "release_threshold": "shear",
        "elastomer_shapes": "shear",
    }
    _REDERIVES = frozenset({"stages", "use_fft", "fft_size"})

    def _check_field(self, name, v):
        o = "ElastomerTaxel"
        if name == "probe_radius":
            r = check_per_probe(o, name, v, self.layout)
            if not np.any(np.asarray(r) > 0):
                raise ValueError(f"{o}.probe_radius: every probe is a filler (radius 0)")
            return r
        if name == "elastomer_shapes":
            shapes = tuple(v) if isinstance(v, (list, tuple)) else (v,)
            for i, s in enumerate(shapes):
                if not hasattr(s, "sdf_local"):
                    raise TypeError(f"{o}.elastomer_shapes[{i}]: expected a shape")
            return shapes
        if name in ("lambda_d", "lambda_s", "dilate_scale", "shear_scale"):
            return check_scalar(o, name, v, lo=0)
        if name == "normal_exponent":
            return check_scalar(o, name, v, lo=1)
        if name in ("contact_threshold", "release_threshold"):
            return check_scalar(o, name, v)
        if name == "dilation_reg":
            return None if v is None else check_scalar(o, name, v, lo=0, strict=True)
        if name == "compressibility":
            c = float(v)
            if not 0.0 <= c <= 1.0:
                raise ValueError(f"{o}.compressibility: expected a value in [0, 1], got {v!r}")
            return c
        if name == "elastomer_thickness":
            h = float(v)
            if not h >= 0 or not math.isfinite(h):
                raise ValueError(f"{o}.elastomer_thickness: expected >= 0 (m), got {v!r}")
            return h
        if name == "use_fft":
            return None if v is None else bool(v)
        if name == "stale_aabb":
            return bool(v)
        if name == "fft_size":
            return None if v is None else tuple(int(x) for x in v)
        return super()._check_field(name, v)

    def _stage_values(self):
        return {"shear": float(self.shear_scale) > 0}

    def _derive(self):
        o = "ElastomerTaxel"
        d = super()._derive()
        ct, rt = float(self.contact_threshold), float(self.release_threshold)
        if rt > ct:
            raise ValueError(
                f"{o}.release_threshold: expected <= contact_threshold ({ct}), got {rt}"
            )
        if "shear" in d["active_stages"] and not self.elastomer_shapes:
            raise ValueError(
                f"{o}.elastomer_shapes: shear (shear_scale > 0) needs the sensor's own surface "
                "shapes (link frame); pass them or set shear_scale=0"
            )
        if self.use_fft and not _is_grid(self.layout):
            raise ValueError(f"{o}.use_fft: the FFT path needs a (ny, nx, 3) grid with nx, ny >= 2")
        if self.fft_on:
            g = np.asarray(self.probe_local_pos)
            du = (g[:, 1:] - g[:, :-1]).reshape(-1, 3).mean(0)
            dv = (g[1:] - g[:-1]).reshape(-1, 3).mean(0)
            if np.linalg.norm(du) < 1e-12 or np.linalg.norm(dv) < 1e-12:
                raise ValueError(f"{o}.probe_local_pos: degenerate grid spacing")
            fs, lay = self.fft_shape, self.layout
            if len(fs) != 2 or fs[0] < 2 * lay[0] - 1 or fs[1] < 2 * lay[1] - 1:
                raise ValueError(
                    f"{o}.fft_size: expected (L_y, L_x) >= (2 ny - 1, 2 nx - 1), got {fs}"
                )
        return d

    # ------------------------------------------------------------------ static layout

    @property
    def fft_on(self) -> bool:
        """Static: the FFT path runs (``use_fft``, default: on for ``(ny, nx)`` grids)."""
        return _is_grid(self.layout) if self.use_fft is None else self.use_fft

    @property
    def fft_shape(self) -> tuple:
        """Static ``(L_y, L_x)``: ``fft_size`` or the next powers of two ``>= 2 n - 1``."""
        if self.fft_size is not None:
            return self.fft_size
        return tuple(1 << (2 * k - 2).bit_length() for k in self.layout)

    def _active(self, dtype) -> Array:
        return self.per_probe(self.probe_radius, dtype) > 0

    def grid_frame(self, dtype):
        """FFT grid frame from the (traced) positions and normals: ``(t_u [3], t_v [3],
        n_bar [3], s_u, s_v)``: averaged unit tangents, mean normal and spacings (m)."""
        s_v, s_u, t_u, t_v = grid_axes(self.probe_local_pos.astype(dtype), float32_positions=False)
        nrm = self.flat_normals(dtype)
        nb = jnp.mean(nrm, 0)
        ln = jnp.sqrt(jnp.sum(nb * nb))
        ok = ln > 1e-12
        nb = jnp.where(ok, nb / jnp.where(ok, ln, 1.0), nrm[0])
        return t_u, t_v, nb, s_u, s_v

    def dilation_length(self, dtype=None, spacings=None) -> Array:
        """The ``1 / r`` kernels' regularisation length (m): ``dilation_reg``, or Genesis's
        rule: the thickness if > 0; else the mean grid spacing (FFT path; ``spacings = (s_u,
        s_v)`` if the caller has them) or ``sqrt(A / N)`` with ``A`` the area of the layout's
        two largest extents (direct path)."""
        dtype = dtype or jnp.result_type(float)
        if self.dilation_reg is not None:
            return self.dilation_reg.astype(dtype)
        h = self.elastomer_thickness
        if h > 0:
            return jnp.asarray(h, dtype)
        if self.fft_on:
            if spacings is None:
                g = self.probe_local_pos.astype(dtype)
                s_v, s_u, _, _ = grid_axes(g, float32_positions=False)
                spacings = (s_u, s_v)
            return 0.5 * (spacings[0] + spacings[1])
        p = self.flat_positions(dtype)
        ext = jnp.sort(jnp.max(p, 0) - jnp.min(p, 0))[::-1]
        feps = float(np.finfo(np.float64).eps)
        A = jnp.where(ext[1] >= feps, ext[0] * ext[1], ext[0] ** 2)
        return jnp.sqrt(jnp.maximum(A, feps) / self.n_probes)

    def init_state(self, key=None) -> ElastomerState:
        """Per-episode state (a reset): no anchors, zeroed chain, gains/dead taxels from key."""
        g, chain = self.reset_gain_and_chain(key)
        M = self.track_points.n_points if self.stage_on("shear") else 0
        return ElastomerState(
            probe_gain=g,
            chain=chain,
            anchored=jnp.zeros((M,), bool),
            anchor_entry=jnp.zeros((M, 3), g.dtype),
        )

    # ------------------------------------------------------------------ depth and dilation

    def depths(self, inputs: SensorInputs) -> Array:
        """Indentation ``H [N]`` (m): how far a tracked surface has passed each marker.

        With ``stale_aabb`` (Genesis's rule), a shape counts at a marker only if the marker (at
        the current link pose) lies in the shape's world box at the start of the step: the tight
        box of the 8 corners of ``aabb_local`` moved by ``inputs.body_poses_start`` (a closed
        test; unbounded shapes such as planes always count)."""
        check_inputs_trace(inputs)
        T = inputs.T_world_link
        x = self.flat_positions(T.dtype)
        q = inputs.bodies.query(Planes.from_array(x), inputs.body_mask, frame=T)
        sd = q.sd
        if self.stale_aabb:
            if inputs.body_poses_start is None:
                raise ValueError(
                    "inputs.body_poses_start: ElastomerTaxel(stale_aabb=True) needs the bodies' "
                    "poses at the start of the step (make_inputs(..., body_poses_start=...))"
                )
            sd = jnp.where(self._inside_start_boxes(inputs, x), sd, 1e6)
        H = jnp.maximum(-jnp.min(sd, axis=0), 0.0)
        return jnp.where(self._active(T.dtype), H, 0.0)

    def _inside_start_boxes(self, inputs: SensorInputs, x: Array) -> Array:
        """``[S, N]`` bool: marker ``n`` (link frame ``x [N, 3]``) inside shape ``s``'s world box
        at the start-of-step pose."""
        T = inputs.T_world_link
        dtype = T.dtype
        p = _pose.matrix_apply(_pose.quat_to_matrix(T[3:]), T[:3], x)  # [N, 3] world
        pick = np.array(list(itertools.product((0, 1), repeat=3)))  # [8, 3]: lo or hi per axis
        shapes = inputs.bodies.shapes
        bodies = np.array([s.body for s in shapes])

        def inside_box(treedef, leaves, T_body):
            s = jax.tree.unflatten(treedef, leaves)
            lo, hi = (jnp.asarray(v, dtype) for v in s.aabb_local())  # traced sizes allowed
            bounded = jnp.all(jnp.isfinite(lo)) & jnp.all(jnp.isfinite(hi))  # a plane is not
            lo, hi = jnp.where(bounded, lo, 0.0), jnp.where(bounded, hi, 0.0)
            c = jnp.where(pick == 1, hi[None], lo[None])  # the box's 8 corners
            Tw = _pose.compose(T_body, s.T_body_shape.astype(dtype))
            cw = _pose.matrix_apply(_pose.quat_to_matrix(Tw[3:]), Tw[:3], c)
            lo_w, hi_w = jnp.min(cw, 0), jnp.max(cw, 0)
            inside = jnp.all((p >= lo_w[None]) & (p <= hi_w[None]), -1)
            return inside | ~bounded

        rows, order = [], []
        for idx, treedef, leaves, _ in shape_kinds(shapes):  # one batched evaluation per kind
            T_b = shape_rows(inputs.body_poses_start, bodies[idx]).astype(dtype)
            rows.append(jax.vmap(lambda lv, T, td=treedef: inside_box(td, lv, T))(leaves, T_b))
            order.append(idx)
        return in_shape_order(rows, order)

    def _direct(self, H: Array) -> Array:
        x = self.flat_positions(H.dtype)
        n = self.flat_normals(H.dtype)
        c, eps_r = self.compressibility, self.dilation_length(H.dtype)
        Hp = safe_pow(H, self.normal_exponent)

        def targets(xi, ni):
            """Displacements ``[C, 3]`` of targets ``xi [C, 3]`` (normals ``ni``) from every
            source marker."""
            d = xi[:, None] - x[None]  # target i - source j
            Delta = d - ni[:, None] * dot(d, ni[:, None], keepdims=True)
            r2 = jnp.sum(Delta * Delta, -1)
            g = jnp.exp(-self.lambda_d * r2)
            Hj = H[None, :]
            if c >= 1:
                w = Hj * g
            else:
                inv = 1.0 / (r2 + eps_r**2)
                if c <= 0:
                    w = Hj * inv
                else:
                    Ng = math.exp(-0.5) / jnp.sqrt(2.0 * self.lambda_d)
                    Ni = 1.0 / (2.0 * eps_r)
                    w = Hj * (c * g / Ng + (1.0 - c) * inv / Ni)
            return jnp.sum(w[..., None] * Delta, 1) + ni * jnp.sum(Hp[None, :] * g, 1)[:, None]

        return self.dilate_scale * over_target_chunks(targets, x, n)

    def _fft_kernels(self, dtype, s_u, s_v):
        Ly, Lx = self.fft_shape
        a = (jnp.arange(Lx) - Lx // 2).astype(dtype) * s_u
        b = (jnp.arange(Ly) - Ly // 2).astype(dtype) * s_v
        a = jnp.fft.ifftshift(a)[None, :]
        b = jnp.fft.ifftshift(b)[:, None]
        r2 = a * a + b * b
        g = jnp.exp(-self.lambda_d * r2)
        c, h = self.compressibility, self.elastomer_thickness
        eps_r = self.dilation_length(dtype, (s_u, s_v))
        Ku, Kv = a * g, b * g
        if c < 1:
            if h > 0:
                Gu, Gv = elastomer_layer_kernel(Ly, Lx, s_v, s_u, h, dtype)
                Ni = jnp.max(jnp.sqrt(Gu * Gu + Gv * Gv))
            else:
                Gu = a / (r2 + eps_r**2)
                Gv = b / (r2 + eps_r**2)
                Ni = 1.0 / (2.0 * eps_r)
            if c <= 0:
                Ku, Kv = Gu, Gv
            else:
                Ng = math.exp(-0.5) / jnp.sqrt(2.0 * self.lambda_d)
                Ku = c * Ku / Ng + (1.0 - c) * Gu / Ni
                Kv = c * Kv / Ng + (1.0 - c) * Gv / Ni
        return Ku, Kv, g

    def _fft(self, H: Array) -> Array:
        ny, nx = self.layout
        Ly, Lx = self.fft_shape
        dtype = H.dtype
        t_u, t_v, nb, s_u, s_v = self.grid_frame(dtype)
        Ku, Kv, Kn = self._fft_kernels(dtype, s_u, s_v)
        if ny * nx <= DENSE_GRID_MAX:
            # the FFT's circular convolution as two products with [N source, N target]
            # circulants (one GEMM each over all environments): a small grid's products beat
            # five FFTs, and the tangential kernels in one [N, 2N] operator
            N, L = ny * nx, Ly * Lx
            it = _circulant_index(ny, nx, Ly, Lx).T  # [N source, N target] flat plane index
            Muv = jnp.concatenate([Ku.reshape(-1), Kv.reshape(-1)])[
                jnp.asarray(np.concatenate([it, it + L], 1))
            ]  # [N, 2N]
            Duv = H @ Muv
            Dn = safe_pow(H, self.normal_exponent) @ Kn.reshape(-1)[jnp.asarray(it)]
            u = Duv[:N, None] * t_u[None] + Duv[N:, None] * t_v[None] + Dn[:, None] * nb[None]
            u = self.dilate_scale * u
            return jnp.where(self._active(dtype)[:, None], u, 0.0)
        Hg = H.reshape(ny, nx)
        Hp = safe_pow(Hg, self.normal_exponent)
        fH = jnp.fft.rfft2(Hg, s=(Ly, Lx))
        fHp = jnp.fft.rfft2(Hp, s=(Ly, Lx))

        def conv(fx, K):
            return jnp.fft.irfft2(fx * jnp.fft.rfft2(K), s=(Ly, Lx))[:ny, :nx]

        Du, Dv, Dn = conv(fH, Ku), conv(fH, Kv), conv(fHp, Kn)
        u = (
            Du[..., None] * t_u[None, None]
            + Dv[..., None] * t_v[None, None]
            + Dn[..., None] * nb[None, None]
        )
        u = self.dilate_scale * u.reshape(-1, 3)
        return jnp.where(self._active(dtype)[:, None], u, 0.0)

    def dilation(self, H: Array) -> Array:
        """Dilation field ``[N, 3]`` (link frame) of indentations ``H [N]`` (FFT or direct)."""
        if self.fft_on:
            return self._fft(H)
        return jnp.where(self._active(H.dtype)[:, None], self._direct(H), 0.0)

    # ------------------------------------------------------------------ shear

    def _surface_sd(self, y) -> Array:
        """Signed distance ``[M]`` of link-frame points (three ``[M]`` coordinate planes) to the
        elastomer surface, ``1e6`` outside every shape's (closed) box, as Genesis's AABB skip.
        Shapes of one kind are one batched evaluation (the program does not grow with the
        number of shapes)."""
        yx, yy, yz = y
        dtype = yx.dtype
        sd_min = jnp.full(yx.shape, 1e6, dtype)
        for _, treedef, leaves, _ in shape_kinds(self.elastomer_shapes):  # a few kinds, static

            def one(leaf, treedef=treedef):
                s = jax.tree.unflatten(treedef, leaf)
                T = s.T_body_shape.astype(dtype)
                R = _pose.quat_to_matrix(T[3:])
                d = (yx - T[0], yy - T[1], yz - T[2])
                p = [R[0, i] * d[0] + R[1, i] * d[1] + R[2, i] * d[2] for i in range(3)]
                lo, hi = s.aabb_local()
                lo, hi = jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)
                inside = (p[0] >= lo[0]) & (p[0] <= hi[0]) & (p[1] >= lo[1]) & (p[1] <= hi[1])
                inside = inside & (p[2] >= lo[2]) & (p[2] <= hi[2])
                sd, _ = sdf_local_xyz(s, *p)
                return jnp.where(inside, sd, 1e6)

            sd_min = jnp.minimum(sd_min, jnp.min(jax.vmap(one)(leaves), 0))
        return sd_min

    def shear(self, state: ElastomerState, inputs: SensorInputs):
        """New anchors and the shear field ``[N, 3]`` (link frame) from the tracked points."""
        T = inputs.T_world_link
        dtype = T.dtype
        yp, msk = self.track_points.frame_planes(inputs, T, dtype)
        # y and sd feed six [M, 3] updates; computed once, not once per consumer element
        y = compute_once(runtime_one(state.anchor_entry), yp.stack())  # [M, 3] link frame
        sd = jnp.where(msk, self._surface_sd(tuple(yp)), 1e6)
        sd = compute_once(runtime_one(state.anchor_entry[:, 0]), sd)
        D = jnp.maximum(-sd, 0.0)
        release = sd > -self.release_threshold
        enter = (~state.anchored) & (sd < -self.contact_threshold)
        anchored = jnp.where(release, False, state.anchored | enter)
        entry = jnp.where(release[:, None], 0.0, jnp.where(enter[:, None], y, state.anchor_entry))
        eps = _eps(dtype)
        u = self._shear_field(y, entry, D, anchored, eps)
        u = jnp.where(self._active(dtype)[:, None], u, 0.0)
        return replace(state, anchored=anchored, anchor_entry=entry), u

    def _shear_field(self, y, entry, D, anchored, eps):
        """``u_i = shear_scale sum_j ok_ij D_j exp(-lambda_s |rho_t,ij|^2) delta_t,j(i)`` over the
        tracked points ``j`` (link frame), with ``delta = y - entry``, ``delta_t(i) = delta -
        n_i (delta . n_i)``, ``rho = x_i - y_j`` projected on the probe's tangent plane and
        ``ok`` = anchored, ``D > eps`` and ``|delta_t|^2 > eps^2``.

        The projection is linear, so ``sum_j W_ij delta_t,j(i) = U_i - n_i (n_i . U_i)`` with
        ``U_i = sum_j W_ij delta_j``; the sums are :func:`~difftaxel.sensors.shear.shear_sums`
        (only the anchored points inside the elastomer are visited; derivatives from the
        pass over every point)."""
        dtype = y.dtype
        x = self.flat_positions(dtype)  # [N, 3]
        n = self.probe_local_normal.astype(dtype).reshape(-1, 3)  # [N, 3] or [1, 3]
        delta = y - entry  # [M, 3]
        base = anchored & (D > eps)
        if n.shape[0] == 1:  # one normal: the per-pair test is per point
            # written out: XLA sends a [M, 3] x [3] product and a 3-wide sum to a slow library call
            dx, dy, dz = delta[:, 0], delta[:, 1], delta[:, 2]
            dn = dx * n[0, 0] + dy * n[0, 1] + dz * n[0, 2]
            base = base & (dx * dx + dy * dy + dz * dz - dn * dn > eps * eps)
        w = jnp.where(base, D, 0.0)  # [M]; 0 for points that never contribute
        u = shear_sums(x, n, y, delta, w, self.lambda_s.astype(dtype), float(eps))
        return self.shear_scale * u

    def displacement(self, state: ElastomerState, inputs: SensorInputs):
        """Ground-truth marker displacement ``[N, 3]`` (m, link frame) and the new state."""
        H = self.depths(inputs)
        u = self.dilation(H)
        if self.stage_on("shear"):
            state, us = self.shear(state, inputs)
            u = u + us
        return state, u

    def step(self, state: ElastomerState, inputs: SensorInputs, key=None):
        """One reading ``[*layout, 3]`` (m, link frame) per branch."""
        _, k_hw, k_d = split3(key)
        state, u = self.displacement(state, inputs)
        imp = self.imperfections
        chain, v = imp.run(state.chain, u.T, inputs.dt, k_hw, k_d, gain=state.probe_gain)
        state = replace(state, chain=chain)
        H = imp.history_length
        shp = ((H,) if H else ()) + self.layout + (3,)
        return state, Reading(channels_last(v, shp), pinned_reshape(u, self.layout + (3,)))


#: target-source pairs one pass of the direct sum holds (``[C, N, 3]`` temporaries): 4M pairs
#: is ~100 MB in float64; 10,000 markers at once would be 7 GB
DIRECT_PAIRS = 1 << 22


def over_target_chunks(targets, x: Array, n: Array) -> Array:
    """``targets(x, n)`` ``[N, 3]`` computed ``C`` targets at a time (``C = DIRECT_PAIRS // N``,
    at least 1) so that its pairwise temporaries stay bounded; one pass when they fit. Each
    chunk is recomputed in the backward pass (``jax.checkpoint``) instead of stored."""
    N = x.shape[0]
    C = max(1, DIRECT_PAIRS // N)
    if C >= N:
        return targets(x, n)
    pad = (-N) % C
    xs, ns = (jnp.pad(a, ((0, pad), (0, 0))).reshape(-1, C, 3) for a in (x, n))
    out = jax.lax.map(lambda a: jax.checkpoint(targets)(*a), (xs, ns))
    return out.reshape(-1, 3)[:N]
