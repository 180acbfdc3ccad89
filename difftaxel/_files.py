"""Writes that cannot lose an existing file, and output paths checked before long work.

Every file the library or the command writes goes through :func:`atomic_write`: the content is
written to a temporary file beside the target, flushed to disk, then renamed over it
(``os.replace``, atomic on POSIX and Windows). A failure at any point leaves the target as it
was. :func:`check_output` refuses, before any work, an output that is a folder, lies in a folder
that does not exist or cannot be written, or is the same file as an input.

A set of outputs that belong together (the demo's results, data and plots) is written into a
staging folder (:func:`staging_dir`) and moved into place at the end (:func:`publish`), so an
interrupted run leaves the previous set whole, never new results beside stale plots.

The command stops at once on Ctrl-C (:func:`stop_on_interrupt`): a watcher thread woken by the
signal removes the temporary files in flight and exits with status 130, waiting only for a
:func:`critical` section (the moves into place) to end. No ``KeyboardInterrupt`` is raised
into library code, where an import or a compiler call could swallow it or crash on teardown.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading

__all__ = [
    "atomic_write",
    "check_output",
    "check_output_dir",
    "critical",
    "publish",
    "staging_dir",
    "stop_on_interrupt",
]

#: temporary files and folders in flight: removed if the command is interrupted
_IN_FLIGHT: set[str] = set()
#: held while outputs move into place: an interrupt waits for it
_CRITICAL = threading.RLock()


@contextlib.contextmanager
def critical():
    """A section an interrupt does not cut short (it exits right after)."""
    with _CRITICAL:
        yield


def _remove(p: str) -> None:
    with contextlib.suppress(OSError):
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            os.unlink(p)


def stop_on_interrupt(message: str, status: int = 130) -> None:
    """On SIGINT: remove the temporary files in flight, print ``message`` to stderr and exit
    with ``status`` at once (``os._exit``: no interpreter teardown under running XLA threads),
    after any :func:`critical` section. Call once, from the main thread, before heavy imports."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.signal(signal.SIGINT, lambda *_: None)  # the watcher acts; nothing is raised
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)

    def watch():
        os.read(r, 1)
        _CRITICAL.acquire()  # a move into place finishes first; none starts after
        for p in list(_IN_FLIGHT):
            _remove(p)
        with contextlib.suppress(OSError):
            sys.stderr.flush()
            os.write(2, (message + "\n").encode())
        os._exit(status)

    threading.Thread(target=watch, name="difftaxel-interrupt", daemon=True).start()


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
    _IN_FLIGHT.add(tmp)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        with critical():
            os.replace(tmp, p)
            _IN_FLIGHT.discard(tmp)
    except BaseException as e:
        _IN_FLIGHT.discard(tmp)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename == tmp:  # name the target, not its temporary
            raise type(e)(e.errno, e.strerror, p) from None
        raise


@contextlib.contextmanager
def staging_dir(out_dir: str):
    """A fresh hidden folder inside ``out_dir`` to write a set of outputs into; removed on any
    failure or interrupt (the previous outputs stay as they were). Move its files into place
    with :func:`publish`."""
    tmp = tempfile.mkdtemp(prefix=".staging-", dir=out_dir)
    _IN_FLIGHT.add(tmp)
    try:
        yield tmp
    finally:
        _remove(tmp)
        _IN_FLIGHT.discard(tmp)


def publish(staging: str, out_dir: str, names) -> list[str]:
    """Move every file of ``staging`` into ``out_dir`` (each rename atomic, the set in one
    :func:`critical` section) and remove the files of ``names`` (the set's other members) that
    this run did not write, so that no stale one stays beside the new ones. Returns the paths
    written."""
    written = []
    with critical():
        made = set(os.listdir(staging))
        for name in sorted(made):
            dst = os.path.join(out_dir, name)
            os.replace(os.path.join(staging, name), dst)
            written.append(dst)
        for name in names:
            if name not in made and os.path.isfile(os.path.join(out_dir, name)):
                os.unlink(os.path.join(out_dir, name))
    return written
