"""ddp_lab driven from a real Jupyter kernel, as a reader uses it: a launch, and one that fails."""

import re

import nbformat
from nbclient import NotebookClient
from plumbing.unix_socket_kernels import AsyncUnixSocketKernelManager  # tests/plumbing/: no TCP port race

CELLS = [
    # A function, a class and a closure defined in notebook cells.
    "import torch, torch.distributed as dist\nimport ddp_lab\n"
    "class Scale(torch.nn.Module):\n    def forward(self, x):\n        return 10 * x",
    "offset = 1.0\n"
    "def work():\n"
    "    t = Scale()(torch.tensor([dist.get_rank() + offset]))\n"
    "    dist.all_reduce(t)\n"
    "    print('rank', dist.get_rank(), 'has', t.item())\n"
    "    return t.item()",
    "ddp_lab.launch(work, 2)",
    # A failing function: the traceback shows the cell's source line.
    "def broken():\n    return 1 / 0\ntry:\n    ddp_lab.launch(broken, 2)\n"
    "except ddp_lab.RankFailed as error:\n    print(error.remote_traceback)",
    # Left to IPython: it shows the rank's traceback, with the cell's name and
    # none of the launcher's frames or the machine's folders.
    "def odd_rank_fails():\n    if dist.get_rank() == 1:\n        raise ValueError('odd rank')\n"
    "    return 0",
    "ddp_lab.launch(odd_rank_fails, 2)",
]


def run_notebook(cells):
    """Each cell's printed text, and the traceback lines of the last cell's error."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   kernel_manager_class=AsyncUnixSocketKernelManager).execute()
    errors = [o for o in notebook.cells[-1].outputs if o.output_type == "error"]
    return ["".join(o.get("text", "") for o in cell.outputs) for cell in notebook.cells], errors


def test_launch_from_a_kernel_and_a_failure_shown_as_the_readers_code():
    outputs, errors = run_notebook(CELLS)
    assert outputs[2] == (
        "ddp_lab: backend 'auto' chose 'gloo' (no CUDA device)\n"
        "[rank 0] rank 0 has 30.0\n[rank 1] rank 1 has 30.0\n")
    assert "return 1 / 0" in outputs[3] and "ZeroDivisionError" in outputs[3]
    [error] = errors
    assert error.ename == "RankFailed"
    shown = "\n".join(error.traceback)
    # the launching cell is In[6], the function's cell In[5] (execution counts from 1)
    assert "Cell In[6], line 1, in <module>\n    ddp_lab.launch(odd_rank_fails, 2)" in shown
    assert ("Traceback from rank 1 (most recent call last):\n"
            "  Cell In[5], line 3, in odd_rank_fails\n    raise ValueError('odd rank')") in shown
    assert shown.endswith("RankFailed: rank 1 raised ValueError: odd rank")
    assert "ddp_lab/launcher" not in shown and "IPython" not in shown
    assert not re.search(r"(?<![\w.~<>/-])/\w", shown), shown  # no absolute path
