#!/usr/bin/env bash
# The system packages `make demo` and `make test` need beyond Python: a JVM for spark-submit and, for
# the lag page's browser test, Chromium. Each missing one is installed from Debian's packages when
# this machine can (root and apt-get), otherwise the script says what to install and fails.
#
#   scripts/system-deps.sh java            # spark-submit
#   scripts/system-deps.sh java chromium   # and the browser test
set -euo pipefail

updated=""
install() {  # install <debian package> <what it is for>
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "$2 is missing: install it (on Debian or Ubuntu: apt-get install -y $1)" >&2
    exit 1
  fi
  echo "Installing $1 ($2) from Debian's packages"
  if [ -z "$updated" ]; then apt-get update -qq; updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
}

for need in "$@"; do
  case "$need" in
    java)
      java -version >/dev/null 2>&1 || install openjdk-17-jre-headless "Java 17+, which spark-submit needs" ;;
    chromium)
      command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
        install chromium "Chromium, which the lag page's test (tests/integration/plugins) drives" ;;
    *) echo "unknown system dependency: $need" >&2; exit 2 ;;
  esac
done
