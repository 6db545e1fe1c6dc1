#!/usr/bin/env bash
# Makes sure a Debian 12 machine can build and test attnc: installs missing Debian packages (as root),
# checks for NVRTC from the CUDA toolkit, finds or fetches a cuobjdump for the SASS checks, and
# with --python makes the venv the Python package's tests run in (BUILD_DIR/python-venv).
# Fast path: when everything is present it touches no network and takes well under a second.
#
# Usage: scripts/install-deps.sh [--python] [BUILD_DIR]   (default: build; tools go to
# BUILD_DIR/tools)
set -euo pipefail

python_venv=0
if [[ ${1:-} == --python ]]; then
  python_venv=1
  shift
fi
build_dir=${1:-build}
tools_dir=$build_dir/tools

# llvm-22-dev's CMake package fails on zstd::libzstd_shared without libzstd-dev; attnc links zlib
# and zstd statically (cmake/StaticLLVM.cmake), hence the -dev packages.
# python3-venv: Debian's python3 makes no venv (no ensurepip) without it.
required=(cmake ninja-build g++ make python3 python3-venv
          llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools libzstd-dev zlib1g-dev
          libcli11-dev libgtest-dev)

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

note() { echo "install-deps: $*"; }
warn() { echo "install-deps: WARNING: $*" >&2; }

apt_install() {
  note "installing: $*"
  apt-get update
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"; then
    echo "install-deps: apt-get install failed for: $*" >&2
    echo "install-deps: the llvm-22 packages must be available from a configured apt source" \
         "(Debian bookworm's, or apt.llvm.org's llvm-toolchain-bookworm-22)" >&2
    exit 1
  fi
}

# ---- Debian packages ----
if installed libmlir-19-dev; then
  warn "libmlir-19-dev is installed; it conflicts with libmlir-22-dev (remove it: apt-get remove libmlir-19-dev)"
fi

missing=()
for pkg in "${required[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing Debian packages: ${missing[*]}" >&2
    echo "install-deps: run as root: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  apt_install "${missing[@]}"
fi

# ---- NVRTC (CUDA toolkit; dlopen-ed at test time, never installed from here) ----
cuda=${CUDA_HOME:-/usr/local/cuda}
ldconfig_bin=$(command -v ldconfig || echo /sbin/ldconfig)
if ! { "$ldconfig_bin" -p 2>/dev/null | grep -q 'libnvrtc\.so\.13 '; } &&
   [[ ! -e $cuda/lib64/libnvrtc.so.13 ]]; then
  note "NOTE: libnvrtc.so.13 not found (ldconfig -p, $cuda/lib64). attnc still builds and emits" \
       "CUDA C++, but tests that compile kernels with NVRTC need the CUDA 13 toolkit; this script" \
       "does not install it."
fi

# ---- cuobjdump (optional: SASS checks of the compiled examples) ----
# The result is a symlink at $tools_dir/bin/cuobjdump (the CMake tests look there first).
# cuobjdump -sass needs nvdisasm beside it or on PATH, so the pip fallback fetches both.
has_nvdisasm() { [[ -x $(dirname "$1")/nvdisasm ]] || command -v nvdisasm >/dev/null; }

link_cuobjdump() {
  mkdir -p "$tools_dir/bin"
  ln -sfn "$(readlink -f "$1")" "$tools_dir/bin/cuobjdump"
  readlink -f "$1" > "$tools_dir/cuobjdump.path"
}

pip_dir=$tools_dir/pip
pip_cuobjdump=$pip_dir/nvidia/cu13/bin/cuobjdump
failed_marker=$tools_dir/cuobjdump.unavailable
cuobjdump_found=
for candidate in "${CUOBJDUMP:-}" "$(command -v cuobjdump || true)" "$cuda/bin/cuobjdump" "$pip_cuobjdump"; do
  if [[ -n $candidate && -x $candidate ]] && has_nvdisasm "$candidate"; then
    cuobjdump_found=$candidate
    break
  fi
done

if [[ -z $cuobjdump_found && ! -e $failed_marker ]]; then
  note "cuobjdump/nvdisasm not found; fetching them from PyPI into $pip_dir"
  if ! python3 -m pip --version >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]] && ! installed python3-pip; then
    ( apt_install python3-pip ) || true
  fi
  mkdir -p "$tools_dir"
  if timeout 300 python3 -m pip install --quiet --disable-pip-version-check --no-deps \
       --target "$pip_dir" 'nvidia-cuda-cuobjdump>=13,<14' 'nvidia-cuda-nvdisasm>=13,<14' \
       2> >(grep -v "Running pip as the 'root' user" >&2) &&
     [[ -x $pip_cuobjdump ]]; then
    cuobjdump_found=$pip_cuobjdump
  else
    # Remember the failure so every build does not retry the network; `make clean` retries.
    touch "$failed_marker"
  fi
fi

if [[ -n $cuobjdump_found ]]; then
  link_cuobjdump "$cuobjdump_found"
else
  rm -f "$tools_dir/bin/cuobjdump" "$tools_dir/cuobjdump.path"
  warn "################################################################################"
  warn "no cuobjdump (+ nvdisasm): the SASS checks of the example kernels will be SKIPPED."
  warn "Put cuobjdump on PATH, set CUOBJDUMP=/path/to/cuobjdump, or allow"
  warn "'pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm' (then rm $failed_marker)."
  warn "################################################################################"
fi

# ---- Python venv for the attnc package's tests (--python; `make check` asks for it) ----
# torch is PyPI's default wheel (the CUDA one, about 5 GB with its nvidia-* wheels); setuptools and
# wheel let the packaging test build the attnc wheel without network (--no-isolation). A venv
# named by $ATTNC_PYTHON_VENV is one's own and left as it is.
in_ci() { [[ -n ${CI:-} && ${CI:-} != false ]]; }

if ((python_venv)) && [[ -z ${ATTNC_PYTHON_VENV:-} ]]; then
  venv=$build_dir/python-venv
  # As for cuobjdump: a failure outside CI is remembered, so that every build does not retry the
  # network; `make clean` (or removing the file) retries.
  venv_failed_marker=$build_dir/python-venv.unavailable
  python_packages=(torch numpy pyyaml pytest build wheel 'setuptools>=64')
  # Written last, with the package list: a venv whose list differs is filled again.
  marker=$venv/.attnc-deps
  if [[ ! -x $venv/bin/python || $(cat "$marker" 2>/dev/null) != "${python_packages[*]}" ]] &&
     { in_ci || [[ ! -e $venv_failed_marker ]]; }; then
    venv_start=$EPOCHREALTIME
    note "filling the Python venv $venv: ${python_packages[*]}"
    rm -f "$marker"
    if python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' &&
       { [[ -x $venv/bin/python ]] || python3 -m venv "$venv"; } &&
       "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
         "${python_packages[@]}"; then
      echo "${python_packages[*]}" > "$marker"
      rm -f "$venv_failed_marker"
      venv_ms=$(( (${EPOCHREALTIME//[.,]/} - ${venv_start//[.,]/}) / 1000 ))
      note "Python venv filled in $((venv_ms / 1000)).$((venv_ms / 100 % 10))s"
    elif in_ci; then
      echo "install-deps: could not fill the Python venv $venv (python3 >= 3.9, python3-venv," \
           "and PyPI are needed); CI runs the Python tests, so this is an error" >&2
      exit 1
    else
      mkdir -p "$build_dir"
      touch "$venv_failed_marker"
      warn "could not fill the Python venv $venv: the Python package's tests will be SKIPPED" \
           "(rm $venv_failed_marker to retry)"
    fi
  fi
fi
