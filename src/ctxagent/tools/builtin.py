"""Built-in tools: run a shell command, read, write and list files.

Each tool is a :class:`Tool`; its function takes the :class:`ToolContext` and the model's
arguments. Relative paths resolve against ``ctx.workdir``. Failures the model should read are
raised as :class:`ToolError`. Large values are not cut here: the toolset offloads them.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Annotated

from pydantic import Field

from ctxagent.tools.base import Spooled, Stop, Tool, ToolContext, ToolError
from ctxagent.tools.clean import mend
from ctxagent.tools.environment import tool_environment
from ctxagent.tools.offload import as_text
from ctxagent.tools.outputs import check_range
from ctxagent.tools.paths import open_path, regular_file, target
from ctxagent.tools.preview import CHUNK_BYTES, move_lines
from ctxagent.tools.signature import function_tool

SHELL_TIMEOUT_MAX_S = 3600
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL of a timed-out process group
_POLL_S = 0.05


# --- shell -------------------------------------------------------------------------------------


def shell(ctx: ToolContext, command: str,
          timeout_s: Annotated[int, Field(ge=1, le=SHELL_TIMEOUT_MAX_S)] = 60) -> Spooled:
    """Run ``bash -c command`` in ``ctx.workdir``; stdout and stderr, merged, go straight to a
    spool file of the store (never through Python memory).

    stdin is /dev/null; the environment is ctxagent's without the run's credentials
    (:func:`ctxagent.tools.environment.tool_environment`, ``ctx.pass_env`` passing anyway); the
    command runs in its own session (process group). On timeout, or when the command leaves
    background processes behind, the whole group is killed (SIGTERM, then SIGKILL after 2 s) and the
    note says so; a spool file a detached process still writes is not the one stored
    (:func:`_away_from_writers`). Returns ``Spooled(path, note="exit code: N")``. Raises ``ToolError``
    for a bad timeout or when bash cannot start.

    Args:
        command: bash command line
        timeout_s: seconds before the command is killed
    """
    if not 0 < timeout_s <= SHELL_TIMEOUT_MAX_S:
        raise ToolError(f"timeout_s must be between 1 and {SHELL_TIMEOUT_MAX_S} seconds, not {timeout_s}")
    fd, path = ctx.store.spool()
    try:
        with ctx.stop.starting:  # registered before kill_running() can look, or started after it saw the stop
            proc = subprocess.Popen(
                ["bash", "-c", command],
                cwd=ctx.workdir,
                env=tool_environment(pass_through=ctx.pass_env),
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            ctx.stop.running.add(proc)
    except OSError as err:
        path.unlink(missing_ok=True)
        raise ToolError(mend(f"cannot run bash in {ctx.workdir}: {err}")) from err
    finally:
        os.close(fd)
    if ctx.stop.is_set():  # the run was stopped while this command started
        _kill_group(proc)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return Spooled(_away_from_writers(ctx, path), note=f"timed out after {timeout_s} s, process group killed")
    except BaseException:  # Ctrl-C reaches only us: the command runs in its own session
        _kill_group(proc)
        path.unlink(missing_ok=True)
        raise
    finally:
        ctx.stop.running.discard(proc)
    note = _exit_note(code)
    if _group_alive(proc.pid):
        _kill_group(proc)
        note += "; background processes it left running were killed"
    return Spooled(_away_from_writers(ctx, path), note=note)


def _away_from_writers(ctx: ToolContext, path: Path) -> Path:
    """``path``, or a copy of it when a process the command detached (``setsid``) still writes it:
    ``path`` is deleted, so nothing is written into the stored, redacted output after the fact."""
    if not _held_for_writing(path):
        return path
    try:
        with ctx.store.open_spool() as (target, copy), open(path, "rb") as source:
            shutil.copyfileobj(source, target, 1024 * 1024)
    finally:
        path.unlink(missing_ok=True)
    return copy


def _held_for_writing(path: Path) -> bool:
    """Whether a process has the file at ``path`` open for writing: Linux refuses a read lease
    (``fcntl(F_SETLEASE, F_RDLCK)``) on such a file, at once. Where leases are not to be had (another
    system, a file system without them), the processes' open files in ``/proc`` are looked at."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except BlockingIOError:  # EAGAIN: someone writes it
        return True
    except (AttributeError, OSError):
        return _open_in_proc(path)
    else:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return False
    finally:
        os.close(fd)


