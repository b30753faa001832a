"""Build step beyond pyproject.toml: the entry kernels compiled ahead of time.

``blis_fast_kernels._native`` is an extension module numba's AOT compiler (pycc) builds from
the kernel sources (``kernels/aot.py`` declares what it holds and why).  A run that finds
it never loads numba's JIT.  If it cannot be built -- no C compiler, or
``BLIS_FAST_BUILD_NATIVE=0`` -- the install still succeeds and the kernels are JIT-compiled
on first use instead (``blis_fast_kernels.native`` picks whichever is usable).
"""

import importlib.util
import os
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _load_kernels(package_dir: str):
    """The kernel package in ``package_dir`` imported as ``blis_fast_kernels`` (its
    modules import each other relatively; the source folder is called ``kernels``)."""
    spec = importlib.util.spec_from_file_location("blis_fast_kernels", os.path.join(package_dir, "__init__.py"),
                                                  submodule_search_locations=[package_dir])
    module = importlib.util.module_from_spec(spec)
    sys.modules["blis_fast_kernels"] = module
    spec.loader.exec_module(module)
    return module


class BuildNativeKernels(build_ext):
    def build_extension(self, ext):
        if ext.name != "blis_fast_kernels._native":
            return super().build_extension(ext)
        if os.environ.get("BLIS_FAST_BUILD_NATIVE", "1") == "0":
            print("blis-fast: BLIS_FAST_BUILD_NATIVE=0: kernels will be JIT-compiled on first use", file=sys.stderr)
            return
        target_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        # the sources: build_py's copy, or the source tree for an in-place (editable) build
        source_dir = target_dir if os.path.isfile(os.path.join(target_dir, "aot.py")) else os.path.abspath("kernels")
        os.makedirs(target_dir, exist_ok=True)
        print("blis-fast: compiling the kernels ahead of time (about a minute)...", file=sys.stderr)
        try:
            with tempfile.TemporaryDirectory() as cache:
                os.environ["NUMBA_CACHE_DIR"] = cache  # the build's JIT cache is not the user's
                _load_kernels(source_dir)
                from blis_fast_kernels import aot, cache as kernel_cache

                aot.build(target_dir, kernel_cache.sources_digest())
        except Exception as e:  # no compiler, an unsupported platform ...: JIT at run time instead
            print(f"blis-fast: WARNING: the kernels could not be compiled ahead of time ({type(e).__name__}: {e}); "
                  "they will be JIT-compiled on first use", file=sys.stderr)


setup(
    # optional: an install without it (not built, or its build failed) is still complete
    ext_modules=[Extension("blis_fast_kernels._native", sources=[], optional=True)],
    cmdclass={"build_ext": BuildNativeKernels},
)
