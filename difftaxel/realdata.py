"""Readers for real public hand data: a skinned glTF hand rig and MRTK articulated hand poses.

* :func:`load_gltf_skin` reads a binary glTF (``.glb``) skinned hand (e.g. the WebXR generic
  hand): joint names and rest poses, mesh vertices, normals, ``JOINTS_0`` / ``WEIGHTS_0``.
* :func:`gltf_lbs` turns it into an :class:`~difftaxel.skinning.LBS` taxel skin: chosen mesh
  vertices become taxels (+Z = vertex normal), joints map to OpenXR ids by name, everything
  expressed in the wrist root frame.
* :func:`load_mrtk_pose` reads an MRTK ``ArticulatedHandPose_*.json`` (Unity's left-handed
  frame, right hand) and converts it to a right-handed OpenXR frame: positions
  ``(x, y, z) -> (x, y, -z)``, quaternions ``(x, y, z, w) -> (-x, -y, z, w)`` (normalised),
  i.e. ``R -> S R S`` with ``S = diag(1, 1, -1)``; item 0 (``None``) is skipped and WRIST/PALM
  are swapped back into OpenXR order.

Only numpy and the standard library are used (a GLB is a JSON chunk plus a binary chunk).
"""

from __future__ import annotations

import json
import os
import struct
from typing import NamedTuple

import numpy as np

from .skinning import LBS, NUM_JOINTS, HandJoint, HandSkeletonRef, TactileMetadata

__all__ = [
    "GltfSkin",
    "load_gltf_skin",
    "gltf_lbs",
    "load_mrtk_pose",
    "WEBXR_TO_OPENXR",
    "MRTK_TO_OPENXR",
]

_COMPONENT = {
    5120: np.int8,
    5121: np.uint8,
    5122: np.int16,
    5123: np.uint16,
    5125: np.uint32,
    5126: np.float32,
}
_NCOMP = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT4": 16}


def _webxr_names():
    names = [
        "wrist",
        "thumb-metacarpal",
        "thumb-phalanx-proximal",
        "thumb-phalanx-distal",
        "thumb-tip",
    ]
    for f in ("index-finger", "middle-finger", "ring-finger", "pinky-finger"):
        names += [
            f"{f}-metacarpal",
            f"{f}-phalanx-proximal",
            f"{f}-phalanx-intermediate",
            f"{f}-phalanx-distal",
            f"{f}-tip",
        ]
    return names


#: WebXR joint name -> OpenXR HandJoint id (WebXR index i = OpenXR i + 1; no PALM).
WEBXR_TO_OPENXR = {n: i + 1 for i, n in enumerate(_webxr_names())}

_MRTK = [
    "Wrist",
    "Palm",
    "ThumbMetacarpalJoint",
    "ThumbProximalJoint",
    "ThumbDistalJoint",
    "ThumbTip",
]
for _f in ("Index", "Middle", "Ring", "Pinky"):
    _MRTK += [f"{_f}Metacarpal", f"{_f}Knuckle", f"{_f}MiddleJoint", f"{_f}DistalJoint", f"{_f}Tip"]
#: MRTK TrackedHandJoint name -> OpenXR HandJoint id.
MRTK_TO_OPENXR = {n: (1 if n == "Wrist" else 0 if n == "Palm" else i) for i, n in enumerate(_MRTK)}


class GltfSkin(NamedTuple):
    """A skinned mesh read from a GLB (model frame, m).

    ``joint_names [K]``, ``joint_rest [K, 4, 4]`` (rest pose of each joint node, model frame),
    ``inverse_bind [K, 4, 4]``, ``vertices [V, 3]``, ``normals [V, 3]``, ``joints [V, 4]``
    (indices into ``joint_names``), ``weights [V, 4]``.
    """

    joint_names: list
    joint_rest: np.ndarray
    inverse_bind: np.ndarray
    vertices: np.ndarray
    normals: np.ndarray
    joints: np.ndarray
    weights: np.ndarray


def _trs(node) -> np.ndarray:
    from . import pose

    M = np.eye(4)
    if "matrix" in node:
        return np.asarray(node["matrix"], float).reshape(4, 4).T
    q = np.asarray(node.get("rotation", [0, 0, 0, 1]), float)  # glTF stores x, y, z, w
    q = q / np.linalg.norm(q)
    s = np.asarray(node.get("scale", [1, 1, 1]), float)
    M[:3, :3] = np.asarray(pose.quat_to_matrix(q)) * s[None, :]
    M[:3, 3] = node.get("translation", [0, 0, 0])
    return M


