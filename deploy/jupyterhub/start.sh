#!/usr/bin/env bash
# Start the class hub on this machine (as root): prepare the learners' environment, the exchange and
# the groups (prepare.py), then run JupyterHub with jupyterhub_config.py until stopped (Ctrl-C or
# SIGTERM; the users' servers stop with it). Settings: environment variables, see settings.py.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${ATTNLAB_HUB_PYTHON:-$root/.venv/bin/python}"

if [ "$(id -u)" != 0 ]; then
    echo "start.sh must run as root (sudo): the hub starts each user's server as that Unix user." >&2
    exit 1
fi
if [ ! -x "$here/node_modules/.bin/configurable-http-proxy" ]; then
    echo "JupyterHub's proxy is missing: npm ci --prefix $here" >&2
    exit 1
fi
if ! "$python" -c 'import jupyterhub, jupyterhub_idle_culler' 2>/dev/null; then
    echo "JupyterHub is not installed in $python's environment: make install" >&2
    exit 1
fi

"$python" "$here/prepare.py"
url="${ATTNLAB_HUB_URL:-http://127.0.0.1:8000}"
echo "Log in at ${url%/}/hub/login with a Unix account of the groups" \
     "${ATTNLAB_HUB_LEARNERS:-attnlab-learners} or ${ATTNLAB_HUB_INSTRUCTORS:-attnlab-instructors}" \
     "(add one: sudo $here/add-user.sh learner NAME)."
cd "${ATTNLAB_HUB_STATE:-/srv/attnlab-hub}/hub"
exec "$python" -m jupyterhub -f "$here/jupyterhub_config.py"
