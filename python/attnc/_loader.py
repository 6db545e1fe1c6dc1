"""Finds and loads libattnc.so for the attnc package, and points it at an NVRTC it can use.

libattnc opens NVRTC itself with dlopen (docs/runtime.md, "Finding NVRTC and the CUDA driver");
this module adds the one place PyTorch users have NVRTC that libattnc does not look at, the
nvidia-cuda-nvrtc wheels, by setting $ATTNC_NVRTC_PATH before the library is loaded, and loads the
NVRTC builtins library beside the chosen NVRTC, which NVRTC would not find there.
"""
import ctypes
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List, Optional

_PACKAGE_DIR = Path(__file__).resolve().parent
# Where the wheel puts the library (python/setup.py).
_BUNDLED_LIB = Path("lib") / "libattnc.so"
# A checkout's `make build` output, relative to the repository root (python/attnc/../..).
_SOURCE_TREE_LIB = Path("build") / "lib" / "libattnc.so"

# libattnc's own NVRTC search (runtime/Nvrtc.cpp) in the order it tries: these sonames through
# the dynamic loader, then <root>/lib64/<name> under $CUDA_HOME, $CUDA_PATH and this default root.
_TOOLKIT_SONAMES = ("libnvrtc.so.13", "libnvrtc.so")
_TOOLKIT_ROOT_VARIABLES = ("CUDA_HOME", "CUDA_PATH")
_DEFAULT_CUDA_ROOT = "/usr/local/cuda"
# The pip wheels' NVRTC, relative to a site-packages directory: nvidia-cuda-nvrtc (CUDA 13, which
# attnc is tested with, hence first) and nvidia-cuda-nvrtc-cu12.
_WHEEL_NVRTC = (Path("nvidia") / "cu13" / "lib" / "libnvrtc.so.13",
                Path("nvidia") / "cuda_nvrtc" / "lib" / "libnvrtc.so.12")
# NVRTC opens its builtins library by soname; beside a wheel's NVRTC the loader does not find it.
_NVRTC_BUILTINS_PATTERN = "libnvrtc-builtins.so.*"
# ldconfig is in /sbin, which is not on a Debian user's PATH.
_LDCONFIG_FALLBACKS = ("/sbin/ldconfig", "/usr/sbin/ldconfig")

_load_lock = threading.Lock()
_library: Optional[ctypes.CDLL] = None


def _source_tree_root() -> Optional[Path]:
    """The repository root when the package runs from python/attnc/ of a checkout, else None."""
    root = _PACKAGE_DIR.parent.parent
    in_checkout = (root / "include" / "attnc" / "attnc_c.h").is_file()
    return root if _PACKAGE_DIR.parent.name == "python" and in_checkout else None


def library_path() -> str:
    """Returns the libattnc.so the package uses.

    The first of: $ATTNC_LIB (when set, it must name a file), the library inside the package
    (attnc/lib/libattnc.so, where the wheel puts it), and a checkout's build/lib/libattnc.so when
    the package runs from python/ of a source tree. Raises FileNotFoundError naming what was tried.
    """
    override = os.environ.get("ATTNC_LIB")
    if override:
        if os.path.isfile(override):
            return override
        raise FileNotFoundError(
            f"ATTNC_LIB: expected the path of libattnc.so, given {override!r}, which is not a file")
    tried = [_PACKAGE_DIR / _BUNDLED_LIB]
    root = _source_tree_root()
    if root is not None:
        tried.append(root / _SOURCE_TREE_LIB)
    for candidate in tried:
        if candidate.is_file():
            return str(candidate)
    raise FileNotFoundError(
        "libattnc.so not found: $ATTNC_LIB is not set, and there is no "
        + " nor ".join(str(path) for path in tried)
        + " (install the attnc wheel, build the checkout with `make build`, or set ATTNC_LIB)")


