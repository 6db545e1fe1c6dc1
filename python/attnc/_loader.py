"""Stand-in for PKG's loader (not committed): finds and loads libattnc.so."""
import ctypes
import functools
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def library_path() -> str:
    tried = []
    for path in (os.environ.get("ATTNC_LIB"), os.path.join(_HERE, "lib", "libattnc.so"),
                 os.path.join(_HERE, "..", "..", "build", "lib", "libattnc.so")):
        if path:
            if os.path.exists(path):
                return path
            tried.append(path)
    raise FileNotFoundError("libattnc.so not found; tried: " + ", ".join(tried))


def configure_nvrtc():
    return None


@functools.lru_cache(maxsize=None)
def load_library() -> ctypes.CDLL:
    configure_nvrtc()
    return ctypes.CDLL(library_path())
