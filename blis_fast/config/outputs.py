"""Output files: checked before a run, written atomically.

Every command writes its output files through this module (docs/limits.md "Output files"):

- ``check_outputs`` refuses, before anything is simulated or generated, an output path
  that is a directory, lies in a missing or read-only folder, or names the same file as
  an input (``--config``, ``--spec``, a trace, a file a spec refers to ...) or as another
  output -- compared as resolved paths and, for existing files, by device and inode (so
  symlinks and hard links count as the same file).
- ``config_inputs`` lists the files one run configuration reads (model config, trace,
  workload spec and the files it names): each command adds these for every configuration
  it will run -- every scenario of ``evaluate``, every grid point of ``sweep``/``compare``.
- ``atomic_write`` writes into a temporary file in the target's folder and renames it over
  the target: a reader never sees a half-written file, and a failed write leaves the
  target exactly as it was (only the temporary file is removed).  Targets that are not
  regular files (``/dev/null``, a FIFO) are written in place.
- ``remove_pending`` deletes the temporary files of writes still under way: the CLI's
  Ctrl-C watchdog calls it when it has to end the process without unwinding
  (blis_fast/cli/feedback.py).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from blis_fast.config.validate import show
from blis_fast.errors import ConfigError


def _resolved(p: Path) -> str:
    try:
        return str(p.expanduser().resolve(strict=False))
    except (OSError, RuntimeError):  # symlink loops
        return os.path.abspath(str(p))


def same_file(a: str | Path, b: str | Path) -> bool:
    """True if ``a`` and ``b`` name the same file (same inode if both exist, else the same
    resolved path)."""
    a, b = Path(a), Path(b)
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return _resolved(a) == _resolved(b)


def check_writable(flag: str, path: str | Path | None) -> None:
    """ConfigError unless ``path`` can be written: not a directory, its folder exists and
    is writable."""
    if path is None:
        return
    p = Path(path)
    if str(p) in ("", "."):
        raise ConfigError(flag, "needs a file name")
    if len(str(p)) > 4096:
        raise ConfigError(flag, f"path too long ({len(str(p))} characters)")
    parent = p.parent if str(p.parent) else Path(".")
    try:
        if p.is_dir():
            raise ConfigError(flag, f"{show(str(p))} is a directory")
        if not parent.is_dir():
            raise ConfigError(flag, f"folder {show(str(parent))} does not exist")
    except OSError as exc:  # e.g. a name too long for the file system
        raise ConfigError(flag, f"cannot use {show(str(p))}: {exc.strerror or exc}") from None
    if not os.access(parent, os.W_OK):
        raise ConfigError(flag, f"folder {show(str(parent))} is not writable")


def config_inputs(cfg) -> list[tuple[str, Path]]:
    """The files a run of SimConfig ``cfg`` reads besides its --config / --policy-config
    files: a model config.json, the trace, the workload spec and the files the spec names."""
    out: list[tuple[str, Path]] = []
    model = Path(cfg.model)
    try:
        if model.is_dir():
            out.append(("--model", model / "config.json"))
        elif model.suffix == ".json" or model.is_file():
            out.append(("--model", model))
    except OSError:
        pass
    w = cfg.workload
    if w.traces_filepath:
        out.append(("--workload-traces-filepath", Path(w.traces_filepath)))
    if w.spec_filepath:
        from blis_fast.workload.spec import spec_files  # the workload package loads numpy: only when needed

        out.append(("--workload-spec", Path(w.spec_filepath)))
        out += [("--workload-spec", p) for p in spec_files(w.spec_filepath)]
    return out


def check_outputs(outputs: Iterable[tuple[str, str | Path | None]],
                  inputs: Iterable[tuple[str, str | Path | None]] = ()) -> None:
    """Check every output (flag, path): writable, not the same file as any input (flag,
    path) nor as another output.  None paths are skipped."""
    outs = [(f, Path(p)) for f, p in outputs if p is not None]
    ins = [(f, Path(p)) for f, p in inputs if p is not None and str(p) != ""]
    for k, (flag, p) in enumerate(outs):
        check_writable(flag, p)
        for in_flag, q in ins:
            if same_file(p, q):
                raise ConfigError(flag, f"{show(str(p))} is the input file of {in_flag}; refusing to overwrite an "
                                        "input (choose another output path)")
        for other_flag, q in outs[:k]:
            if same_file(p, q):
                raise ConfigError(flag, f"{show(str(p))} is also the output of {other_flag}; give each output "
                                        "its own path")


_pending: set[Path] = set()  # temporary files being written (at most one per output at a time)


def remove_pending() -> None:
    """Delete the temporary files of unfinished ``atomic_write`` calls."""
    for tmp in list(_pending):
        _remove(tmp)
        _pending.discard(tmp)


def atomic_write(path: str | Path, write: Callable[[Path], None], flag: str) -> Path:
    """Call ``write(tmp)`` to write a temporary file next to ``path``, then rename it to
    ``path`` (atomic on POSIX).  On failure the temporary file is removed and ``path`` is
    untouched; an OSError becomes ConfigError(flag)."""
    p = Path(path)
    try:
        st = os.stat(p)
        regular = stat.S_ISREG(st.st_mode)
    except OSError:
        st, regular = None, True
    if st is not None and not regular:  # /dev/null, a FIFO: nothing to replace atomically
        try:
            write(p)
        except OSError as exc:
            raise ConfigError(flag, f"cannot write {show(str(p))}: {exc.strerror or exc}") from None
        return p
    parent = p.parent if str(p.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{p.name[:100]}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise ConfigError(flag, f"cannot write in {show(str(parent))}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    _pending.add(tmp)
    try:
        mode = st.st_mode & 0o777 if st is not None else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        write(tmp)
        os.replace(tmp, p)
    except OSError as exc:
        _remove(tmp)
        raise ConfigError(flag, f"cannot write {show(str(p))}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise
    finally:
        _pending.discard(tmp)
    return p


def _remove(tmp: Path) -> None:
    try:
        tmp.unlink()
    except OSError:
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
