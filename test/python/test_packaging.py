"""The attnc package's packaging: where _loader finds libattnc.so and NVRTC (on fake directory
trees), that the package's version is the library's, and (with $ATTNC_LIB_PREBUILT, the ctest
python/packaging) that the wheel built from python/ installs into a venv without torch, imports,
and compiles a kernel for sm_90a without a GPU."""
import ctypes
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from attnc import _loader  # noqa: E402
from attnc._version import __version__  # noqa: E402

# Every variable the loader reads; each test starts with none of them set.
LOADER_VARIABLES = ("ATTNC_LIB", "ATTNC_NVRTC_PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH")


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No loader variable set, an empty loader cache, no default toolkit and no site-packages."""
    for variable in LOADER_VARIABLES:
        # Set first, so that monkeypatch also undoes what the loader writes to os.environ.
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)
    monkeypatch.setattr(_loader, "_ldconfig_libraries", lambda: {})
    monkeypatch.setattr(_loader, "_DEFAULT_CUDA_ROOT", str(tmp_path / "no-default-cuda"))
    monkeypatch.setattr(sys, "path", [str(tmp_path / "no-site-packages")])
    return monkeypatch


@pytest.fixture
def checkout(clean_env, tmp_path):
    """A fake checkout: <root>/python/attnc is the package, <root>/include/attnc/attnc_c.h."""
    root = tmp_path / "checkout"
    package = root / "python" / "attnc"
    package.mkdir(parents=True)
    touch(root / "include" / "attnc" / "attnc_c.h")
    clean_env.setattr(_loader, "_PACKAGE_DIR", package)
    return root


# ---- library_path ----

def test_library_path_env_override_wins(checkout, tmp_path):
    touch(checkout / "python" / "attnc" / "lib" / "libattnc.so")
    override = touch(tmp_path / "elsewhere" / "libattnc.so")
    os.environ["ATTNC_LIB"] = str(override)
    assert _loader.library_path() == str(override)


def test_library_path_env_override_must_exist(checkout, tmp_path):
    touch(checkout / "python" / "attnc" / "lib" / "libattnc.so")
    os.environ["ATTNC_LIB"] = str(tmp_path / "missing.so")
    with pytest.raises(FileNotFoundError, match=r"ATTNC_LIB: expected .*missing\.so"):
        _loader.library_path()


def test_library_path_package_library_before_source_tree_build(checkout):
    bundled = touch(checkout / "python" / "attnc" / "lib" / "libattnc.so")
    built = touch(checkout / "build" / "lib" / "libattnc.so")
    assert _loader.library_path() == str(bundled)
    bundled.unlink()
    assert _loader.library_path() == str(built)


def test_library_path_source_tree_build_only_in_a_checkout(checkout):
    touch(checkout / "build" / "lib" / "libattnc.so")
    (checkout / "include" / "attnc" / "attnc_c.h").unlink()
    with pytest.raises(FileNotFoundError):
        _loader.library_path()


def test_library_path_not_found_names_every_place_tried(checkout):
    with pytest.raises(FileNotFoundError) as raised:
        _loader.library_path()
    message = str(raised.value)
    assert "ATTNC_LIB" in message
    assert str(checkout / "python" / "attnc" / "lib" / "libattnc.so") in message
    assert str(checkout / "build" / "lib" / "libattnc.so") in message


# ---- configure_nvrtc ----

def wheel_nvrtc(site: Path, cuda: int) -> Path:
    relative = ("nvidia/cu13/lib/libnvrtc.so.13" if cuda == 13
                else "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
    return touch(site / relative)


def test_configure_nvrtc_finds_the_cuda13_wheel_on_sys_path(clean_env, tmp_path):
    site = tmp_path / "site-packages"
    nvrtc = wheel_nvrtc(site, 13)
    sys.path.append(str(site))
    assert _loader.configure_nvrtc() == str(nvrtc)
    assert os.environ["ATTNC_NVRTC_PATH"] == str(nvrtc)


def test_configure_nvrtc_finds_the_cuda12_wheel(clean_env, tmp_path):
    site = tmp_path / "site-packages"
    nvrtc = wheel_nvrtc(site, 12)
    sys.path.append(str(site))
    assert _loader.configure_nvrtc() == str(nvrtc)
    assert os.environ["ATTNC_NVRTC_PATH"] == str(nvrtc)


def test_configure_nvrtc_prefers_cuda13_over_an_earlier_cuda12(clean_env, tmp_path):
    wheel_nvrtc(tmp_path / "first", 12)
    nvrtc13 = wheel_nvrtc(tmp_path / "second", 13)
    sys.path.extend([str(tmp_path / "first"), str(tmp_path / "second")])
    assert _loader.configure_nvrtc() == str(nvrtc13)


def test_configure_nvrtc_keeps_the_env_override(clean_env, tmp_path):
    wheel_nvrtc(tmp_path / "site", 13)
    sys.path.append(str(tmp_path / "site"))
    os.environ["ATTNC_NVRTC_PATH"] = "/chosen/by/the/user/libnvrtc.so"
    assert _loader.configure_nvrtc() is None
    assert os.environ["ATTNC_NVRTC_PATH"] == "/chosen/by/the/user/libnvrtc.so"


def test_configure_nvrtc_treats_an_empty_override_as_unset(clean_env, tmp_path):
    nvrtc = wheel_nvrtc(tmp_path / "site", 13)
    sys.path.append(str(tmp_path / "site"))
    os.environ["ATTNC_NVRTC_PATH"] = ""
    assert _loader.configure_nvrtc() == str(nvrtc)


def toolkit_in_ld_library_path(tmp_path, monkeypatch, soname):
    touch(tmp_path / "ldpath" / soname)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path / "ldpath"))


def toolkit_in_loader_cache(tmp_path, monkeypatch, soname):
    path = touch(tmp_path / "cache" / soname)
    monkeypatch.setattr(_loader, "_ldconfig_libraries", lambda: {soname: str(path)})


def toolkit_under(variable):
    def place(tmp_path, monkeypatch, soname):
        touch(tmp_path / variable / "lib64" / soname)
        monkeypatch.setenv(variable, str(tmp_path / variable))
    return place


def toolkit_at_default_root(tmp_path, monkeypatch, soname):
    touch(tmp_path / "no-default-cuda" / "lib64" / soname)


@pytest.mark.parametrize("soname", ["libnvrtc.so.13", "libnvrtc.so"])
@pytest.mark.parametrize("place", [toolkit_in_ld_library_path, toolkit_in_loader_cache,
                                   toolkit_under("CUDA_HOME"), toolkit_under("CUDA_PATH"),
                                   toolkit_at_default_root],
                         ids=["LD_LIBRARY_PATH", "ldconfig", "CUDA_HOME", "CUDA_PATH",
                              "default-root"])
def test_configure_nvrtc_leaves_a_toolkit_nvrtc_to_libattnc(clean_env, tmp_path, place, soname):
    wheel_nvrtc(tmp_path / "site", 13)
    sys.path.append(str(tmp_path / "site"))
    place(tmp_path, clean_env, soname)
    assert _loader.configure_nvrtc() is None
    assert "ATTNC_NVRTC_PATH" not in os.environ


def test_configure_nvrtc_ignores_a_cuda12_only_toolkit(clean_env, tmp_path):
    # libattnc tries the soname libnvrtc.so.12 last, after every CUDA 13 place: a wheel's 13 wins.
    toolkit_in_loader_cache(tmp_path, clean_env, "libnvrtc.so.12")
    nvrtc = wheel_nvrtc(tmp_path / "site", 13)
    sys.path.append(str(tmp_path / "site"))
    assert _loader.configure_nvrtc() == str(nvrtc)


def test_configure_nvrtc_without_toolkit_or_wheel_sets_nothing(clean_env):
    assert _loader.configure_nvrtc() is None
    assert "ATTNC_NVRTC_PATH" not in os.environ


@pytest.mark.parametrize("chosen_by", ["wheel", "ATTNC_NVRTC_PATH"])
def test_configure_nvrtc_loads_the_builtins_beside_the_chosen_nvrtc(clean_env, tmp_path,
                                                                      chosen_by):
    nvrtc = wheel_nvrtc(tmp_path / "site", 13)
    builtins = touch(nvrtc.parent / "libnvrtc-builtins.so.13.0")
    touch(nvrtc.parent / "libnvrtc-builtins.alt.so.13.0")
    if chosen_by == "wheel":
        sys.path.append(str(tmp_path / "site"))
    else:
        os.environ["ATTNC_NVRTC_PATH"] = str(nvrtc)
    loads = []
    clean_env.setattr(_loader.ctypes, "CDLL", lambda path, mode=0: loads.append((path, mode)))
    _loader.configure_nvrtc()
    assert loads == [(str(builtins), ctypes.RTLD_GLOBAL)]


def test_ldconfig_listing_is_read_as_soname_to_path(monkeypatch, tmp_path):
    fake = tmp_path / "bin" / "ldconfig"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n"
                    "echo '3 libs found in cache `/etc/ld.so.cache'\"'\"\n"
                    "echo '\tlibnvrtc.so.13 (libc6,x86-64) => /opt/cuda/lib/libnvrtc.so.13'\n"
                    "echo '\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    assert _loader._ldconfig_libraries() == {
        "libnvrtc.so.13": "/opt/cuda/lib/libnvrtc.so.13",
        "libz.so.1": "/lib/x86_64-linux-gnu/libz.so.1"}


# ---- load_library ----

def test_load_library_configures_nvrtc_first_and_loads_once(checkout, tmp_path, monkeypatch):
    nvrtc = wheel_nvrtc(tmp_path / "site", 13)
    sys.path.append(str(tmp_path / "site"))
    library = touch(checkout / "python" / "attnc" / "lib" / "libattnc.so")
    loads = []

    def fake_cdll(path):
        loads.append((path, os.environ.get("ATTNC_NVRTC_PATH")))
        return object()

    monkeypatch.setattr(_loader, "_library", None)
    monkeypatch.setattr(_loader.ctypes, "CDLL", fake_cdll)
    first = _loader.load_library()
    assert _loader.load_library() is first
    assert loads == [(str(library), str(nvrtc))]


# ---- the version ----

def test_version_is_the_librarys():
    try:
        path = _loader.library_path()
    except FileNotFoundError as error:
        pytest.skip(f"no libattnc.so to ask ({error})")
    library = ctypes.CDLL(path)
    library.attnc_version.restype = ctypes.c_char_p
    assert library.attnc_version().decode() == __version__


# ---- the wheel (ctest python/packaging: ATTNC_LIB_PREBUILT is the build's libattnc.so) ----

SM90_SPEC = """name: packaging_check
head_dim: 64
dtype: bf16
heads: 4
mask: causal
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel `python -m build --wheel` makes from a copy of python/, and a venv holding it."""
    prebuilt = os.environ.get("ATTNC_LIB_PREBUILT")
    if not prebuilt:
        pytest.skip("set ATTNC_LIB_PREBUILT to a built libattnc.so to build and install the wheel")
    work = tmp_path_factory.mktemp("wheel")
    # A copy outside the checkout, so that the build can only take the library it is given and
    # leaves no build/ or egg-info in the source tree.
    source = work / "python"
    shutil.copytree(REPO / "python", source, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", "lib"))
    dist = work / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                    str(dist), str(source)], check=True, capture_output=True, timeout=300)
    (built,) = dist.glob("*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-index", "--no-deps", "--disable-pip-version-check", str(built)],
                   check=True, timeout=300)
    return built, python, work


def run_in_venv(python: Path, work: Path, code: str) -> str:
    """Runs code in the venv, away from the checkout and with no attnc or torch variable set."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("ATTNC_LIB", "ATTNC_LIB_PREBUILT", "PYTHONPATH")}
    env["ATTNC_CACHE_DIR"] = str(work / "cache")
    result = subprocess.run([str(python), "-c", code], cwd=work, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_built_wheel_is_tagged_for_any_python3_on_this_platform(wheel):
    built, _, _ = wheel
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert built.name == f"attnc-{__version__}-py3-none-{platform}.whl"
    with zipfile.ZipFile(built) as archive:
        metadata = archive.read(f"attnc-{__version__}.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in metadata
    assert f"Tag: py3-none-{platform}" in metadata


def test_built_wheel_holds_libattnc(wheel):
    built, _, _ = wheel
    with zipfile.ZipFile(built) as archive:
        library = archive.getinfo("attnc/lib/libattnc.so")
    assert library.file_size == Path(os.environ["ATTNC_LIB_PREBUILT"]).stat().st_size


def test_built_wheel_imports_without_torch(wheel):
    _, python, work = wheel
    output = run_in_venv(python, work, (
        "import importlib.util, attnc, attnc._loader as loader\n"
        "assert importlib.util.find_spec('torch') is None, 'torch is in the venv'\n"
        "print(attnc.__version__)\n"
        "print(loader.library_path())\n"))
    version, library = output.split()
    assert version == __version__
    assert Path(library).is_relative_to(python.parent.parent)
    assert Path(library).parts[-3:] == ("attnc", "lib", "libattnc.so")


def test_built_wheel_compiles_for_sm90a_without_a_gpu(wheel):
    _, python, work = wheel
    output = run_in_venv(python, work, (
        "import attnc\n"
        f"kernel = attnc.compile(attnc.Spec.from_yaml({SM90_SPEC!r}), target='sm_90a')\n"
        "print(kernel.info.name, kernel.info.target)\n"))
    assert output.split() == ["packaging_check", "sm_90a"]
