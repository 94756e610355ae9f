"""Where `-o` results go: checked before any work, written to a temporary file and renamed into
place (the formats: results/formats.py).

`-` and /dev/stdout name standard output. A link is written through: its target file is replaced
(atomically), never the link itself. A pipe or a terminal (a fifo, a character device, or a link to
one) is written to as it is: nothing can be renamed over it."""

from __future__ import annotations

import io
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any


class OutputPathError(ValueError):
    """The output path cannot take a results file; said before the job starts, not after it ends."""


# Names of standard output: `-` as most tools take it, and the device names of file descriptor 1,
# which would otherwise be replaced by a file (run as root) or written to as a plain file
STDOUT_NAMES = frozenset({"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"})


def names_stdout(path: Path | str | None) -> bool:
    """Whether an output option's value means standard output."""
    return path is not None and str(path) in STDOUT_NAMES


def leads_to_stdout(path: Path | str | None) -> bool:
    """Whether writing to path writes to this process's standard output: a name of it (names_stdout),
    or a path to the file or pipe it is (a link to /proc/self/fd/1, the file a shell redirected it
    to). Written to twice, one write lands over the other (a file) or in its midst (a pipe). A
    terminal or /dev/null is not counted: lines written there in turn are read as they come."""
    return names_stdout(path) or (path is not None and opened_on(path, 1))


def opened_on(path: Path | str, fd: int) -> bool:
    """Whether path is the file or pipe this process's descriptor fd is open on (a terminal or
    /dev/null aside, where writes in turn do no harm)."""
    try:
        here, there = os.stat(path), os.fstat(fd)
    except (OSError, ValueError):
        return False
    return not stat.S_ISCHR(there.st_mode) and (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def leads_to_input(path: Path | None, input_path: str) -> bool:
    """Whether writing to path would write over the input being read: the same file, or for an
    input of `-`, the file standard input is (`run - -o in.jsonl < in.jsonl` replaced it)."""
    if path is None or names_stdout(path):
        return False
    if input_path == "-":
        return opened_on(path, 0)
    return path.exists() and Path(input_path).exists() and path.samefile(input_path)


def check_output_path(path: Path) -> None:
    """Raise OutputPathError unless a results file can be written at path: renamed into place (for
    a new or regular file, or a link to one: its target), or written to as it is (a pipe, a terminal)."""
    if names_stdout(path):
        return
    if path.is_symlink() and not path.exists():
        raise OutputPathError(f"{path} is a link to {os.readlink(path)}, which does not exist (a broken link)")
    if path.exists():
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise OutputPathError(f"{path} is a folder; name a file in it")
        if stat.S_ISSOCK(mode) or stat.S_ISBLK(mode):
            what = "a socket" if stat.S_ISSOCK(mode) else "a block device (a disk)"
            raise OutputPathError(f"{path} is {what}; name a file, a pipe or a terminal")
        if not os.access(path, os.W_OK):
            raise OutputPathError(f"{path} exists and is read-only")
        if written_as_stream(path):
            return
    folder = _target(path).parent
    if not folder.is_dir():
        raise OutputPathError(f"folder {folder} does not exist")
    # the results are renamed into place, so the folder itself must take a new file; trying is
    # the only sure test (root passes every access check, and /proc or a read-only mount refuse)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputPathError(f"cannot create files in folder {folder}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(probe)


def _target(path: Path) -> Path:
    """The file a results file replaces: path, or where the links at path (and above it) lead."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path.absolute()


def written_as_stream(path: Path) -> bool:
    """Whether path is written to as it is, not replaced: anything but a regular file (a fifo, a
    terminal, /dev/null), or a link to an open descriptor (/dev/fd/N, /proc/PID/fd/N), which may
    be a shell's redirect to a file: appended to, as the redirect's descriptor would be."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(mode) or _leads_to_descriptor(path)


_DESCRIPTOR = re.compile(r"/proc/(self|thread-self|\d+)(/task/\d+)?/fd/\d+")


def _leads_to_descriptor(path: Path) -> bool:
    hop = path.absolute()
    for _ in range(40):  # the kernel follows at most 40 links
        here = Path(os.path.realpath(hop.parent)) / hop.name  # /dev/fd is itself a link to /proc/self/fd
        if _DESCRIPTOR.fullmatch(str(here)):
            return True
        if not here.is_symlink():
            return False
        hop = here.parent / os.readlink(here)
    return False


def partial_path(path: Path) -> Path:
    """Where a run that failed writes the results it has: beside path, never over it, so a failed
    rerun leaves a previous complete file as it was (out.jsonl -> out.partial.jsonl)."""
    return path.with_name(f"{path.stem}.partial{path.suffix}")


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomically(path: Path, write: Callable[[IO[Any]], int], *, binary: bool = False) -> int:
    """write(f) into a temporary file next to path, fsync it, rename it over path; returns write's count.
    f is a text file (UTF-8), or a binary one when binary.

    A crash or error mid-write leaves path as it was (absent or the old file), never half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.absolute().parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would make results private by surprise
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            count = write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename is None:
            exc.filename = str(path)  # a full disk fails write(), which names no file: name the one wanted
        raise
    return count


def write_file(path: Path, write: Callable[[IO[Any]], int], *, binary: bool = False) -> int:
    """write(f) to path as check_output_path accepts it: standard output (`-`, /dev/stdout), a pipe
    or a terminal as it is, else atomically (write_atomically) at path or at the file a link at path
    leads to, leaving the link as it was. Returns write's count."""
    if names_stdout(path):
        sys.stdout.flush()
        return _write_stream(sys.stdout.buffer, write, binary)
    if written_as_stream(path):
        # a pipe or a terminal ignores the append; a redirect's file (>, >>) is added to, not emptied
        with path.open("ab") as stream:
            return _write_stream(stream, write, binary)
    return write_atomically(_target(path), write, binary=binary)


def _write_stream(stream: IO[bytes], write: Callable[[IO[Any]], int], binary: bool) -> int:
    if binary:
        count = write(stream)
        stream.flush()
        return count
    text = io.TextIOWrapper(stream, encoding="utf-8", write_through=True)
    try:
        return write(text)
    finally:
        text.flush()
        text.detach()  # the stream stays open: standard output, or the caller's


def each_line(lines: Iterable[bytes]) -> Callable[[Callable[[bytes], object]], int]:
    """lines as write_lines takes them: each given to put in turn, then counted."""

    def write(put: Callable[[bytes], object]) -> int:
        count = 0
        for line in lines:
            put(line)
            count += 1
        return count

    return write


def write_lines(path: Path | None, out: IO[str], lines: Callable[[Callable[[bytes], object]], int]) -> int:
    """A job's records as JSON Lines to path (write_file: through a temporary file renamed into
    place) or to out: lines(put) gives each line (bytes, its newline included) to put and returns
    the records written."""
    if path is None:
        return lines(lambda chunk: out.write(chunk.decode()))
    return write_file(path, lambda f: lines(f.write), binary=True)


def write_table(path: Path | None, table: Callable[[IO[bytes]], int]) -> int:
    """A job's records as the binary file table(f) writes (Parquet, Arrow) to path (write_file);
    a table is a file, never standard output's lines. Returns the records written."""
    if path is None:
        raise OutputPathError("a columnar output (Parquet, Arrow) is a file: name it with -o")
    return write_file(path, table, binary=True)
