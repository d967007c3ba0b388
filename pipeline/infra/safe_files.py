"""Names and files that came from outside (a release store, a manifest): checked before use, written without
following links, and shown with their control characters escaped."""

from __future__ import annotations

import os
import stat
import tempfile
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

_MAX_NAME = 255  # the longest file name Linux file systems accept


class UnsafeName(ValueError):
    """A name that is not one plain path component."""


def shown(text: str) -> str:
    """The text as a terminal or a log should show it: control characters (newlines, ANSI escapes) escaped."""
    return "".join(
        char if unicodedata.category(char) not in {"Cc", "Cf"} else repr(char)[1:-1] for char in text
    ).replace("\\'", "'")


def check_name(name: object, what: str) -> str:
    """`name` if it is a single path component a folder can hold as it is; else UnsafeName saying why."""
    if not isinstance(name, str) or not name:
        raise UnsafeName(f"{what} {name!r} is not a file name")
    if name in {".", ".."} or "/" in name or "\\" in name:
        raise UnsafeName(f"{what} '{shown(name)}' is not a single path component")
    if any(unicodedata.category(char) in {"Cc", "Cf"} for char in name):
        raise UnsafeName(f"{what} '{shown(name)}' holds control characters")
    if name.startswith(".") or len(name.encode()) > _MAX_NAME:
        raise UnsafeName(f"{what} '{shown(name)}' is hidden or longer than {_MAX_NAME} bytes")
    return name


def is_regular_file(path: Path) -> bool:
    """Whether `path` itself (not what a link points at) is a regular file."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def real_folder(path: Path, what: str) -> Path:
    """`path` as a folder that is not a link (created if missing); UnsafeName if it is a link or a file."""
    if path.is_symlink():
        raise UnsafeName(f"{what} {path} is a symbolic link; remove it or choose another folder")
    path.mkdir(parents=True, exist_ok=True)
    if not path.is_dir():
        raise UnsafeName(f"{what} {path} is not a folder")
    return path


def refuse_links(*paths: Path) -> None:
    """UnsafeName if any of `paths` is itself a symbolic link (a folder a store reads or writes in)."""
    for path in paths:
        if path.is_symlink():
            raise UnsafeName(f"{path} is a symbolic link")


@contextmanager
def open_regular(path: Path) -> Iterator[BinaryIO]:
    """`path` opened for reading, refusing a link or anything but a regular file."""
    try:
        # O_NONBLOCK: a FIFO planted under the name must not hang the open (regular files ignore the flag)
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise UnsafeName(f"{path} cannot be opened as a plain file: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UnsafeName(f"{path} is not a regular file")
    with os.fdopen(descriptor, "rb") as handle:  # the file object owns the descriptor now
        yield handle


def read_regular(path: Path) -> bytes:
    """The bytes of `path`, which must be a regular file and not a link."""
    with open_regular(path) as handle:
        return handle.read()


def write_into(folder: Path, name: str, fill: Callable[[Path], None]) -> Path:
    """`folder/name` written by `fill` into a new file of its own, then moved over whatever was there: an existing
    link at that name is replaced, never written through, and a failed fill leaves nothing behind."""
    check_name(name, "file name")
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=".incoming-")  # O_EXCL: a fresh file, ours
    os.close(descriptor)
    try:
        fill(Path(temporary))
        os.replace(temporary, folder / name)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return folder / name
