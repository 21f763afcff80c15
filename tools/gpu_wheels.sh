#!/usr/bin/env bash
# The wheels tools/gpu_run.sh needs on a lent GPU machine (issue 43), fetched here.
#
#   bash tools/gpu_wheels.sh        # fills .whl/ (git ignores it: .git/info/exclude)
#
# The GPU machine's image has its own Python 3.12, torch, pytest, pytest-xdist,
# numpy, matplotlib, psutil and cloudpickle, and no network. What running the
# notebooks there needs beyond that (nbval, a Jupyter kernel, ipywidgets 8 and
# anywidget for the book's controls) travels as wheels for CPython 3.12, as the
# device tool's README says. pip resolves them with their dependencies here;
# those the image already has are dropped, so that nothing in .whl/ shadows the
# image's own build (its numpy and torch belong together). pytest-xdist travels
# all the same: pyproject.toml's addopts name --no-loadscope-reorder, which
# pytest-xdist has since 3.7, and the image's version is not on record. The list of what the
# image holds is the device tool's KINDS.md, as read on 2026-11-17.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl && mkdir .whl
platforms=()
for tag in manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux2014 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d .whl nbval ipykernel "ipywidgets>=8" "anywidget>=0.9" nbformat nbclient "pytest-xdist>=3.7"
# On the image already (KINDS.md, "Python packages already there").
for name in attrs coverage iniconfig packaging pluggy psutil pygments pytest python_dateutil six \
            typing_extensions tzdata numpy matplotlib cloudpickle; do
  rm -f .whl/"${name}"-[0-9]*.whl
done
ls .whl
du -sh .whl
