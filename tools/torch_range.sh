#!/usr/bin/env bash
# Which torch releases the book's notebooks pass on (issue 50): for each release
# given (default: 2.11.0 to 2.15.0, the range pyproject.toml states), a fresh
# virtual environment with that torch from the package index, then nbval on
# four notebooks (Chapters 2, 5, 8 and 11: widgets, collectives, DDP, torchrun)
# and tests/test_launch.py, run against this checkout's ddp_lab.
#
#   tools/torch_range.sh                    # every release of the range
#   tools/torch_range.sh 2.11.0 2.15.0      # some of them
#   PYTHON=python3.13 tools/torch_range.sh  # another interpreter (default python3.11)
#
# A one-off measurement, not part of the suite: each release is a CUDA build
# from PyPI (about 2.6 GB downloaded, 5 GB installed, 3 minutes to install on
# two cores) and its run takes about 4 more. Each venv is deleted after its run;
# the logs stay in _build/torch_range/ (one per release, and summary.txt).
# pip's configuration files are skipped for the installs (PIP_CONFIG_FILE=/dev/null),
# so that a machine-wide cap on torch (this project's CI machines have one at
# 2.14.1) does not hide the newer releases.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root="$PWD"
python="${PYTHON:-python3.11}"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.11.0 2.12.1 2.13.0 2.14.1 2.15.0)
notebooks=(book/part1_foundations/02_nodes_and_ranks.ipynb book/part2_communication/05_collectives.ipynb
           book/part3_ddp/08_distributed_data_parallel.ipynb book/part4_running/11_torchrun.ipynb)
logs="$root/_build/torch_range"
mkdir -p "$logs"
# the suite's rules and those for what differs on an older torch by design
# (each said on its page), as tests/test_colab_pinned.py applies them
cat tests/nbval_sanitize.cfg tests/nbval_older_torch.cfg >"$logs/nbval_sanitize.cfg"
for version in "${versions[@]}"; do
    work="$(mktemp -d -t torch-range-XXXXXX)"
    log="$logs/torch-$version.log"
    echo "=== torch $version ($("$python" --version)) ===" | tee "$log"
    start=$SECONDS
    "$python" -m venv "$work/venv"
    if ! PIP_CONFIG_FILE=/dev/null "$work/venv/bin/python" -m pip install -q "torch==$version" \
            pytest pytest-xdist nbval nbclient ipykernel "ipywidgets>=8" "anywidget>=0.9" matplotlib \
            "cloudpickle>=2.2" numpy psutil "jsonschema>=4" py-spy >>"$log" 2>&1; then
        echo "torch $version: install failed (see $log)" | tee -a "$logs/summary.txt"
        rm -rf "$work"; continue
    fi
    echo "installed in $((SECONDS - start)) s, $(du -sh "$work/venv" | cut -f1)" | tee -a "$log"
    "$work/venv/bin/python" -m pip freeze | grep -i -E '^(torch|ipywidgets|ipykernel|anywidget|numpy|nbval|pytest)==' >>"$log"
    start=$SECONDS
    # the checkout's ddp_lab, for pytest, every kernel nbval starts and every rank
    PYTHONPATH="$root" "$work/venv/bin/python" -m pytest -n 0 -p no:cacheprovider -q -rf --tb=short \
        --nbval-sanitize-with "$logs/nbval_sanitize.cfg" \
        "${notebooks[@]}" tests/test_launch.py >>"$log" 2>&1
    rc=$?
    result="$(tail -n 1 "$log")"
    echo "torch $version: pytest exit $rc in $((SECONDS - start)) s: $result" | tee -a "$logs/summary.txt"
    grep -E '^FAILED' "$log" | sed 's/^/    /' | tee -a "$logs/summary.txt"
    rm -rf "$work"
done
