"""nbval, comparing the build's fresh execution of a notebook when it is current.

A pytest plugin the root ``conftest.py`` loads. For each notebook nbval
collects, it looks for the build's execution of it (saved by
``book/_ext/execute_ahead.py``); if the inputs it ran from are the ones
this process sees (same code, sources, packages, CPU and settings:
``book/_ext/executed_notebooks.py``), each cell's check is nbval's own,
applied to the outputs the build's kernel produced: an exception in a cell
not tagged to raise one fails it, the outputs are compared with the
committed ones through the same sanitize rules, and a difference is
reported as nbval reports it. Otherwise nbval starts a kernel and executes
the notebook, unchanged, except that the kernel listens on Unix sockets, not
on TCP ports another test could take (``book/_ext/unix_socket_kernels.py``).
``--execute-notebooks`` makes it execute every one.

The summary at the end says how many notebooks were compared from the build
and how many were executed here.
"""

from __future__ import annotations

import nbformat
import pytest
from nbval.cover import setup_coverage
from nbval.kernel import CURRENT_ENV_KERNEL_NAME, NbvalKernelspecManager, RunningKernel
from nbval.plugin import IPyNbCell, IPyNbFile, coalesce_streams

import executed_notebooks
import unix_socket_kernels

FROM_BUILD, HERE = "executed by the build", "executed here"


def pytest_addoption(parser):
    parser.addoption("--execute-notebooks", action="store_true",
                     help="execute every notebook under nbval, even one the build has just "
                          "executed from the same inputs (book/_ext/executed_notebooks.py)")


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    collected = yield
    return [NotebookFromBuild.from_parent(parent, path=file_path) if type(node) is IPyNbFile else node
            for node in collected]


class NotebookFromBuild(IPyNbFile):
    """nbval's notebook, which starts no kernel when the build's execution is current."""

    executed_cells = None  # the build's executed code cells, when they are used

    def collect(self):
        cells = list(super().collect())  # reads the notebook into self.nb
        if self.config.getoption("--execute-notebooks"):
            executed, self.why = None, "--execute-notebooks"
        else:
            executed, self.why = executed_notebooks.matching_execution(self.path, self.nb)
        if executed is not None:
            self.executed_cells = [cell for cell in nbformat.from_dict(executed).cells
                                   if cell.cell_type == "code"]
        for cell in cells:
            yield CellFromBuild.from_parent(self, name=cell.name, cell_num=cell.cell_num,
                                            cell=cell.cell, options=cell.options)

    def setup(self):
        """nbval's setup: a kernel (on Unix sockets) unless the build's execution is used, and the sanitize rules."""
        if self.executed_cells is None:
            self.kernel = KernelOnUnixSockets(self.kernel_name(), cwd=str(self.path.parent),
                                              startup_timeout=self.config.option.nbval_kernel_startup_timeout)
            if getattr(self.config.option, "cov_source", None):
                setup_coverage(self.config, self.kernel, self.path)
        self.setup_sanitize_files()

    def kernel_name(self):
        """The kernel nbval chooses: its command-line options', or else the notebook's own."""
        option = self.config.option
        if option.nbval_current_env:
            return CURRENT_ENV_KERNEL_NAME
        return option.nbval_kernel_name or self.nb.metadata.get("kernelspec", {}).get("name", "python")


class KernelOnUnixSockets(RunningKernel):
    """nbval's running kernel, started by ``unix_socket_kernels.start_new_kernel`` (no TCP port race)."""

    def __init__(self, kernel_name, cwd=None, startup_timeout=60):
        self.km, self.kc = unix_socket_kernels.start_new_kernel(
            kernel_name, startup_timeout=startup_timeout, cwd=cwd,
            manager_options={"kernel_spec_manager": NbvalKernelspecManager()})
        self._ensure_iopub_up()


class CellFromBuild(IPyNbCell):
    """nbval's cell check, on the output the build's kernel produced for it."""

    @property
    def from_build(self):
        return self.parent.executed_cells is not None

    def runtest(self):
        self.user_properties.append(("notebook", FROM_BUILD if self.from_build else HERE))
        self.user_properties.append(("why", self.parent.why))
        if not self.from_build:
            return super().runtest()
        if self.options["skip"]:
            pytest.skip()
        executed = self.parent.executed_cells[self.cell_num]
        assert executed.source == self.cell.source, "the inputs cover every code cell"
        outputs = list(executed.outputs)
        errors = [output for output in outputs if output.output_type == "error"]
        if errors and not self.options["check_exception"]:
            self.raise_cell_error("Cell execution caused an exception", "\n" + "\n".join(errors[0].traceback))
        # From here on, as nbval's runtest ends.
        outputs = coalesce_streams(outputs)
        unrun = self.cell.execution_count is None
        if unrun and self.cell.outputs:
            self.raise_cell_error("Unrun reference cell has outputs")
        if self.options["check"] and not unrun:
            if not self.compare_outputs(outputs, coalesce_streams(self.cell.outputs)):
                self.raise_cell_error("Cell outputs differ", "\n".join(self.comparison_traceback))


_notebooks = {FROM_BUILD: {}, HERE: {}}  # notebook path: why, by who executed it


def pytest_runtest_logreport(report):
    # On the xdist controller, every worker's reports arrive here.
    properties = dict(report.user_properties)
    if report.when == "call" and properties.get("notebook") in _notebooks:
        _notebooks[properties["notebook"]][report.nodeid.split("::")[0]] = properties["why"]


def pytest_terminal_summary(terminalreporter):
    from_build, here = _notebooks[FROM_BUILD], _notebooks[HERE]
    if not (from_build or here):
        return
    terminalreporter.section("nbval: who executed the notebooks")
    terminalreporter.write_line(f"{len(from_build)} compared as the build executed them, from the same inputs "
                                f"(book/_ext/executed_notebooks.py); {len(here)} executed here")
    for path, why in sorted(here.items())[:5]:
        terminalreporter.write_line(f"  {path}: {why}")
    if len(here) > 5:
        terminalreporter.write_line(f"  and {len(here) - 5} more")
