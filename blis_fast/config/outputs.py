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
- ``write_new_files`` creates a set of new files in a folder all or nothing (``openevolve
  init``): never over an existing name -- a symlink, even a dangling one, counts as
  existing, so nothing is ever written through a link -- and a failure removes every file
  and folder it created.
- ``check_path_length`` refuses a path the file system cannot hold (a name longer than
  NAME_MAX, a path longer than PATH_MAX) with one line instead of an OSError later.
- ``staged_outputs`` makes a command's outputs all or nothing: inside the block each
  ``atomic_write`` leaves its temporary file in place, and the block's end renames them
  all -- or, if the block fails, removes them all (no output, old or new, is changed).
- ``remove_pending`` deletes the temporary files of writes still under way: the CLI's
  Ctrl-C watchdog calls it when it has to end the process without unwinding
  (blis_fast/cli/feedback.py).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Callable, Iterable

from blis_fast.config.validate import MAX_STR_LEN, show
from blis_fast.config.yamlfile import read_yaml_mapping
from blis_fast.errors import ConfigError, WorkloadError
from blis_fast.paths import path_length_problem


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


def check_path_length(flag: str, path: str | Path) -> None:
    """ConfigError naming ``flag`` if ``path`` is longer than PATH_MAX, one of its
    components longer than NAME_MAX (as bytes, of the nearest existing folder's file
    system), or holds a NUL byte (``blis_fast.paths.path_length_problem``)."""
    problem = path_length_problem(path)
    if problem is not None:
        raise ConfigError(flag, f"{show(os.fspath(path))} {problem}")


def check_writable(flag: str, path: str | Path | None) -> None:
    """ConfigError unless ``path`` can be written: not a directory, its folder exists and
    is writable, the path not too long for the file system."""
    if path is None:
        return
    p = Path(path)
    if str(p) in ("", "."):
        raise ConfigError(flag, "needs a file name")
    check_path_length(flag, p)
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


def write_new_files(folder: str | Path, files: dict[str, str], flag: str) -> list[Path]:
    """Create ``folder`` (and missing parents) and the new files ``files`` {name: text}
    in it; returns their paths.  All or nothing: a name that exists already (a symlink
    too, dangling or not) is refused before anything is written, each file is created
    exclusively without following links (O_EXCL | O_NOFOLLOW: a link planted meanwhile
    fails the call rather than being written through), and on any failure every file
    and folder made here is removed.  OSError -> ConfigError(flag)."""
    d = Path(folder)
    check_path_length(flag, d)
    for name in files:
        check_path_length(flag, d / name)
    try:
        if os.path.lexists(d) and not d.is_dir():
            raise ConfigError(flag, f"{show(str(d))} exists and is not a folder")
        existing = [name for name in files if os.path.lexists(d / name)]
    except OSError as exc:
        raise ConfigError(flag, f"cannot use {show(str(d))}: {exc.strerror or exc}") from None
    if existing:
        raise ConfigError(flag, f"{show(str(d))} already holds {', '.join(existing)}; choose an empty folder "
                                "(nothing was written)")
    made_dirs: list[Path] = []
    made_files: list[Path] = []
    try:
        missing = [p for p in [d, *d.parents] if not os.path.lexists(p)]
        for p in reversed(missing):  # outermost first
            p.mkdir()
            made_dirs.append(p)
        for name, text in files.items():
            target = d / name
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            made_files.append(target)
            try:
                f = os.fdopen(fd, "w", encoding="utf-8")
            except BaseException:
                os.close(fd)
                raise
            with f:
                f.write(text)
    except BaseException as exc:
        for p in made_files:
            _remove(p)
        for p in reversed(made_dirs):  # innermost first; a folder someone else filled stays
            try:
                p.rmdir()
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise ConfigError(flag, f"cannot write in {show(str(d))}: {exc.strerror or exc} "
                                    "(nothing was left behind)") from None
        raise
    return made_files


_pending: set[Path] = set()  # temporary files being written (at most one per output at a time)
_staged: list[tuple[Path, Path, str]] | None = None  # (temporary file, target, flag) awaiting their renames


@contextlib.contextmanager
def staged_outputs():
    """Make the ``atomic_write`` calls inside the block all or nothing: their temporary
    files are renamed over their targets when the block ends, or all removed if it
    raises.  A block inside another one joins the outer."""
    global _staged
    if _staged is not None:
        yield
        return
    staged = _staged = []
    try:
        yield
    except BaseException:
        _staged = None
        _discard(staged)
        raise
    _staged = None
    try:
        for tmp, target, flag in staged:
            try:
                os.replace(tmp, target)
            except OSError as exc:
                raise ConfigError(flag, f"cannot write {show(str(target))}: {exc.strerror or exc}") from None
            _pending.discard(tmp)
    finally:
        _discard([entry for entry in staged if entry[0] in _pending])  # those a failed rename left


def _discard(staged: list[tuple[Path, Path, str]]) -> None:
    for tmp, _, _ in staged:
        _remove(tmp)
        _pending.discard(tmp)


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
    tmp = _create_temporary(parent, p.name, flag)
    staged = False
    try:
        mode = st.st_mode & 0o777 if st is not None else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        write(tmp)
        if _staged is not None:  # renamed when the staged_outputs block ends
            _staged.append((tmp, p, flag))
            staged = True
        else:
            os.replace(tmp, p)
    except OSError as exc:
        _remove(tmp)
        raise ConfigError(flag, f"cannot write {show(str(p))}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise
    finally:
        if not staged:
            _pending.discard(tmp)
    return p


def _create_temporary(parent: Path, name: str, flag: str) -> Path:
    """Create an empty temporary file in ``parent``, registered in ``_pending`` *before* it
    exists: a Ctrl-C that lands between its creation and its registration (as it could
    with ``tempfile.mkstemp``) would leave it behind."""
    for _ in range(100):
        tmp = parent / f".{name[:100]}.{secrets.token_hex(4)}.tmp"
        _pending.add(tmp)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            return tmp
        except FileExistsError:
            _pending.discard(tmp)  # someone else's file: never removed by us
        except OSError as exc:
            _pending.discard(tmp)
            raise ConfigError(flag, f"cannot write in {show(str(parent))}: {exc.strerror or exc}") from None
    raise ConfigError(flag, f"cannot write in {show(str(parent))}: no free temporary file name")


def _remove(tmp: Path) -> None:
    try:
        tmp.unlink()
    except OSError:
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def spec_files(path: str | Path) -> list[Path]:
    """The files a spec refers to (``file:`` of trace arrivals and empirical
    distributions), resolved against the spec's folder: inputs an output must not
    overwrite.  Reads only the spec's YAML."""
    p = Path(path)
    return named_files(read_yaml_mapping(p, "--workload-spec", WorkloadError), p.resolve().parent)


def named_files(data: Any, base: Path) -> list[Path]:
    """The files a parsed spec or agent scenario names (``file:`` keys at any depth),
    resolved against ``base`` (its folder)."""
    out: list[Path] = []
    todo = [data]
    seen: set[int] = set()
    while todo:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, dict):
            f = v.get("file")
            if isinstance(f, str) and f and len(f) <= MAX_STR_LEN and "\x00" not in f:
                q = Path(f).expanduser()
                out.append(q if q.is_absolute() else base / q)
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return out
