"""Builds the attnc wheel: the Python package with libattnc.so inside it, as attnc/lib/libattnc.so.

The library is, in this order:
1. $ATTNC_LIB_PREBUILT, when set (package an existing build without rebuilding); a relative path
   is taken from python/, then from the checkout's root;
2. in a checkout (python/ inside the attnc repository), the CMake build's: $ATTNC_BUILD_DIR
   (default <repo>/build; a relative path is taken from <repo>), configured as scripts/build.sh
   does when it is not yet, and only libattnc.so's target built ($JOBS jobs, default 2);
3. in an sdist, the library it carries: an sdist holds the library that steps 1-2 gave when it was
   made, since the C++ sources it would be built from are outside python/.
The wheel is tagged py3-none-<platform>: its Python code runs on any Python 3, the library is
native and talks to Python only through ctypes.
"""
import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
LIB_IN_PACKAGE = Path("attnc") / "lib" / "libattnc.so"
# libattnc.so's CMake target (runtime/CMakeLists.txt: attncShared, OUTPUT_NAME attnc).
LIB_TARGET = "attncShared"


def _checkout_root() -> Optional[Path]:
    root = HERE.parent
    return root if (root / "include" / "attnc" / "attnc_c.h").is_file() else None


def _build_in_checkout(root: Path) -> Path:
    build_dir = Path(os.environ.get("ATTNC_BUILD_DIR") or "build")
    if not build_dir.is_absolute():
        build_dir = root / build_dir
    if not (build_dir / "CMakeCache.txt").is_file():
        # The configure step of scripts/build.sh, which also builds every other target.
        subprocess.check_call([str(root / "scripts" / "install-deps.sh"), str(build_dir)], cwd=root)
        llvm_root = os.environ.get("LLVM_ROOT", "/usr/lib/llvm-22")
        subprocess.check_call(
            ["cmake", "-G", "Ninja", "-S", str(root), "-B", str(build_dir),
             "-DCMAKE_BUILD_TYPE=" + os.environ.get("BUILD_TYPE", "Release"),
             f"-DMLIR_DIR={llvm_root}/lib/cmake/mlir", f"-DLLVM_DIR={llvm_root}/lib/cmake/llvm"])
    subprocess.check_call(["cmake", "--build", str(build_dir), "--target", LIB_TARGET,
                           "-j", os.environ.get("JOBS", "2")])
    return build_dir / "lib" / "libattnc.so"


def resolve_library() -> Path:
    """The libattnc.so to package (see the module docstring); raises when there is none."""
    prebuilt = os.environ.get("ATTNC_LIB_PREBUILT")
    root = _checkout_root()
    if prebuilt:
        # The build backend runs in python/; a relative path is meant from where pip or build was
        # run, which is lost, so it is also taken from the checkout's root.
        candidates = [Path(prebuilt)]
        if root is not None and not Path(prebuilt).is_absolute():
            candidates.append(root / prebuilt)
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        raise RuntimeError(f"ATTNC_LIB_PREBUILT: expected the path of a built libattnc.so, "
                           f"given {prebuilt!r}, which is not a file (tried "
                           f"{', '.join(str(path.absolute()) for path in candidates)})")
    if root is not None:
        return _build_in_checkout(root)
    carried = HERE / LIB_IN_PACKAGE
    if carried.is_file():
        return carried
    raise RuntimeError("no libattnc.so to package: set ATTNC_LIB_PREBUILT to a built one, or "
                       "build from python/ in an attnc checkout")


def _copy_library(destination_root: str) -> None:
    destination = Path(destination_root) / LIB_IN_PACKAGE
    source = resolve_library()
    destination.parent.mkdir(parents=True, exist_ok=True)
    if source.resolve() != destination.resolve():
        shutil.copyfile(source, destination)
        destination.chmod(0o755)


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:
            _copy_library(self.build_lib)


class SdistWithLibrary(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        _copy_library(base_dir)


class NativeDistribution(Distribution):
    """Holds native code (libattnc.so): installed to platlib, in a wheel with a platform tag."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(distclass=NativeDistribution,
      cmdclass={"build_py": BuildPyWithLibrary, "sdist": SdistWithLibrary,
                "bdist_wheel": PlatformWheel})
