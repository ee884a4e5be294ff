# Sourced by scripts/test and scripts/up (not run on its own): the Python environment obsbox runs from.
#
#   use_python_env EXTRAS   sets PY to the interpreter to run, with obsbox installed (editable) and EXTRAS,
#                           and puts the environment's bin/ first on PATH, as its `activate` would
#   apt_install PACKAGE...  installs Debian/Ubuntu packages (apt-get update first; sudo when not root)
#   refuse_remote_bind ADDR exits 1 unless ADDR is loopback or ALLOW_REMOTE=1 (compose's published ports)
#
# Which environment:
#   - an active virtual environment (VIRTUAL_ENV) or conda environment (CONDA_PREFIX): used as it is;
#   - otherwise .venv/ in the repository, made with `python3 -m venv` from the first python3 on PATH
#     (OBSBOX_PYTHON names another interpreter), and reused on later runs.
# Nothing is installed into a system Python, and pip never gets --break-system-packages: on an
# externally-managed Python (PEP 668) the venv is the way. Debian and Ubuntu split `venv` off into the
# python3-venv package; it is installed with apt-get when making the venv fails for want of it.
#
# pip runs only when needed: a stamp inside the environment holds a hash of pyproject.toml and this
# checkout's path, and the extras installed. Editing pyproject.toml, or asking for an extra not
# installed yet, reinstalls (keeping the extras installed before); removing .venv/ starts afresh.

OBSBOX_MIN_PYTHON="3.10"
OBSBOX_STAMP_NAME=".obsbox-install"

apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: these packages are missing and there is no apt-get here: $*" >&2
    echo "       install them with this system's package manager, then run this again" >&2
    return 1
  fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "error: installing $* needs root (or sudo)" >&2; return 1; }
    sudo="sudo"
  fi
  echo "installing Debian packages: $*"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Exit with a clear message unless $1 is a Python >= OBSBOX_MIN_PYTHON; $2 says where it came from.
_require_python() {
  local python="$1" origin="$2" version
  if ! version="$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)"; then
    echo "error: cannot run $python ($origin)" >&2
    exit 1
  fi
  if ! "$python" -c "import sys; sys.exit(sys.version_info < (${OBSBOX_MIN_PYTHON/./, }))"; then
    echo "error: obsbox needs Python >= $OBSBOX_MIN_PYTHON, but $python ($origin) is Python $version." >&2
    echo "       Put a newer python3 first on PATH, or name one: OBSBOX_PYTHON=/path/to/python3.11 $0" >&2
    exit 1
  fi
}

# Make .venv/ with $1; on Debian/Ubuntu without python3-venv (no ensurepip), install it and try again.
_make_venv() {
  local base="$1" venv="$2"
  echo "creating $venv with $base"
  if "$base" -m venv "$venv" >/dev/null 2>&1 && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    return 0
  fi
  rm -rf "$venv"
  if ! "$base" -c 'import ensurepip' >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    local minor
    minor="$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    # python3-venv is the default Python's; python3.X-venv the one of the interpreter found
    if [ "$base" = "$(readlink -f /usr/bin/python3 2>/dev/null)" ]; then
      apt_install python3-venv
    else
      apt_install "python${minor}-venv"
    fi
  fi
  if ! "$base" -m venv "$venv"; then
    rm -rf "$venv"
    echo "error: '$base -m venv $venv' failed; on Debian or Ubuntu install python3-venv" >&2
    exit 1
  fi
}

# The stamp's first line: what the install depends on (pyproject.toml and where this checkout is).
_install_key() {
  "$PY" - "$PWD" <<'EOF'
import hashlib
import sys
from pathlib import Path

digest = hashlib.sha256(Path("pyproject.toml").read_bytes())
digest.update(str(Path(sys.argv[1]).resolve()).encode())
print(digest.hexdigest())
EOF
}

# Whether obsbox imports from this checkout (an environment may hold an install of another copy).
_imports_this_checkout() {
  "$PY" - "$PWD" >/dev/null 2>&1 <<'EOF'
import sys
from pathlib import Path

import obsbox

sys.exit(Path(obsbox.__file__).resolve().parents[1] != Path(sys.argv[1]).resolve())
EOF
}

