"""Writing a file atomically: the one implementation behind ``save`` (a
checkpoint) and ``plotting.save_figure`` (an image).

The content goes to a temporary file next to the target (same directory, so
the rename stays on one file system), which is flushed and fsync'ed, then
``os.replace``-d over the target: a reader sees the old file or the new one,
never half of one, and Ctrl-C or a kill leaves the old file in place.  The
temporary file is removed on any failure; one that a killed writer left
behind (its name carries the writer's process id) is swept by the next write
to the same target."""
from __future__ import annotations

import glob
import os
import tempfile
from typing import BinaryIO, Callable, Union

PathLike = Union[str, "os.PathLike[str]"]


def write_atomically(path: PathLike, write: Callable[[BinaryIO], None]) -> str:
    """Call ``write(file)`` on a temporary binary file next to ``path``, then
    rename it over ``path``; returns the path written."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    _sweep_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)
    return path


def _temp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}.{os.getpid()}."


def _sweep_stale_temporaries(path: str) -> None:
    """Remove temporary files an earlier, killed write to ``path`` left behind
    (their names carry the writer's process id; live writers are spared)."""
    pattern = os.path.join(os.path.dirname(os.path.abspath(path)), f".{glob.escape(os.path.basename(path))}.*.tmp")
    for tmp in glob.glob(pattern):
        pid_text = os.path.basename(tmp)[len(os.path.basename(path)) + 2:].split(".", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _fsync_dir(directory: str) -> None:
    """Make the rename durable (best effort; not all systems allow it)."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
