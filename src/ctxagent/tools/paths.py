"""Where a file tool's path argument leads, and opening exactly that without following a link.

The permission gate and the file tools share one resolution (:func:`real_path`, which translates a name
as ``list_dir`` shows it before the check, never after), and the tool opens the resolved path with
:func:`open_path`: one name at a time from ``/`` with ``O_NOFOLLOW`` (``openat``), so a symlink swapped in
after the check is refused, not followed (a resolved path holds no link). This is the per-component form
of Linux's ``openat2(RESOLVE_NO_SYMLINKS)`` (5.6+), which Python has no binding for. See docs/security.md.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from pathlib import Path

from ctxagent.tools.base import ToolContext, ToolError
from ctxagent.tools.clean import mend

_SHOWN_BYTE = re.compile(r"\\x([89a-f][0-9a-f])", re.IGNORECASE)  # how list_dir shows a byte of a name
_WALK = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)  # search, not read


def locate(workdir: Path, path: str) -> Path:
    """``path`` (``~`` expanded) made absolute against ``workdir``, links not resolved. A name as
    ``list_dir`` shows it, with ``\\xff`` standing for an undecodable byte, names the file that has
    that byte when more of that path exists than of the literal one (the model copies names from
    listings; a new file in such a folder goes into it)."""
    target = (workdir / Path(path).expanduser()).absolute()
    if "\\x" not in path or os.path.lexists(target):
        return target
    raw = _SHOWN_BYTE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), path)
    candidate = (workdir / Path(raw).expanduser()).absolute()
    return candidate if _existing(candidate) > _existing(target) else target


def _existing(path: Path) -> int:
    """How many names of ``path`` exist, from the start (links not followed)."""
    return next((depth for depth in range(len(path.parts), 0, -1) if os.path.lexists(Path(*path.parts[:depth]))), 0)


def real_path(workdir: Path, path: str) -> Path:
    """:func:`locate`, then every link and ``..`` resolved (``os.path.realpath``; names that do not
    exist yet are kept as given). What the gate checks and the tool opens. Raises ``ValueError`` for
    a NUL byte."""
    return Path(os.path.realpath(locate(workdir, path)))


def target(ctx: ToolContext, name: str, path: str) -> Path:
    """The resolved path a file tool opens for its argument ``name``: the one the permission gate
    checked (``ctx.checked``), else :func:`real_path` (a call that passed no gate)."""
    return ctx.checked.get(name) or real_path(ctx.workdir, path)


def open_path(path: Path, flags: int, *, shown: str, parents: bool = False) -> int:
    """A file descriptor of the absolute resolved ``path`` opened with ``flags``, following no link
    on the way (see the module doc); ``parents``: create missing folders (0777 less the umask).

    ``shown``: the path as the model gave it, for messages. Raises ``ToolError`` when a name on the
    way is a link or not a folder, ``FileNotFoundError`` / ``IsADirectoryError`` / other
    ``OSError`` as ``os.open`` does for the last name.
    """
    if os.open not in os.supports_dir_fd:  # no openat here: the path was resolved just before
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    *folders, last = path.parts[1:] or ["."]
    fd = os.open(path.anchor or "/", _WALK)
    try:
        for part in folders:
            inner = _enter(fd, part, path, shown, parents)
            os.close(fd)
            fd = inner
        try:
            return os.open(last, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, last):
                raise ToolError(_changed(shown, path, last)) from None
            raise
    finally:
        os.close(fd)


def _enter(fd: int, name: str, path: Path, shown: str, parents: bool) -> int:
    """The folder ``name`` inside the folder ``fd`` opened (no link followed; made when missing and
    ``parents``)."""
    try:
        return os.open(name, _WALK, dir_fd=fd)
    except FileNotFoundError:
        if not parents:
            raise
    except OSError as err:
        if err.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        if _is_link(fd, name):
            raise ToolError(_changed(shown, path, name)) from None
        raise ToolError(mend(f"cannot use {shown}: {name!r} on the way to {path} is a file, not a folder")) from None
    with contextlib.suppress(FileExistsError):  # made meanwhile: entered below all the same
        os.mkdir(name, 0o777, dir_fd=fd)
    return _enter(fd, name, path, shown, parents=False)


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _changed(shown: str, path: Path, name: str) -> str:
    return mend(f"refused: {shown}: {name!r} on the way to {path} is a symbolic link or not a folder; it was "
                "not when the path was checked (file tools follow no link they were not checked through)")


def regular_file(fd: int, shown: str) -> os.stat_result:
    """The ``fstat`` of ``fd``; ``ToolError`` (``fd`` closed) when it is not a regular file."""
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        os.close(fd)
        raise ToolError(mend(f"{shown} is a directory; use list_dir to see what it holds"))
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ToolError(mend(f"{shown} is not a regular file (a device, socket or pipe); file tools read and "
                             "write regular files"))
    return info