def load_gltf_skin(path) -> GltfSkin:
    """Read the first skinned primitive of a GLB file (see :class:`GltfSkin`)."""
    with open(os.fspath(path), "rb") as fh:
        data = fh.read()
    magic, version, _ = struct.unpack_from("<III", data, 0)
    if magic != 0x46546C67 or version != 2:
        raise ValueError(f"path: not a glTF 2.0 binary (magic {magic:#x}, version {version})")
    off, js, binary = 12, None, None
    while off < len(data):
        length, ctype = struct.unpack_from("<II", data, off)
        chunk = data[off + 8 : off + 8 + length]
        if ctype == 0x4E4F534A:
            js = json.loads(chunk)
        elif ctype == 0x004E4942:
            binary = chunk
        off += 8 + length
    if js is None or binary is None:
        raise ValueError("path: GLB without a JSON or BIN chunk")

    def accessor(i):
        a = js["accessors"][i]
        bv = js["bufferViews"][a["bufferView"]]
        dt = np.dtype(_COMPONENT[a["componentType"]])
        nc = _NCOMP[a["type"]]
        start = bv.get("byteOffset", 0) + a.get("byteOffset", 0)
        stride = bv.get("byteStride", 0) or dt.itemsize * nc
        raw = np.frombuffer(
            binary, np.uint8, count=stride * (a["count"] - 1) + dt.itemsize * nc, offset=start
        )
        rows = np.lib.stride_tricks.as_strided(raw, (a["count"], dt.itemsize * nc), (stride, 1))
        return np.ascontiguousarray(rows).view(dt).reshape(a["count"], nc)

    skin = js["skins"][0]
    node = next(n for n in js["nodes"] if "skin" in n and "mesh" in n)
    prim = js["meshes"][node["mesh"]]["primitives"][0]["attributes"]
    names = [js["nodes"][j].get("name", str(j)) for j in skin["joints"]]
    rest = np.stack([_trs(js["nodes"][j]) for j in skin["joints"]])
    ibm = accessor(skin["inverseBindMatrices"]).reshape(-1, 4, 4).transpose(0, 2, 1)
    w = accessor(prim["WEIGHTS_0"]).astype(float)
    if js["accessors"][prim["WEIGHTS_0"]].get("normalized") and w.max() > 1:
        w = w / np.iinfo(_COMPONENT[js["accessors"][prim["WEIGHTS_0"]]["componentType"]]).max
    return GltfSkin(
        joint_names=names,
        joint_rest=rest,
        inverse_bind=ibm.astype(float),
        vertices=accessor(prim["POSITION"]).astype(float),
        normals=accessor(prim["NORMAL"]).astype(float),
        joints=accessor(prim["JOINTS_0"]).astype(np.int64),
        weights=w,
    )


def _pose_of(M) -> np.ndarray:
    from . import pose

    R = M[:3, :3]
    return np.concatenate([M[:3, 3], np.asarray(pose.matrix_to_quat(R))])


def gltf_lbs(skin: GltfSkin, vertex_ids) -> TactileMetadata:
    """Tactile metadata whose taxels are the rig's vertices ``vertex_ids``.

    Segments: the rig's joints that exist in OpenXR, in OpenXR id order (WebXR names, PALM
    absent). Segment bind poses are the joints' rest poses and taxel bind poses the vertices
    (with +Z = vertex normal), both moved into the wrist root frame
    ``T_wrist_x = inverse(T_model_wrist) T_model_x``. Taxel weights are the vertex weights
    (renormalised; zero-weight slots point at the first used segment).
    """
    vid = np.asarray(vertex_ids, dtype=int)
    ids = [WEBXR_TO_OPENXR.get(n) for n in skin.joint_names]
    if any(i is None for i in ids):
        bad = [n for n, i in zip(skin.joint_names, ids) if i is None]
        raise ValueError(f"skin.joint_names: unknown WebXR joint names {bad}")
    order = np.argsort(ids)
    seg_of_joint = np.empty(len(ids), int)
    seg_of_joint[order] = np.arange(len(ids))
    wrist = skin.joint_names.index("wrist")
    T_wm = np.linalg.inv(_orthonormal(skin.joint_rest[wrist]))
    seg = np.stack([_pose_of(T_wm @ _orthonormal(skin.joint_rest[k])) for k in order])
    seg[0] = [0, 0, 0, 0, 0, 0, 1]  # WRIST: exactly the identity (rounding aside)
    taxels = []
    for v in vid:
        z = skin.normals[v] / np.linalg.norm(skin.normals[v])
        x = np.cross([0.0, 1.0, 0.0], z)
        if np.linalg.norm(x) < 1e-6:
            x = np.cross([1.0, 0.0, 0.0], z)
        x /= np.linalg.norm(x)
        M = np.eye(4)
        M[:3, :3] = np.stack([x, np.cross(z, x), z], axis=1)
        M[:3, 3] = skin.vertices[v]
        taxels.append(_pose_of(T_wm @ M))
    w = skin.weights[vid].copy()
    w = w / w.sum(1, keepdims=True)
    idx = seg_of_joint[skin.joints[vid]]
    first = idx[np.arange(len(vid)), np.argmax(w, axis=1)]
    idx = np.where(w > 0, idx, first[:, None])
    lbs = LBS(
        segment_bind_poses=seg,
        taxel_bind_poses=np.stack(taxels),
        weights=w,
        segment_indices=idx.astype(np.int32),
    )
    return TactileMetadata(lbs, HandSkeletonRef(tuple(int(ids[k]) for k in order)))


def _orthonormal(M):
    U, _, Vt = np.linalg.svd(M[:3, :3])
    out = M.copy()
    out[:3, :3] = U @ Vt
    return out


def load_mrtk_pose(path) -> np.ndarray:
    """Joint poses ``[26, 7]`` (OpenXR order, right-handed OpenXR frame, m, x y z qx qy qz qw) of
    an MRTK articulated hand pose file (a right hand)."""
    with open(os.fspath(path)) as fh:
        items = json.load(fh)["items"]
    out = np.zeros((NUM_JOINTS, 7))
    seen = set()
    for it in items:
        name = it["joint"]
        if name == "None":
            continue
        if name not in MRTK_TO_OPENXR:
            raise ValueError(f"path: unknown MRTK joint {name!r}")
        j = MRTK_TO_OPENXR[name]
        p, r = it["pose"]["position"], it["pose"]["rotation"]
        q = np.array([-r["x"], -r["y"], r["z"], r["w"]], float)
        out[j] = [p["x"], p["y"], -p["z"], *(q / np.linalg.norm(q))]
        seen.add(j)
    if len(seen) != NUM_JOINTS:
        missing = sorted(set(range(NUM_JOINTS)) - seen)
        raise ValueError(f"path: missing joints {[HandJoint(m).name for m in missing]}")
    return out
