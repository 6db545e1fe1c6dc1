#!/usr/bin/env bash
# Runs pytest in the Python venv that `scripts/install-deps.sh --python` fills (torch, numpy,
# pytest, build), for the ctests of the attnc Python package. Without that venv the test is
# skipped (exit 77) with a message, except in CI ($CI set and not "false"), where it fails.
# $ATTNC_PYTHON_VENV names a venv of one's own to use instead (then taken as filled).
#   test/tools/venv-pytest.sh VENV_DIR PYTEST_ARGS...
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: venv-pytest.sh VENV_DIR PYTEST_ARGS..." >&2; exit 2; }
venv=${ATTNC_PYTHON_VENV:-$1}
shift

# install-deps.sh writes .attnc-deps last, once every package is in.
if [[ ! -x $venv/bin/python || ( -z ${ATTNC_PYTHON_VENV:-} && ! -f $venv/.attnc-deps ) ]]; then
  if [[ -n ${CI:-} && ${CI:-} != false ]]; then
    echo "venv-pytest: no filled Python venv at $venv, and CI is set: it must be there" \
         "(scripts/install-deps.sh --python BUILD_DIR makes it)" >&2
    exit 1
  fi
  echo "venv-pytest: SKIPPED: no filled Python venv at $venv (make it with" \
       "scripts/install-deps.sh --python BUILD_DIR, which \`make check\` runs, or set" \
       "ATTNC_PYTHON_VENV to a venv with torch, numpy, pytest and build)"
  exit 77
fi
exec "$venv/bin/python" -m pytest -p no:cacheprovider "$@"
