"""Output files and folders that are whole or absent: write to a temp beside the target, then rename.

Every fault the operating system reports while writing (a full disk, a read-only mount, a
permission, a folder removed mid-run) becomes one ``LayaError`` line naming the file and the
reason; the temp is removed, so nothing half-written is ever left behind. Files keep the mode
the umask gives (not the temp file's 0600).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from .errors import LayaError


def write_error(path: str | Path, e: OSError) -> LayaError:
    """One line for an OS fault on ``path``: 'cannot write m.pt: No space left on device'."""
    return LayaError(f"cannot write {path}: {e.strerror or e}")


def os_fault(e: BaseException) -> OSError | None:
    """The OSError behind ``e``, if any: itself, or one it was raised while handling (torch's
    writer answers a failed write with a RuntimeError of its own during cleanup)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, OSError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def check_writable(path: str | Path) -> Path:
    """Fail early (before hours of training) if ``path`` cannot be written."""
    path = Path(path).expanduser()
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise LayaError(f"cannot write {path}: it is a directory")
    if not parent.is_dir():
        raise LayaError(f"cannot write {path}: folder {parent} does not exist")
    try:  # the only reliable test (root ignores mode bits, read-only mounts don't)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise LayaError(f"cannot write {path}: folder {parent} is not writable ({e.strerror})") from None
    return path


def check_folder_writable(folder: str | Path, what: str) -> Path:
    """``folder`` (made with its missing parents) takes a file of a few KiB: a folder under a file, on a read-only
    mount or on a full disk is one line (``what`` names it) before any work. The folders made to check are removed
    again either way: whoever writes there makes them."""
    folder = Path(folder).expanduser()
    missing, p = [], folder
    while not p.exists() and p.parent != p:
        missing.append(p)
        p = p.parent
    made = []
    try:
        for m in reversed(missing):
            m.mkdir()
            made.append(m)
        if not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        fd, probe = tempfile.mkstemp(prefix=".laya-probe-", dir=folder)
        try:
            os.write(fd, b"\0" * 4096)  # a full disk still creates empty files: write some bytes
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        raise LayaError(f"cannot write {what} {folder}: {e.strerror or e}") from None
    finally:
        for m in reversed(made):
            with contextlib.suppress(OSError):
                m.rmdir()
    return folder


def check_outputs(*paths: str | Path | None) -> None:
    """Each output file asked for (None: not asked) can be written: fail now, not after the work."""
    for path in paths:
        if path is not None:
            check_writable(path)


def check_new_outputs(outputs: Mapping[str, str | Path | None], overwrite: bool) -> None:
    """The output files a command was asked for (option → path; None: not asked), before any work: each can be
    written, no two options name the same file, and without ``overwrite`` none exists yet — an existing file is
    replaced only when the user said so (``--overwrite``), never silently after the work. One line naming the
    option."""
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        target = Path(os.path.abspath(Path(path).expanduser()))
        if target in seen:
            raise LayaError(f"{seen[target]} and {option} both name {path}: give each its own file")
        seen[target] = option
        if not overwrite and (target.is_file() or target.is_symlink()):
            raise LayaError(f"{option} {path} exists; pass --overwrite to replace it, or choose another file")
        check_writable(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """Yield a temp path; on success it replaces ``path`` in one rename, on failure it vanishes."""
    path = check_writable(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise write_error(path, e) from None
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600: give the file the usual mode
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        fault = os_fault(e)
        if fault is not None:
            raise write_error(path, fault) from None
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def append_text(path: str | Path, text: str) -> None:
    """Append ``text`` in one write (a file other steps also append to, e.g. ``$GITHUB_STEP_SUMMARY``)."""
    path = Path(path).expanduser()
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as e:
        raise write_error(path, e) from None


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_torch_save(obj, path: str | Path) -> None:
    """``torch.save`` through a Python file object, so a full disk is an OSError (one line), not
    the C++ writer's RuntimeError."""
    import torch

    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)


# --------------------------------------------------------------------------- whole folders


def existing_ancestor(path: Path) -> Path:
    p = path
    while not p.exists() and p.parent != p:
        p = p.parent
    return p


def check_out_dir(out: str | Path, overwrite: bool, ours: Callable[[Path], bool], what: str) -> Path:
    """Validate an output folder before any work: fail early with one clear line.

    A missing or empty folder is fine (missing parents are created at the end); a non-empty
    folder is replaced only with ``overwrite`` AND only if ``ours(folder)`` says laya wrote it
    (``what`` names that kind of folder): laya never deletes a folder it did not write.
    """
    out = Path(out).expanduser()
    here, target = Path.cwd().resolve(), Path(os.path.abspath(out))
    if target == here or target in here.parents:
        raise LayaError(f"--out {out} is the current folder or one of its parents; give a subfolder such as export/")
    if out.exists() and not out.is_dir():
        raise LayaError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise LayaError(
                f"--out {out} is not empty; pass --overwrite to replace a previous {what}, or choose another folder"
            )
        if not ours(out):
            raise LayaError(
                f"--out {out} is not empty and is not a {what} (no summary.json marker); "
                f"refusing to replace it, even with --overwrite"
            )
    anchor = out.parent if out.exists() else existing_ancestor(out.parent)
    if not anchor.is_dir():
        raise LayaError(f"cannot write {out}: {anchor} is not a folder")
    try:  # the only reliable test: root ignores mode bits, read-only mounts do not
        os.rmdir(tempfile.mkdtemp(prefix=f".{out.name}.laya-probe-", dir=anchor))
    except OSError as e:
        raise LayaError(f"cannot write {out}: folder {anchor} is not writable ({e.strerror})") from None
    return out


@contextlib.contextmanager
def atomic_folder(out: str | Path, overwrite: bool, ours: Callable[[Path], bool], what: str):
    """Yield an empty temp folder beside ``out``; on success it replaces ``out`` (see ``check_out_dir``),
    on any failure it is removed and ``out`` is left as it was."""
    out = check_out_dir(out, overwrite, ours, what)
    anchor = existing_ancestor(out.parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.laya-", dir=anchor))
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700: give the folder the usual mode
    except OSError as e:
        raise write_error(out, e) from None
    try:
        yield tmp
        _replace_folder(tmp, out, overwrite, ours, what)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        fault = os_fault(e)
        if fault is not None:
            raise write_error(out, fault) from None
        raise


def _replace_folder(tmp: Path, out: Path, overwrite: bool, ours, what: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        os.rename(tmp, out)
        return
    if out.is_dir() and not any(out.iterdir()):
        os.replace(tmp, out)  # POSIX rename onto an empty folder
        return
    check_out_dir(out, overwrite, ours, what)  # re-check right before replacing
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.laya-old-", dir=out.parent))
    os.rmdir(old)
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- JSON


def json_safe(obj):
    """Strict-JSON-able copy: NaN and ±inf become None (null), numpy scalars become Python ones,
    dict keys become strings, recursively."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    item = getattr(obj, "item", None)  # numpy / torch scalars
    if callable(item) and getattr(obj, "ndim", None) == 0:
        return json_safe(item())
    return obj


def strict_json(obj) -> str:
    return json.dumps(json_safe(obj), indent=2, allow_nan=False) + "\n"


def digest(**parts) -> str:
    """A short, stable hash of JSON-able parts: feature-cache keys and resume fingerprints."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()
