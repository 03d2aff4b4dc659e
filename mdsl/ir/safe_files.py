"""Files other people may control: reading them bounded, writing without following links.

mdsl reads files written elsewhere (saved graphs and executables) and writes into
folders other users may share (the build cache). Three rules hold everywhere:

- a file is read only when it is a regular file (a FIFO would block forever, a device
  never end) and no larger than the caller's limit, checked before reading;
- a file is written by creating a new one with `O_EXCL | O_NOFOLLOW` and renaming it
  into place, so a symlink planted at the target is replaced, never followed;
- a file or folder is trusted (its contents run as native code) only when the current
  user owns it and neither group nor others can write it.

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> write_new(os.path.join(folder, "a.txt"), b"hello")
>>> read_regular(os.path.join(folder, "a.txt"), limit=16, what="a.txt")
b'hello'
>>> untrusted_reason(folder) is None
True
"""

from __future__ import annotations

import os
import stat
import tempfile

from mdsl.ir.errors import MdslError

MAX_INFLATION = 64  # inflated / compressed size of a zip member
INFLATION_SLACK = 1 << 16  # tiny members compress oddly: always allow this much


def read_regular(path, *, limit: int, what: str, error: type[MdslError] = MdslError) -> bytes:
    """The bytes of `path`, refused (`error`) unless it is a regular file of at most
    `limit` bytes. Symlinks are followed, FIFOs and devices are never opened for reading
    (the open does not block), and a file growing while read is cut at the limit."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise error(f"cannot read {what}: {e.strerror or e}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what} is not a regular file (refusing FIFOs, devices, folders)")
        if info.st_size > limit:
            raise error(f"{what} is {info.st_size} bytes, more than the limit of {limit}")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise error(f"cannot read {what}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise error(f"{what} grew past the limit of {limit} bytes while being read")
    return data


def check_zip_member(info, *, cap: int, error: type[MdslError] = MdslError) -> None:
    """Refuse (`error`) a zip member (`zipfile.ZipInfo`) announcing more than `cap` bytes
    or more than MAX_INFLATION times its compressed size. zipfile stops inflating at the
    announced size, so the check bounds the memory reading it takes."""
    limit = min(cap, max(MAX_INFLATION * info.compress_size, INFLATION_SLACK))
    if info.file_size > limit:
        raise error(
            f"{info.filename} inflates to {info.file_size} bytes from {info.compress_size}; "
            f"the limit is {limit} (at most {MAX_INFLATION}x its compressed size and {cap})"
        )


def write_new(path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` to `path` through a new file in the same folder renamed over it:
    a symlink or file planted at `path` is replaced, never written through."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".mdsl-", dir=folder)  # O_EXCL: a fresh inode
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def untrusted_reason(path) -> str | None:
    """Why `path` cannot be trusted to hold code this user runs, or None when it can:
    it must not be a symlink, must be owned by this user and must not be writable by
    group or others."""
    try:
        info = os.lstat(path)
    except OSError as e:
        return f"cannot inspect it ({e.strerror or e})"
    if stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link"
    if info.st_uid != os.geteuid():
        return f"it is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or others can write it (mode {stat.S_IMODE(info.st_mode):o})"
    return None
