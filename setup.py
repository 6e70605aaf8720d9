"""Build of ctransformer's C extension (ctransformer._C).

BLAS: by default OpenBLAS from PyPI's ``scipy-openblas32`` (a build
requirement).  Its shared library is copied into the package
(``ctransformer/_libs``) and the extension is linked with an rpath to that
copy, so nothing depends on scipy-openblas32 at run time.  Set
``CT_BLAS=system`` to link the system OpenBLAS found by pkg-config instead.

Flags: -O3 without -march=native or -ffast-math; hot loops use
``target_clones`` (see csrc/ct.h) for runtime dispatch on vector width.

Two extras:
- the C sources (csrc/) are installed as ``ctransformer/_csrc`` so that
  ``ctransformer.kernels.source(name)`` shows the C that runs;
- ``pip install .`` from a checkout also copies the built extension (and the
  bundled OpenBLAS) into the checkout's ``ctransformer/``.  ``python -m
  ctransformer`` and ``python -c "import ctransformer"`` started at the
  repository root import the checkout (Python puts the current directory
  first on sys.path), and this makes that copy of the package complete.
"""
import glob
import os
import shutil
import subprocess
import sys

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
LIBS_DIR = "_libs"

# The bindings are generated from csrc/py/kernel_table.py (see
# csrc/py/generate_bindings.py) by build_ext, into csrc/py/generated/.
sys.path.insert(0, os.path.join(HERE, "csrc", "py"))
import generate_bindings  # noqa: E402


def blas_config():
    """(include_dirs, library_dirs, libraries, macros, shared_lib_to_bundle)."""
    choice = os.environ.get("CT_BLAS", "scipy").lower()
    if choice == "system":
        def pkg(flag):
            return subprocess.check_output(["pkg-config", flag, "openblas"], text=True).split()
        incs = [f[2:] for f in pkg("--cflags-only-I")]
        lib_dirs = [f[2:] for f in pkg("--libs-only-L")]
        libs = [f[2:] for f in pkg("--libs-only-l")]
        return incs, lib_dirs, libs, [], None
    if choice != "scipy":
        raise SystemExit(f"CT_BLAS must be 'scipy' or 'system', got {choice!r}")
    import scipy_openblas32 as sob

    lib_dir = sob.get_lib_dir()
    name = sob.get_library()  # "scipy_openblas"
    so = os.path.join(lib_dir, f"lib{name}.so")
    return [sob.get_include_dir()], [lib_dir], [name], [("CT_BLAS_SCIPY", "1")], so


INCS, LIB_DIRS, LIBS, MACROS, BUNDLED_SO = blas_config()


class BuildExt(build_ext):
    """Copies the bundled OpenBLAS next to the extension, and the extension
    into the checkout when it was built elsewhere (see the module docstring)."""

    def run(self):
        generate_bindings.generate_c()
        super().run()
        package_dirs = {os.path.join(self.build_lib, "ctransformer")}
        checkout_package = os.path.join(HERE, "ctransformer")
        if self.inplace or os.path.isdir(checkout_package):
            package_dirs.add(checkout_package)
        for package_dir in package_dirs:
            self.copy_runtime(package_dir)

    def copy_runtime(self, package_dir):
        if BUNDLED_SO is not None:
            libs = os.path.join(package_dir, LIBS_DIR)
            os.makedirs(libs, exist_ok=True)
            shutil.copy2(BUNDLED_SO, os.path.join(libs, os.path.basename(BUNDLED_SO)))
        built = self.get_ext_fullpath("ctransformer._C")
        target = os.path.join(package_dir, os.path.basename(built))
        if os.path.exists(built) and os.path.abspath(built) != os.path.abspath(target):
            shutil.copy2(built, target)


class BuildPy(build_py):
    """Installs the C sources as package data (ctransformer/_csrc)."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "ctransformer", "_csrc")
        for path in glob.glob(os.path.join(HERE, "csrc", "**", "*.[ch]"), recursive=True):
            dest = os.path.join(target, os.path.relpath(path, os.path.join(HERE, "csrc")))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(path, dest)


BINDING_CORE = ["csrc/py/args.c", "csrc/py/fork_guard.c", "csrc/py/module.c"]
sources = sorted(glob.glob("csrc/*.c")) + BINDING_CORE + generate_bindings.c_sources()
extra_link = [] if BUNDLED_SO is None else [f"-Wl,-rpath,$ORIGIN/{LIBS_DIR}"]

ext = Extension(
    "ctransformer._C",
    sources=sources,
    include_dirs=["csrc", numpy.get_include()] + INCS,
    library_dirs=LIB_DIRS,
    libraries=LIBS + ["m"],
    define_macros=MACROS,
    extra_compile_args=["-O3", "-std=c11", "-fno-math-errno", "-fvisibility=hidden",
                        "-Wall", "-Wno-unused-function", "-pthread"],
    extra_link_args=extra_link + ["-pthread"],
    depends=(glob.glob("csrc/*.h") + glob.glob("csrc/py/*.h") + glob.glob("csrc/py/bind_*.c")
             + ["csrc/py/kernel_table.py", "csrc/py/kernel_table_decode.py", "csrc/py/kernel_table_seq.py",
                "csrc/py/generate_bindings.py"]),
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt, "build_py": BuildPy})