def _open_in_proc(path: Path) -> bool:
    """Whether a process this user can see has ``path`` open for writing (False without /proc)."""
    target = str(path)
    for link in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError, ValueError):
            if os.readlink(link) == target:
                info = (link.parent.parent / "fdinfo" / link.name).read_text()
                flags = int(next(line.split()[1] for line in info.splitlines() if line.startswith("flags:")), 8)
                if flags & (os.O_WRONLY | os.O_RDWR):
                    return True
    return False


def kill_running(stop: Stop) -> None:
    """Kill the process group of every shell command of the run ``stop`` belongs to (the run was
    stopped: the main thread got Ctrl-C or a signal, which a sub-agent's thread never sees). Their
    calls then end as killed. Call it after setting ``stop``: a command starting now sees it and ends itself."""
    with stop.starting:
        running = list(stop.running)
    _kill_groups(running)


def _exit_note(code: int) -> str:
    """``exit code: N``, or ``killed by signal NAME`` for a negative return code."""
    if code >= 0:
        return f"exit code: {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = str(-code)
    return f"killed by signal {name}"


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies waiting for a slow init to reap them
    do not count where ``/proc`` tells them apart)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    return not proc.is_dir() or any(_runs_in_group(stat, pgid) for stat in proc.glob("[0-9]*/stat"))


def _runs_in_group(stat: Path, pgid: int) -> bool:
    """Whether ``/proc/PID/stat`` describes a live (not zombie) process of group ``pgid``."""
    try:
        state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
    except (OSError, IndexError, ValueError):
        return False  # the process ended while we looked
    return state != "Z" and int(group) == pgid


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    _kill_groups([proc])
    proc.wait()


