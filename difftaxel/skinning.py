"""Taxels on a tracked hand: the tactile data contract and linear blend skinning (LBS).

The tactile data contract:

* :class:`HandJoint` - OpenXR ``XrHandJointEXT`` ordinals, ``PALM = 0`` .. ``LITTLE_TIP = 25``;
  :data:`NUM_JOINTS` (26) is a count, not a joint.
* :class:`HandSkeletonRef` - an ordered list of unique joint ids (the segment list).
* :class:`LBS` - ``J`` segment bind poses and ``N`` taxel bind poses (wrist root frame, bind
  configuration), four segment indices and four weights per taxel. An index addresses the
  segment list (not a HandJoint ordinal).
* :class:`TactileMetadata` - geometry mapping (LBS) + segment source (HandSkeletonRef).

Frames: OpenXR hand joints. Wrist root: +Y out of the back of the hand, +Z from the middle
metacarpal toward the forearm, +X = Y x Z. Taxel frame: +Z the outward surface normal, +X the
calibrated tangent, +Y = Z x X. Poses are ``(..., 7)`` arrays (position m, quaternion
x, y, z, w), ``T_a_b`` maps frame-b points into frame a.

Skinning (pure, jittable, differentiable in every pose):
``p_root(t) = sum_k w_k C[j_k](t) B[j_k]^-1 p_bind`` with ``B`` the segment bind poses and
``C(t)`` the current joint poses in the current wrist frame;
``T_root_joint = inverse(T_base_wrist) * T_base_joint`` from tracker poses in a base space
(rotation and translation, not a position subtraction); ``p_base = T_base_wrist * p_root``.
"""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp
import numpy as np

from . import pose as _pose
from ._pytree import pytree_dataclass, static_field

Array = jax.Array

__all__ = [
    "HandJoint",
    "NUM_JOINTS",
    "HandSkeletonRef",
    "LBS",
    "TactileMetadata",
    "root_from_base",
    "skin_positions",
    "skin_frames",
    "positions_in_base",
    "forces_to_root",
    "validate_metadata",
]


class HandJoint(enum.IntEnum):
    """OpenXR hand joint ordinals (``XrHandJointEXT``)."""

    PALM = 0
    WRIST = 1
    THUMB_METACARPAL = 2
    THUMB_PROXIMAL = 3
    THUMB_DISTAL = 4
    THUMB_TIP = 5
    INDEX_METACARPAL = 6
    INDEX_PROXIMAL = 7
    INDEX_INTERMEDIATE = 8
    INDEX_DISTAL = 9
    INDEX_TIP = 10
    MIDDLE_METACARPAL = 11
    MIDDLE_PROXIMAL = 12
    MIDDLE_INTERMEDIATE = 13
    MIDDLE_DISTAL = 14
    MIDDLE_TIP = 15
    RING_METACARPAL = 16
    RING_PROXIMAL = 17
    RING_INTERMEDIATE = 18
    RING_DISTAL = 19
    RING_TIP = 20
    LITTLE_METACARPAL = 21
    LITTLE_PROXIMAL = 22
    LITTLE_INTERMEDIATE = 23
    LITTLE_DISTAL = 24
    LITTLE_TIP = 25


#: Number of OpenXR hand joints: a count, never a valid joint id.
NUM_JOINTS = 26


class _Frozen:
    """A hashable read-only numpy array wrapper (static pytree metadata)."""

    __slots__ = ("a", "_h")

    def __init__(self, a):
        a = np.array(a, copy=True)
        a.setflags(write=False)
        self.a = a
        self._h = hash((a.shape, a.dtype.str, a.tobytes()))

    def __hash__(self):
        return self._h

    def __eq__(self, other):
        return (
            isinstance(other, _Frozen)
            and self.a.shape == other.a.shape
            and np.array_equal(self.a, other.a)
        )

    def __repr__(self):
        return f"_Frozen(shape={self.a.shape})"


def _quat_check(q, name, atol=1e-5):
    n = np.linalg.norm(q, axis=-1)
    if not np.all(np.isfinite(q)) or np.any(np.abs(n - 1.0) > atol):
        bad = int(np.argmax(np.abs(n - 1.0)))
        raise ValueError(
            f"{name}: expected unit quaternions (x, y, z, w) within {atol}, entry {bad} has "
            f"norm {n.reshape(-1)[bad]:.6g}"
        )


