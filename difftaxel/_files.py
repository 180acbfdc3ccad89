"""Writes that cannot lose an existing file, and output paths checked before long work.

Every file the library or the command writes goes through :func:`atomic_write`: the content is
written to a temporary file beside the target, flushed to disk, then renamed over it
(``os.replace``, atomic on POSIX and Windows). A failure at any point leaves the target as it
was. :func:`check_output` refuses, before any work, an output that is a folder, lies in a folder
that does not exist or cannot be written, or is the same file as an input.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

__all__ = ["atomic_write", "check_output", "check_output_dir"]


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output(path, what: str = "output", inputs=()) -> str:
    """Validate an output file path before any long work; returns it as a ``str``.

    Raises ``ValueError`` naming ``what`` and the path when the path is a folder, its folder is
    missing or not writable, or it is one of ``inputs`` (an output never overwrites an input).
    """
    p = os.fspath(path)
    if os.path.isdir(p):
        raise ValueError(f"{what} {p}: is a folder; expected a file path")
    folder = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(folder):
        raise ValueError(f"{what} {p}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{what} {p}: folder {folder} is not writable")
    for i in inputs:
        if i is not None and os.path.exists(p) and _same_file(p, os.fspath(i)):
            raise ValueError(f"{what} {p}: is the input file {os.fspath(i)}; choose another path")
    return p


def check_output_dir(path, what: str = "output folder") -> str:
    """Validate (and create) an output folder before any long work; returns it as a ``str``."""
    p = os.fspath(path)
    if os.path.exists(p) and not os.path.isdir(p):
        raise ValueError(f"{what} {p}: exists and is not a folder")
    try:
        os.makedirs(p, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{what} {p}: cannot be created ({e.strerror})") from None
    if not os.access(p, os.W_OK):
        raise ValueError(f"{what} {p}: is not writable")
    return p


def atomic_write(path, write, mode: str = "wb") -> None:
    """Write ``path`` through ``write(fh)`` so that no failure can lose an existing file.

    ``write`` receives an open temporary file beside ``path`` (``mode`` ``"wb"`` or ``"w"``);
    once it returns, the file is flushed, synced and renamed over ``path``. On any exception the
    temporary file is removed and ``path`` is untouched.
    """
    p = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(p))
    if os.path.isdir(p):
        raise IsADirectoryError(21, "is a folder, expected a file path", p)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(p) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename == tmp:  # name the target, not its temporary
            raise type(e)(e.errno, e.strerror, p) from None
        raise
