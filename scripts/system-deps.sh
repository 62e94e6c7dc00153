#!/usr/bin/env bash
# The system packages `make demo` and `make test` need beyond Python: a JVM for spark-submit and, for
# the lag page's browser test, Chromium. Each missing one is installed from Debian's packages when
# this machine can (root and apt-get). Without root, Chromium is unpacked from the same packages
# into .test-work/chromium (what this machine lacks of them, as apt resolves it; no system change),
# where tests/emulators/chromium.py finds it. Otherwise the script says what to install and fails.
#
#   scripts/system-deps.sh java            # spark-submit
#   scripts/system-deps.sh java chromium   # and the browser test
set -euo pipefail

updated=""
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOCAL_CHROMIUM="$ROOT/.test-work/chromium"

# Chromium without root: apt resolves what this machine lacks (a simulated install against its own
# package lists, kept under .test-work), downloads those packages and unpacks them; bin/chromium runs
# the browser with the unpacked libraries first on its library path.
unpack_chromium() {
  local dir="$LOCAL_CHROMIUM" apt missing
  apt=(-o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o "APT::Sandbox::User=$(id -un)" -o Debug::NoLocking=1)
  rm -rf "$dir" && mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/debs" "$dir/root" "$dir/bin"
  echo "Unpacking Chromium from Debian's packages into $dir (not root: nothing is installed on the system)"
  apt-get "${apt[@]}" update -qq
  mapfile -t missing < <(apt-get "${apt[@]}" -s -qq install --no-install-recommends chromium | awk '/^Inst /{print $2}')
  [ "${#missing[@]}" -gt 0 ] || missing=(chromium chromium-common)
  (cd "$dir/debs" && apt-get "${apt[@]}" -qq download "${missing[@]}")
  for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
  cat >"$dir/bin/chromium" <<WRAPPER
#!/bin/sh
root="$dir/root"
LD_LIBRARY_PATH="\$root/usr/lib/chromium:\$root/usr/lib/x86_64-linux-gnu:\$root/lib/x86_64-linux-gnu:\$root/usr/lib/aarch64-linux-gnu:\$root/lib/aarch64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" \\
  exec "\$root/usr/lib/chromium/chromium" "\$@"
WRAPPER
  chmod +x "$dir/bin/chromium"
  rm -rf "$dir/debs" "$dir/cache" "$dir/lists"
  "$dir/bin/chromium" --version
}
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
        "$LOCAL_CHROMIUM/bin/chromium" --version >/dev/null 2>&1 || {
        if [ "$(id -u)" != 0 ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
          unpack_chromium
        else
          install chromium "Chromium, which the lag page's test (tests/integration/plugins) drives"
        fi
      } ;;
    *) echo "unknown system dependency: $need" >&2; exit 2 ;;
  esac
done
