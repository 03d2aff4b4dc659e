"""The per-user key that signs saved executables.

`exe.save(path)` signs the manifest with HMAC-SHA256 under this key unless given
`key=`, and `mdsl.load_executable(path)` accepts only files signed with it (or with the
`key=` passed), so an executable someone else wrote or edited is refused before any of
its native code loads. The key is 32 random bytes in `signing.key` under
`$MDSL_CONFIG_DIR`, else `$XDG_CONFIG_HOME/mdsl`, else `~/.config/mdsl`; it is made on
first use with mode 0600, and refused when another user owns it or others can read it.

>>> import os, tempfile
>>> os.environ["MDSL_CONFIG_DIR"] = tempfile.mkdtemp()
>>> key = user_key()
>>> len(key), user_key() == key, oct(os.stat(key_path()).st_mode & 0o777)
(32, True, '0o600')
>>> del os.environ["MDSL_CONFIG_DIR"]
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from mdsl.ir.errors import CompileError
from mdsl.ir.safe_files import read_regular

KEY_FILE = "signing.key"
KEY_BYTES = 32


def config_dir() -> Path:
    """Where mdsl keeps per-user settings and the signing key."""
    root = os.environ.get("MDSL_CONFIG_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return Path(xdg) / "mdsl" if xdg else Path.home() / ".config" / "mdsl"


def key_path() -> Path:
    return config_dir() / KEY_FILE


def user_key() -> bytes:
    """This user's signing key, created (mode 0600) on first use."""
    path = key_path()
    if not os.path.lexists(path):
        _create_key(path)
    _check_private(path)
    key = read_regular(path, limit=4096, what=f"the signing key {path}", error=CompileError)
    if len(key) < 16:
        raise CompileError(f"the signing key {path} is damaged (shorter than 16 bytes)")
    return key


def _create_key(path: Path) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return  # another process made it first: use theirs
    except OSError as e:
        raise CompileError(f"cannot create the signing key {path}: {e.strerror or e}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(KEY_BYTES))


def _check_private(path: Path) -> None:
    info = os.lstat(path)
    problem = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        problem = "it is not a regular file"
    elif info.st_uid != os.geteuid():
        problem = f"it is owned by uid {info.st_uid}, not by this user"
    elif info.st_mode & 0o077:
        problem = f"others can read or write it (mode {stat.S_IMODE(info.st_mode):o}, want 600)"
    if problem:
        raise CompileError(f"refusing the signing key {path}: {problem}")
