"""Default right and left hands (26 OpenXR joints) and a default glove layout on them.

Bind poses are in the wrist root frame of each hand (OpenXR axes: +Y out of the back of the
hand, +Z from the middle metacarpal toward the forearm, +X = Y x Z; finger joints: +Z along the
bone away from the fingertip, +Y toward the nail side). The open, flat bind configuration has
the fingers along -Z. Both hands are proper right-handed rigs: the left hand's positions are
the right hand's mirrored in x, and its rotations are the mirrored rotations conjugated back
to proper ones (``S R S`` with ``S = diag(-1, 1, 1)``), never reflections.

Bone lengths (m), adult hand of ~19 cm, after the ranges of hand anthropometry tables
(metacarpal / proximal / intermediate / distal):

======== ========== ======== ============ ======
finger   metacarpal proximal intermediate distal
======== ========== ======== ============ ======
thumb    0.046      0.032    (none)       0.027
index    0.068      0.040    0.023        0.019
middle   0.065      0.045    0.027        0.020
ring     0.059      0.042    0.026        0.020
little   0.054      0.033    0.018        0.018
======== ========== ======== ============ ======

(the thumb's "metacarpal" row is its metacarpal bone, its proximal and distal phalanges; it
has no intermediate joint in OpenXR.)
"""

from __future__ import annotations

import numpy as np

from .skinning import LBS, NUM_JOINTS, HandJoint, HandSkeletonRef, TactileMetadata

__all__ = ["BONE_LENGTHS", "default_hand", "default_glove", "write_default_data"]

#: Bone lengths in m: metacarpal, proximal, intermediate, distal (thumb: no intermediate).
BONE_LENGTHS = {
    "thumb": (0.046, 0.032, 0.0, 0.027),
    "index": (0.068, 0.040, 0.023, 0.019),
    "middle": (0.065, 0.045, 0.027, 0.020),
    "ring": (0.059, 0.042, 0.026, 0.020),
    "little": (0.054, 0.033, 0.018, 0.018),
}

# right hand, wrist frame: metacarpal bases near the wrist and knuckle x offsets (thumb side -x)
_BASE_X = {"index": -0.012, "middle": 0.0, "ring": 0.011, "little": 0.021}
_KNUCKLE_X = {"index": -0.023, "middle": 0.0, "ring": 0.020, "little": 0.037}
_FIRST = {"thumb": 2, "index": 6, "middle": 11, "ring": 16, "little": 21}


def _frame(z_axis, y_hint):
    z = np.asarray(z_axis, float)
    z = z / np.linalg.norm(z)
    y = np.asarray(y_hint, float)
    y = y - z * (y @ z)
    y = y / np.linalg.norm(y)
    x = np.cross(y, z)
    return np.stack([x, y, z], axis=1)  # columns x, y, z


def _quat(R):
    from . import pose

    return np.asarray(pose.matrix_to_quat(R))


def _right_hand_matrices():
    """``[26, 3, 3]`` rotations and ``[26, 3]`` positions of the right hand's joints."""
    Rs = np.tile(np.eye(3), (NUM_JOINTS, 1, 1))
    ps = np.zeros((NUM_JOINTS, 3))
    ps[HandJoint.PALM] = [0.0, 0.0, -0.04]
    for name in ("index", "middle", "ring", "little"):
        L = BONE_LENGTHS[name]
        base = np.array([_BASE_X[name], 0.0, -0.01])
        knuckle = np.array([_KNUCKLE_X[name], 0.0, -0.01 - L[0]])
        d_meta = knuckle - base
        j = _FIRST[name]
        ps[j], Rs[j] = base, _frame(-d_meta, [0, 1, 0])
        splay = np.array([(_KNUCKLE_X[name] - _BASE_X[name]) * 0.3, 0.0, -1.0])
        d = splay / np.linalg.norm(splay)
        p = knuckle
        for k, length in enumerate((L[1], L[2], L[3], 0.0)):
            ps[j + 1 + k] = p
            Rs[j + 1 + k] = _frame(-d, [0, 1, 0])
            p = p + length * d
    # thumb: from the wrist's thumb side toward -x and -z, nail facing out (-x) and up
    L = BONE_LENGTHS["thumb"]
    d = np.array([-0.55, -0.25, -0.80])
    d = d / np.linalg.norm(d)
    y_hint = np.array([-0.6, 0.8, 0.0])
    p = np.array([-0.018, -0.008, -0.012])
    for k, length in enumerate((L[0], L[1], L[3], 0.0)):
        ps[2 + k] = p
        Rs[2 + k] = _frame(-d, y_hint)
        p = p + length * d
    Rs[HandJoint.PALM] = Rs[HandJoint.MIDDLE_METACARPAL]
    return Rs, ps


