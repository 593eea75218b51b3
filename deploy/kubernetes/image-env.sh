#!/usr/bin/env bash
# The Python environment of one of the course's images, made from the course's own lock:
#
#   deploy/kubernetes/image-env.sh learner|instructor|exchange PREFIX
#
# run from the clone (or the image's copy of the parts it needs). The Dockerfile beside this file
# runs it in each image; tests/hub/test_kubernetes_image.py runs it here, with no container runtime,
# and checks the environment it makes. PREFIX becomes a virtual environment with:
#
# - learner:    torch, requirements/dev.lock, ngshare's nbgrader plugins (requirements/no-deps.lock),
#               and the attnlab library as learners get it (the exercise modules are the blank stubs):
#               no solutions/, no autograder/ (its trusted cases), nothing else of the clone.
# - instructor: the same packages and the whole clone, installed editable as `make install` does
#               (the course tool, the references, formgrader).
# - exchange:   the ngshare service alone (ngshare and its dependencies at the lock's versions) and
#               deploy/jupyterhub/ngshare_service.py, which runs it.
#
# The learner and instructor environments also get the class hub's role settings under
# PREFIX/share/attnlab/etc/{learner,instructor} (deploy/jupyterhub/prepare.py writes them, as for the
# one-machine hub): point JUPYTER_CONFIG_PATH at the role's folder.
#
# torch: the version the Makefile pins, from TORCH_INDEX_URL when set (the Dockerfile sets PyTorch's
# CPU index), else from pip's own indexes.
set -euo pipefail
usage="usage: image-env.sh learner|instructor|exchange PREFIX"
role="${1:?$usage}"
prefix="${2:?$usage}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="${PYTHON:-python3}"
case "$role" in learner|instructor|exchange) ;; *) echo "$usage" >&2; exit 2 ;; esac

"$python" -m venv "$prefix"
pip=("$prefix/bin/python" -m pip --disable-pip-version-check --no-input)

if [ "$role" = exchange ]; then
    # the service alone, at the versions the course is tested with
    "${pip[@]}" install --quiet --constraint "$root/requirements/dev.lock" ngshare psycopg psycopg-binary
    install -D -m 0644 "$root/deploy/jupyterhub/ngshare_service.py" "$prefix/share/attnlab/ngshare_service.py"
    exit 0
fi

torch_version="$(sed -n 's/^TORCH_VERSION := //p' "$root/Makefile")"
if [ -n "${TORCH_INDEX_URL:-}" ]; then
    "${pip[@]}" install --quiet --index-url "$TORCH_INDEX_URL" "torch==$torch_version"
else
    "${pip[@]}" install --quiet "torch==$torch_version"
fi
"${pip[@]}" install --quiet -r "$root/requirements/dev.lock"
"${pip[@]}" install --quiet --no-deps -r "$root/requirements/no-deps.lock"

site="$("$prefix/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ "$role" = learner ]; then
    # the library as learners get it, compiled (users cannot write into the image's environment)
    rm -rf "$site/attnlab"
    cp -r "$root/src/attnlab" "$site/attnlab"
    find "$site/attnlab" -name __pycache__ -prune -exec rm -rf {} +
    "$prefix/bin/python" -m compileall -q "$site/attnlab"
else
    "${pip[@]}" install --quiet --no-deps -e "$root"
fi

# the class hub's role settings (jupyter_server_config.py, nbgrader_config.py, JupyterLab's settings)
"$prefix/bin/python" - "$root" "$prefix/share/attnlab" <<'EOF'
import sys
from pathlib import Path

sys.path.insert(0, str(Path(sys.argv[1]) / "deploy" / "jupyterhub"))
from prepare import write_role_configs  # noqa: E402
from settings import Settings  # noqa: E402

write_role_configs(Settings(state=Path(sys.argv[2])))
EOF
chmod -R a+rX,go-w "$prefix"