use_python_env() {
  local wanted="$1" prefix origin
  if [ -n "${VIRTUAL_ENV:-}" ]; then
    prefix="$VIRTUAL_ENV" origin="the active virtual environment"
  elif [ -n "${CONDA_PREFIX:-}" ]; then
    prefix="$CONDA_PREFIX" origin="the active conda environment"
  else
    prefix="$PWD/.venv" origin="this repository's .venv"
  fi
  PY="$prefix/bin/python"

  if [ "$prefix" = "$PWD/.venv" ]; then
    if [ -e "$prefix" ] && ! "$PY" -c 'import sys' >/dev/null 2>&1; then
      echo "$prefix does not run (its Python was removed or upgraded): making it again"
      rm -rf "$prefix"
    fi
    if [ ! -e "$prefix" ]; then
      local python="${OBSBOX_PYTHON:-python3}"
      command -v "$python" >/dev/null 2>&1 || { echo "error: no $python on PATH; install Python >= $OBSBOX_MIN_PYTHON" >&2; exit 1; }
      local found="the first python3 on PATH"
      [ -n "${OBSBOX_PYTHON:-}" ] && found="OBSBOX_PYTHON"
      _require_python "$(command -v "$python")" "$found"
      # the interpreter itself, not a pyenv shim or a symlink: the venv keeps pointing at it
      _make_venv "$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))')" "$prefix"
    fi
  elif [ ! -x "$PY" ]; then
    echo "error: $origin ($prefix) has no bin/python" >&2
    exit 1
  fi
  _require_python "$PY" "$origin"

  # as `activate` does: the environment's commands (obsbox, grafanalib's generate-dashboard) come first
  export PATH="$prefix/bin:$PATH"
  [ -n "${CONDA_PREFIX:-}" ] && [ "$prefix" = "$CONDA_PREFIX" ] || export VIRTUAL_ENV="$prefix"

  local stamp="$prefix/$OBSBOX_STAMP_NAME" key installed="" extras
  key="$(_install_key)"
  [ -f "$stamp" ] && installed="$(sed -n 2p "$stamp")"
  extras="$(printf '%s\n' ${wanted//,/ } ${installed//,/ } | sort -u | paste -sd, -)"
  if [ "$(sed -n 1p "$stamp" 2>/dev/null)" = "$key" ] && [ "$extras" = "$installed" ] && _imports_this_checkout; then
    echo "Python: $("$PY" -V 2>&1) in $prefix ($origin; obsbox[$installed] installed, pyproject.toml unchanged)"
    return 0
  fi
  echo "Python: $("$PY" -V 2>&1) in $prefix ($origin): pip install -e '.[$extras]'"
  "$PY" -m pip install -q --disable-pip-version-check -e ".[$extras]"
  printf '%s\n%s\n' "$key" "$extras" >"$stamp"
}

# Published ports listen on BIND_ADDRESS (compose/.env). Beyond loopback they open ingestion and the
# backends' APIs to whoever reaches that address (compose/README.md lists what each port exposes), so
# a non-loopback address needs ALLOW_REMOTE=1. Exits 1 with what would be exposed.
refuse_remote_bind() {
  local bind="$1"
  case "$bind" in
    127.*|::1|localhost) return 0 ;;
  esac
  if [ "${ALLOW_REMOTE:-0}" != 1 ]; then
    echo "BIND_ADDRESS=$bind would open OTLP ingestion (${OTLP_GRPC_PORT:-4317}, ${OTLP_HTTP_PORT:-4318})," \
      "Prometheus' write and query APIs (${PROMETHEUS_PORT:-9090}), Tempo's query API (3200)" \
      "and /metrics (9465, 8000) to anyone who can reach $bind (Loki's 3100 stays on 127.0.0.1)." \
      "Set ALLOW_REMOTE=1 in compose/.env to accept that." >&2
    exit 1
  fi
  echo "warning: BIND_ADDRESS=$bind with ALLOW_REMOTE=1: ingestion and the backends' APIs are reachable there" >&2
}