def _kill_groups(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM the process groups led by ``procs``, wait up to 2 s for them to go, then SIGKILL them."""
    for proc in procs:
        _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    # poll() reaps a leader, or its zombie keeps the group alive
    while time.monotonic() < deadline and any(proc.poll() is None or _group_alive(proc.pid) for proc in procs):
        time.sleep(_POLL_S)
    for proc in procs:
        _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


# --- files -------------------------------------------------------------------------------------


def read_file(ctx: ToolContext, path: str, start_line: Annotated[int, Field(ge=1)] = 1,
              end_line: int | None = None) -> str | bytes | Spooled:
    """Lines ``start_line``..``end_line`` (1-based, inclusive; None: to the end) of a file.

    A file of at most 1 MiB is read in memory: its text, or ``bytes`` when it is not UTF-8 text. A
    larger one is streamed a block (1 MiB) at a time into a spool file of the store (``Spooled``):
    memory stays a block whatever the file's size. The file is the path the permission gate checked,
    opened without following a link (tools/paths.py). Raises ``ToolError`` for a missing file, a
    directory or another file that is not regular, a link met on the way, or a bad range.

    Args:
        path: file path
        start_line: first line
        end_line: last line (default: end of file)
    """
    real = target(ctx, "path", path)
    fd = _opened(real, os.O_RDONLY | os.O_NONBLOCK, path)  # non-blocking: a FIFO is refused, not waited on
    small = regular_file(fd, path).st_size <= CHUNK_BYTES
    with os.fdopen(fd, "rb") as src:
        check_range(start_line, end_line)
        count = move_lines(src, start_line - 1)
        if start_line > 1 and not src.peek(1):
            raise ToolError(mend(f"start_line {start_line} is past the end: {path} has {count} lines"))
        lines = None if end_line is None else end_line - start_line + 1
        if small:  # a spool file would cost more than the bytes
            data = io.BytesIO()
            move_lines(src, lines, data)
            text = as_text(data.getvalue())
            return data.getvalue() if text is None else text
        with ctx.store.open_spool() as (dst, spool):
            move_lines(src, lines, dst)
    return Spooled(spool)


def _opened(real: Path, flags: int, path: str, *, parents: bool = False, kind: str = "file") -> int:
    """:func:`~ctxagent.tools.paths.open_path` with its failures as ``ToolError`` naming ``path``
    (``kind``: ``file`` or ``directory``, what the tool wants there)."""
    try:
        return open_path(real, flags, shown=path, parents=parents)
    except FileNotFoundError:
        raise ToolError(mend(f"no such {kind}: {path} (looked at {real})")) from None
    except IsADirectoryError:
        raise ToolError(mend(f"{path} is a directory, not a file")) from None
    except NotADirectoryError:
        raise ToolError(mend(f"{path} is a file, not a directory; use read_file to read it")) from None
    except OSError as err:
        raise ToolError(mend(f"cannot {'list' if kind == 'directory' else 'open'} {path}: {err.strerror or err}")) \
            from err


def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Write ``content`` as UTF-8 to ``path`` (parents created, file replaced); returns one line
    with the bytes written. The file is the path the permission gate checked, opened without
    following a link (tools/paths.py); a call that passed a confining gate (``ctx.confined``) never
    writes through a file with more than one hard link (the other name may be outside the working
    directory, and the write would change that file too). Raises ``ToolError`` when ``path`` is a
    directory, not a regular file, unwritable, a link met on the way, such a hard link, or when
    ``content`` holds a lone surrogate (a ``\\udcff`` escape in the model's JSON).

    Args:
        path: file path
        content: the whole new content of the file
    """
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ToolError(f"content holds U+{ord(err.object[err.start]):04X} at character {err.start}: a lone "
                        "surrogate, which UTF-8 cannot hold; write text (U+FFFD for a byte that is not UTF-8)") from err
    real = target(ctx, "path", path)
    fd = _opened(real, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, path, parents=True)  # truncated once checked
    info = regular_file(fd, path)
    if ctx.confined and info.st_nlink > 1:
        os.close(fd)
        raise ToolError(mend(f"refused: {path} has {info.st_nlink} hard links; another one may be outside the working "
                             "directory, and writing through it would change that file too. Remove this name and "
                             "write the file again (a new file has one link)"))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.truncate(0)
            fh.write(data)
    except OSError as err:
        raise ToolError(mend(f"cannot write {path}: {err.strerror or err}")) from err
    return f"wrote {len(data):,} bytes to {path}"


def list_dir(ctx: ToolContext, path: str = ".") -> str:
    """The entries of directory ``path``, sorted by name, one a line: ``name/`` for a directory,
    ``name  N bytes`` for a file (a name's bytes that are not UTF-8 shown as ``\\xff`` escapes).
    The folder is the path the permission gate checked, opened without following a link
    (tools/paths.py). Raises ``ToolError`` when it is missing, not a directory, or a link met on the way.

    Args:
        path: directory
    """
    fd = _opened(target(ctx, "path", path), os.O_RDONLY | os.O_DIRECTORY, path, kind="directory")
    try:
        with os.scandir(fd) as found:
            entries = sorted(found, key=lambda entry: entry.name)
        if not entries:
            return mend(f"{path} is empty")
        return "\n".join(_entry_line(entry) for entry in entries)
    except OSError as err:
        raise ToolError(mend(f"cannot list {path}: {err.strerror or err}")) from err
    finally:
        os.close(fd)


def _entry_line(entry: os.DirEntry[str]) -> str:
    """``name/`` for a directory, ``name  1,234 bytes`` for a file, a note for a broken link."""
    name = mend(entry.name)
    try:
        if entry.is_dir():
            return f"{name}/"
        return f"{name}  {entry.stat().st_size:,} bytes"
    except OSError:
        return f"{name}  (broken link or unreadable)"


# --- the tools ---------------------------------------------------------------------------------

SHELL = function_tool(shell, kind="exec", description=(
    "Run a bash command in the working directory and return its exit code and output "
    "(stdout and stderr merged, stdin empty). The command is killed with its whole process "
    "group after timeout_s seconds. Large outputs are saved whole and shown as a head and "
    "tail preview with a handle to read the rest with read_output or grep_output."
))

READ_FILE = function_tool(read_file, kind="read", description=(
    "Read lines of a text file (1-based, inclusive; relative paths are in the working "
    "directory). Returns the text exactly, without line numbers. end_line defaults to the end "
    "of the file. A large result is saved whole and previewed with a handle."
))

WRITE_FILE = function_tool(write_file, kind="write", description=(
    "Write text to a file as UTF-8, replacing it if it exists and creating missing parent "
    "directories. Returns the number of bytes written."
))

LIST_DIR = function_tool(list_dir, kind="read", description=(
    "List a directory: one entry a line, sorted by name, directories with a trailing '/', "
    "files with their size in bytes."
))

TOOLS: tuple[Tool, ...] = (SHELL, READ_FILE, WRITE_FILE, LIST_DIR)