def _ldconfig_libraries() -> Dict[str, str]:
    """The dynamic loader's cache as {soname: path} (`ldconfig -p`); empty if it cannot be read."""
    ldconfig = shutil.which("ldconfig") or next(
        (path for path in _LDCONFIG_FALLBACKS if os.access(path, os.X_OK)), None)
    if ldconfig is None:
        return {}
    try:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10,
                                 check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    libraries: Dict[str, str] = {}
    for line in listing.splitlines():
        # "\tlibnvrtc.so.13 (libc6,x86-64) => /usr/local/cuda/lib64/libnvrtc.so.13"
        name, arrow, path = line.strip().partition(" => ")
        if arrow:
            libraries.setdefault(name.split(" (")[0], path)
    return libraries


def _toolkit_nvrtc() -> Optional[str]:
    """The NVRTC libattnc would find on its own without $ATTNC_NVRTC_PATH, or None."""
    for soname in _TOOLKIT_SONAMES:
        for directory in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
            if directory and os.path.isfile(os.path.join(directory, soname)):
                return os.path.join(directory, soname)
    cache = _ldconfig_libraries()
    for soname in _TOOLKIT_SONAMES:
        if soname in cache:
            return cache[soname]
    roots = [os.environ.get(variable) for variable in _TOOLKIT_ROOT_VARIABLES]
    for root in [root for root in roots if root] + [_DEFAULT_CUDA_ROOT]:
        for soname in _TOOLKIT_SONAMES:
            candidate = os.path.join(root, "lib64", soname)
            if os.path.isfile(candidate):
                return candidate
    return None


def _wheel_nvrtc() -> Optional[str]:
    """The first nvidia-cuda-nvrtc wheel's NVRTC on sys.path (CUDA 13's before CUDA 12's), or None.

    The wheels install into the `nvidia` namespace package, whose parts are sys.path entries.
    """
    site_dirs: List[str] = [entry or os.getcwd() for entry in sys.path]
    for relative in _WHEEL_NVRTC:
        for site_dir in site_dirs:
            candidate = Path(site_dir) / relative
            if candidate.is_file():
                return str(candidate)
    return None


def _preload_nvrtc_builtins(nvrtc: str) -> None:
    """Loads the libnvrtc-builtins beside `nvrtc` (RTLD_GLOBAL), so that NVRTC's own dlopen of it
    by soname finds it loaded, as torch does for the wheels. The compile's child processes are
    forks and inherit it. A failure is left for NVRTC to report, naming the library."""
    builtins = sorted(Path(nvrtc).parent.glob(_NVRTC_BUILTINS_PATTERN))
    if builtins:
        try:
            ctypes.CDLL(str(builtins[0]), mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass


def configure_nvrtc() -> Optional[str]:
    """Points libattnc at a pip-installed NVRTC when it would find none of its own.

    When $ATTNC_NVRTC_PATH is unset or empty and no toolkit NVRTC is where libattnc looks (the
    loader's libnvrtc.so.13 or libnvrtc.so, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda/lib64), sets
    $ATTNC_NVRTC_PATH to the NVRTC of an installed nvidia-cuda-nvrtc wheel (site-packages/nvidia/
    cu13/lib/libnvrtc.so.13, else nvidia-cuda-nvrtc-cu12's nvidia/cuda_nvrtc/lib/libnvrtc.so.12).
    Whichever NVRTC $ATTNC_NVRTC_PATH then names, the libnvrtc-builtins beside it is loaded.
    Returns the path it set, or None when it set nothing.
    """
    chosen = None
    if not os.environ.get("ATTNC_NVRTC_PATH") and _toolkit_nvrtc() is None:
        chosen = _wheel_nvrtc()
        if chosen is not None:
            os.environ["ATTNC_NVRTC_PATH"] = chosen
    if os.environ.get("ATTNC_NVRTC_PATH"):
        _preload_nvrtc_builtins(os.environ["ATTNC_NVRTC_PATH"])
    return chosen


def load_library() -> ctypes.CDLL:
    """Loads libattnc.so (library_path()) once per process, after configure_nvrtc()."""
    global _library
    with _load_lock:
        if _library is None:
            configure_nvrtc()
            _library = ctypes.CDLL(library_path())
        return _library