def _poses_from(x, name, count=None):
    """Accept ``(M, 7)`` poses or ``(M, 3, 4)`` / ``(M, 4, 4)`` matrices (checked proper)."""
    a = np.asarray(x, dtype=float)
    if a.ndim == 3 and a.shape[1:] in ((3, 4), (4, 4)):
        R = a[:, :3, :3]
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name}: expected finite values")
        det = np.linalg.det(R)
        orth = np.abs(np.einsum("nij,nkj->nik", R, R) - np.eye(3)).max(axis=(1, 2))
        if np.any(det < 0):
            raise ValueError(
                f"{name}: entry {int(np.argmax(det < 0))} is a reflection (det = -1); a mirrored "
                "hand is not a rotation - give each hand its own proper poses"
            )
        if np.any(orth > 1e-5) or np.any(np.abs(det - 1) > 1e-5):
            raise ValueError(f"{name}: expected orthonormal rotations with det 1 (atol 1e-5)")
        q = np.asarray(_pose.matrix_to_quat(jnp.asarray(R)))
        a = np.concatenate([a[:, :3, 3], q], axis=-1)
    if a.ndim != 2 or a.shape[1] != 7:
        raise ValueError(f"{name}: expected shape (M, 7) or (M, 3, 4) / (M, 4, 4), got {a.shape}")
    if count is not None and a.shape[0] != count:
        raise ValueError(f"{name}: expected {count} poses, got {a.shape[0]}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: expected finite values")
    _quat_check(a[:, 3:], name)
    return a


@pytree_dataclass
class HandSkeletonRef:
    """Ordered list of unique :class:`HandJoint` ids: the segments an :class:`LBS` addresses.

    ``joints`` is static (a tuple of ints). ``NUM_JOINTS`` and ids outside ``[0, 26)`` are
    rejected, as are duplicates.
    """

    joints: tuple = static_field(())

    def __post_init__(self):
        ids = []
        for i, j in enumerate(self.joints):
            try:
                v = int(j)
                exact = isinstance(j, (int, np.integer)) or float(j) == v
            except (TypeError, ValueError):
                exact = False
            if not exact or isinstance(j, bool):
                raise TypeError(
                    f"HandSkeletonRef.joints[{i}]: expected an int joint id, got {j!r}"
                ) from None
            if v == NUM_JOINTS:
                raise ValueError(
                    f"HandSkeletonRef.joints[{i}]: NUM_JOINTS ({NUM_JOINTS}) is a count, not a joint"
                )
            if not 0 <= v < NUM_JOINTS:
                raise ValueError(f"HandSkeletonRef.joints[{i}]: expected an id in [0, 26), got {v}")
            ids.append(v)
        if len(ids) == 0:
            raise ValueError("HandSkeletonRef.joints: expected at least one joint")
        if len(set(ids)) != len(ids):
            dup = next(v for v in ids if ids.count(v) > 1)
            raise ValueError(
                f"HandSkeletonRef.joints: duplicate joint id {dup} ({HandJoint(dup).name})"
            )
        object.__setattr__(self, "joints", tuple(ids))

    def __len__(self):
        return len(self.joints)

    def index(self, joint) -> int:
        """Segment index of a joint id."""
        return self.joints.index(int(joint))


