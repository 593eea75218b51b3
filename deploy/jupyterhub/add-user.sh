#!/usr/bin/env bash
# Add a learner or an instructor of the class hub (as root); run again to repair one:
#
#   sudo deploy/jupyterhub/add-user.sh learner NAME       # asks for the password (passwd)
#   echo NAME:PASSWORD | sudo deploy/jupyterhub/add-user.sh learner NAME --password-stdin
#
# A Unix account with a private home folder (mode 700: nobody else reads a learner's work or an
# instructor's course directory), in the role's group (ATTNLAB_HUB_LEARNERS, default
# attnlab-learners; ATTNLAB_HUB_INSTRUCTORS, default attnlab-instructors).
set -euo pipefail
usage="usage: add-user.sh learner|instructor NAME [--password-stdin]"
role="${1:?$usage}"
name="${2:?$usage}"
case "$role" in
    learner) group="${ATTNLAB_HUB_LEARNERS:-attnlab-learners}" ;;
    instructor) group="${ATTNLAB_HUB_INSTRUCTORS:-attnlab-instructors}" ;;
    *) echo "$usage" >&2; exit 2 ;;
esac
if [ "$(id -u)" != 0 ]; then
    echo "add-user.sh must run as root (sudo)." >&2
    exit 1
fi

getent group "$group" >/dev/null || groupadd "$group"
if id -u "$name" >/dev/null 2>&1; then
    usermod -a -G "$group" "$name"
else
    useradd --create-home --shell /bin/bash --groups "$group" "$name"
fi
home="$(getent passwd "$name" | cut -d: -f6)"
chmod 700 "$home"

if [ "${3:-}" = "--password-stdin" ]; then
    chpasswd
else
    passwd "$name"
fi
echo "$name is a $role of the class hub ($group; home $home, private)."