def default_hand(side: str = "right") -> np.ndarray:
    """Bind poses ``[26, 7]`` of the 26 OpenXR joints (HandJoint order), wrist root frame.

    ``side`` is ``"right"`` or ``"left"``. Quaternions (x, y, z, w). WRIST is the identity.
    """
    if side not in ("right", "left"):
        raise ValueError(f"side: expected 'right' or 'left', got {side!r}")
    Rs, ps = _right_hand_matrices()
    if side == "left":
        S = np.diag([-1.0, 1.0, 1.0])
        Rs = S @ Rs @ S
        ps = ps * np.array([-1.0, 1.0, 1.0])
    q = np.stack([_quat(R) for R in Rs])
    return np.concatenate([ps, q], axis=1)


def _pad_taxels(T_joint, nx, ny, half_x, z_range, y_off):
    """Taxel bind poses ``[nx*ny, 7]`` of a pad on the palmar (-y) side of a joint frame."""
    from . import pose

    xs = np.linspace(-half_x, half_x, nx)
    zs = np.linspace(z_range[0], z_range[1], ny)
    R_tax = np.stack([[1.0, 0, 0], [0, 0, 1.0], [0, -1.0, 0]], axis=1)  # x_t=x, y_t=z, z_t=-y
    q_tax = _quat(R_tax)
    local = np.array([[x, y_off, z, *q_tax] for z in zs for x in xs])
    return np.asarray(pose.compose(np.asarray(T_joint)[None], local))


def default_glove(side: str = "right") -> TactileMetadata:
    """A 96-taxel glove: five 4 x 4 fingertip pads (rigid on the DISTAL joints, 80 taxels, the
    layout of a 5 x 4 x 4 glove) and a 4 x 4 palm pad on PALM whose knuckle row is blended
    with the PROXIMAL joints (weights 0.7 / 0.3).

    Taxel frames: +Z the outward (palmar) surface normal, +X along the joint's x axis.
    Segments: all 26 joints in HandJoint order. Positions in m, wrist root frame.
    """
    B = default_hand(side)
    taxels, idx, w = [], [], []
    for name in ("thumb", "index", "middle", "ring", "little"):
        j = _FIRST[name] + (2 if name == "thumb" else 3)  # DISTAL joint
        t = _pad_taxels(B[j], 4, 4, 0.0045, (-0.004, -0.016), -0.006)
        taxels.append(t)
        idx += [[j] * 4] * 16
        w += [[1.0, 0, 0, 0]] * 16
    palm = _pad_taxels(B[HandJoint.PALM], 4, 4, 0.027, (0.02, -0.035), -0.012)
    taxels.append(palm)
    prox = [
        HandJoint.INDEX_PROXIMAL,
        HandJoint.MIDDLE_PROXIMAL,
        HandJoint.RING_PROXIMAL,
        HandJoint.LITTLE_PROXIMAL,
    ]
    for row in range(4):
        for col in range(4):
            if row == 3:
                idx.append([HandJoint.PALM, prox[col], HandJoint.PALM, HandJoint.PALM])
                w.append([0.7, 0.3, 0.0, 0.0])
            else:
                idx.append([HandJoint.PALM] * 4)
                w.append([1.0, 0, 0, 0])
    lbs = LBS(
        segment_bind_poses=B,
        taxel_bind_poses=np.concatenate(taxels),
        weights=np.asarray(w),
        segment_indices=np.asarray(idx, dtype=np.int32),
    )
    return TactileMetadata(lbs, HandSkeletonRef(tuple(range(NUM_JOINTS))))


def write_default_data(directory) -> list:
    """Write ``default_glove_{right,left}.json`` (metadata, see :mod:`difftaxel.io`) into
    ``directory``; returns the paths. ``python -m difftaxel.hands data`` regenerates ``data/``."""
    import json
    import os

    from .io import metadata_to_dict

    os.makedirs(directory, exist_ok=True)
    paths = []
    for side in ("right", "left"):
        p = os.path.join(directory, f"default_glove_{side}.json")
        with open(p, "w") as fh:
            json.dump(metadata_to_dict(default_glove(side)), fh, indent=1)
            fh.write("\n")
        paths.append(p)
    return paths


if __name__ == "__main__":  # pragma: no cover
    import sys

    print("\n".join(write_default_data(sys.argv[1] if len(sys.argv) > 1 else "data")))