@pytree_dataclass
class LBS:
    """Linear-blend-skinning metadata of ``N`` taxels on ``J`` segments.

    Attributes:
      segment_bind_poses: ``[J, 7]`` bind pose of each segment in the wrist root frame.
      taxel_bind_poses: ``[N, 7]`` bind pose of each taxel in the wrist root frame (+Z = outward
        surface normal, +X = calibrated tangent).
      weights: ``[N, 4]`` non-negative, finite, each row summing to one within 1e-5.
      segment_indices: ``[N, 4]`` int, indices into the segment list (static; every slot must be
        valid, zero-weight slots included). Rigid attachment: weights ``(1, 0, 0, 0)`` and the
        same index in all four slots.

    Poses may also be given as proper ``[M, 3, 4]`` / ``[M, 4, 4]`` matrices (a reflection is an
    error). Validation happens here, on the host.
    """

    segment_bind_poses: Array
    taxel_bind_poses: Array
    weights: Array
    segment_indices: _Frozen = static_field(None)

    def __post_init__(self):
        B = _poses_from(self.segment_bind_poses, "LBS.segment_bind_poses")
        T = _poses_from(self.taxel_bind_poses, "LBS.taxel_bind_poses")
        J, N = B.shape[0], T.shape[0]
        w = np.asarray(self.weights, dtype=float)
        if w.shape != (N, 4):
            raise ValueError(f"LBS.weights: expected shape ({N}, 4), got {w.shape}")
        if not np.all(np.isfinite(w)):
            raise ValueError(
                f"LBS.weights: expected finite values (taxel {int(np.argmax(~np.isfinite(w).all(1)))})"
            )
        if np.any(w < 0):
            raise ValueError(
                f"LBS.weights: expected non-negative weights (taxel {int(np.argmax((w < 0).any(1)))})"
            )
        s = w.sum(1)
        if np.any(np.abs(s - 1.0) > 1e-5):
            k = int(np.argmax(np.abs(s - 1.0)))
            raise ValueError(
                f"LBS.weights: each row must sum to 1 within 1e-5; taxel {k} sums to {s[k]:.8g}"
            )
        idx = self.segment_indices
        idx = idx.a if isinstance(idx, _Frozen) else np.asarray(idx)
        if idx.shape != (N, 4) or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(
                f"LBS.segment_indices: expected an int array of shape ({N}, 4), got {idx.shape} {idx.dtype}"
            )
        if np.any(idx < 0) or np.any(idx >= J):
            t, k = np.argwhere((idx < 0) | (idx >= J))[0]
            raise ValueError(
                f"LBS.segment_indices: taxel {t} slot {k} is {idx[t, k]}, outside [0, {J}) "
                "(every slot must be valid, zero-weight slots included)"
            )
        dt = jnp.result_type(float)
        object.__setattr__(self, "segment_bind_poses", jnp.asarray(B, dt))
        object.__setattr__(self, "taxel_bind_poses", jnp.asarray(T, dt))
        object.__setattr__(self, "weights", jnp.asarray(w, dt))
        object.__setattr__(self, "segment_indices", _Frozen(idx.astype(np.int32)))

    @property
    def n_taxels(self) -> int:
        return self.taxel_bind_poses.shape[0]

    @property
    def n_segments(self) -> int:
        return self.segment_bind_poses.shape[0]

    @property
    def indices(self) -> np.ndarray:
        """``[N, 4]`` int32 segment indices (read-only numpy)."""
        return self.segment_indices.a

    @property
    def rigid(self) -> np.ndarray:
        """``[N]`` bool: rigidly attached taxels (weights (1, 0, 0, 0), one index in every slot)."""
        w = np.asarray(self.weights)
        i = self.indices
        return (np.abs(w[:, 0] - 1.0) <= 1e-5) & np.all(i == i[:, :1], axis=1)


@pytree_dataclass
class TactileMetadata:
    """Static description of a tactile stream: ``geometry_mapping`` (:class:`LBS`) and
    ``segment_source`` (:class:`HandSkeletonRef`). Validated as the contract states (segment
    counts agree; if WRIST is a segment, its bind pose is the identity)."""

    geometry_mapping: LBS
    segment_source: HandSkeletonRef

    def __post_init__(self):
        validate_metadata(self)

    @property
    def n_taxels(self) -> int:
        return self.geometry_mapping.n_taxels


def validate_metadata(meta: TactileMetadata, atol: float = 1e-5) -> None:
    """Raise ``ValueError``/``TypeError`` naming the field unless ``meta`` satisfies the contract."""
    if not isinstance(meta.geometry_mapping, LBS):
        raise TypeError(
            f"TactileMetadata.geometry_mapping: expected LBS, got {type(meta.geometry_mapping).__name__}"
        )
    if not isinstance(meta.segment_source, HandSkeletonRef):
        raise TypeError(
            f"TactileMetadata.segment_source: expected HandSkeletonRef, got {type(meta.segment_source).__name__}"
        )
    J = meta.geometry_mapping.n_segments
    if len(meta.segment_source) != J:
        raise ValueError(
            f"TactileMetadata.segment_source: {len(meta.segment_source)} joints but the LBS has "
            f"{J} segment bind poses"
        )
    if int(HandJoint.WRIST) in meta.segment_source.joints:
        j = meta.segment_source.index(HandJoint.WRIST)
        B = np.asarray(meta.geometry_mapping.segment_bind_poses[j])
        ident = np.abs(B[:3]).max() <= atol and abs(abs(B[6]) - 1.0) <= atol
        if not ident:
            raise ValueError(
                "TactileMetadata.geometry_mapping.segment_bind_poses: WRIST is the skeleton root; "
                f"its bind pose (segment {j}) must be the identity, got {B}"
            )


