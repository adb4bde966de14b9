#!/usr/bin/env bash
# Run transformers' own common model tests (ModelTesterMixin) on every Avey-B class.
# They ship in transformers' source distribution only: fetch the one matching the installed release from PyPI
# (the unit tests themselves never download), extract its common test files, run tests/test_transformers_common.py.
#   bash tests/transformers_common.sh            (uses .venv/bin/python, or PYTHON=...)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
VERSION=$("$PY" -c "import transformers; print(transformers.__version__)")
CACHE=${TRANSFORMERS_SDIST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/avey-b/transformers-$VERSION}
if [ ! -f "$CACHE/tests/test_modeling_common.py" ]; then
  mkdir -p "$CACHE"
  "$PY" -m pip download -q --no-deps --no-binary :all: "transformers==$VERSION" -d "$CACHE"
  tar -xzf "$CACHE/transformers-$VERSION.tar.gz" -C "$CACHE" --strip-components=1 \
      "transformers-$VERSION/tests/test_modeling_common.py" "transformers-$VERSION/tests/test_configuration_common.py"
fi
"$PY" -m pip install -q parameterized
TRANSFORMERS_TESTS_DIR="$CACHE/tests" exec "$PY" -m pytest -q tests/test_transformers_common.py "$@"
