"""Build of ctransformer's C extension (ctransformer._C).

BLAS: by default OpenBLAS from PyPI's ``scipy-openblas32`` (a build
requirement).  Its shared library is copied into the package
(``ctransformer/_libs``) and the extension is linked with an rpath to that
copy, so nothing depends on scipy-openblas32 at run time.  Set
``CT_BLAS=system`` to link the system OpenBLAS found by pkg-config instead.

Flags: -O3 without -march=native or -ffast-math; hot loops use
``target_clones`` (see csrc/ct.h) for runtime dispatch on vector width.
"""
import glob
import os
import shutil
import subprocess

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
LIBS_DIR = "_libs"


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
    """Copies the bundled OpenBLAS next to the extension."""

    def run(self):
        super().run()
        if BUNDLED_SO is None:
            return
        targets = {os.path.join(self.build_lib, "ctransformer", LIBS_DIR)}
        if self.inplace:
            targets.add(os.path.join(HERE, "ctransformer", LIBS_DIR))
        for target in targets:
            os.makedirs(target, exist_ok=True)
            shutil.copy2(BUNDLED_SO, os.path.join(target, os.path.basename(BUNDLED_SO)))


sources = sorted(glob.glob("csrc/*.c")) + sorted(glob.glob("csrc/py/*.c"))
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
    depends=glob.glob("csrc/*.h") + glob.glob("csrc/py/*.h"),
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