# ----------------------------------------------------------------------------- skinning


def root_from_base(T_base_wrist: Array, T_base_joints: Array) -> Array:
    """``T_root_joint = inverse(T_base_wrist) * T_base_joint`` (rotation and translation).

    Args:
      T_base_wrist: ``[..., 7]`` wrist pose in the tracker's base space (e.g. STAGE).
      T_base_joints: ``[..., J, 7]`` joint poses in the same base space.
    Returns:
      ``[..., J, 7]`` joint poses in the current wrist root frame.
    """
    return _pose.compose(_pose.inverse(T_base_wrist)[..., None, :], T_base_joints)


def _segment_transforms(lbs: LBS, T_root_joints: Array) -> Array:
    """``M_j = C_j * B_j^-1``: ``[J, 7]`` maps bind-configuration points to current points."""
    return _pose.compose(
        T_root_joints, _pose.inverse(lbs.segment_bind_poses.astype(T_root_joints.dtype))
    )


def skin_positions(lbs: LBS, T_root_joints: Array, taxel_bind_poses: Array | None = None) -> Array:
    """Current taxel positions ``[N, 3]`` (m, wrist root frame).

    ``p = sum_k w_k C[j_k] B[j_k]^-1 p_bind``. ``T_root_joints [J, 7]`` are the current poses of
    the skeleton's segments (in ``HandSkeletonRef`` order) in the current wrist frame; identity
    joint poses equal to the bind poses return the bind positions. ``taxel_bind_poses``
    overrides ``lbs.taxel_bind_poses`` (to differentiate with respect to them).
    """
    tb = lbs.taxel_bind_poses if taxel_bind_poses is None else taxel_bind_poses
    M = _segment_transforms(lbs, T_root_joints)  # [J, 7]
    Mk = M[jnp.asarray(lbs.indices)]  # [N, 4, 7]
    p = _pose.apply(Mk, tb[:, None, :3].astype(Mk.dtype))  # [N, 4, 3]
    return jnp.sum(lbs.weights.astype(p.dtype)[..., None] * p, axis=1)


def skin_frames(lbs: LBS, T_root_joints: Array, taxel_bind_poses: Array | None = None) -> Array:
    """Current taxel frames ``T_root_taxel [N, 7]`` (wrist root frame).

    Position: :func:`skin_positions`. Orientation: for a rigid taxel exactly
    ``C[j] B[j]^-1 R_bind``; for a blended taxel the weighted quaternion average of the
    per-segment rotations ``q_k = q(C[j_k] B[j_k]^-1) q_bind``, each flipped into the hemisphere
    of the first, normalised (the rotation nearest the blend for the small spreads of a skin;
    differentiable everywhere, unlike an SVD polar decomposition whose gradient is singular at
    the rigid case).
    """
    tb = lbs.taxel_bind_poses if taxel_bind_poses is None else taxel_bind_poses
    M = _segment_transforms(lbs, T_root_joints)
    Mk = M[jnp.asarray(lbs.indices)]  # [N, 4, 7]
    q = _pose.quat_mul(Mk[..., 3:], tb[:, None, 3:].astype(Mk.dtype))  # [N, 4, 4]
    sgn = jnp.where(jnp.sum(q * q[:, :1], -1, keepdims=True) < 0, -1.0, 1.0)
    qb = jnp.sum(lbs.weights.astype(q.dtype)[..., None] * sgn * q, axis=1)
    qb = _pose.quat_normalize(qb)
    return jnp.concatenate([skin_positions(lbs, T_root_joints, tb), qb], axis=-1)


def positions_in_base(T_base_wrist: Array, p_root: Array) -> Array:
    """``p_base = T_base_wrist * p_root`` for points ``[N, 3]`` in the wrist root frame."""
    return _pose.apply(T_base_wrist[None], p_root)


def forces_to_root(T_root_taxel: Array, force_taxel: Array) -> Array:
    """Rotate per-taxel forces ``[N, 3]`` (N, taxel axes, +z outward) into the root frame.

    Forces are free vectors: rotation only, no translation.
    """
    return _pose.rotate(T_root_taxel, force_taxel)
