"""ddp_lab driven from a real Jupyter kernel, as a reader uses it."""

import nbformat
from nbclient import NotebookClient
from unix_socket_kernels import AsyncUnixSocketKernelManager  # book/_ext: no TCP port race

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
    "%load_ext ddp_lab\n%ddp start 2",
    "%%ddp\nt = torch.tensor([float(rank)])\ndist.all_reduce(t)\nt",
    "%%ddp\nt * 2",
    "%ddp stop",
]


def run_notebook(cells):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   kernel_manager_class=AsyncUnixSocketKernelManager).execute()
    return ["".join(o.get("text", "") for o in cell.outputs) for cell in notebook.cells]


def test_launch_and_the_magic_from_a_kernel():
    outputs = run_notebook(CELLS)
    assert outputs[2] == (
        "ddp_lab: backend 'auto' chose 'gloo' (no CUDA device)\n"
        "[rank 0] rank 0 has 30.0\n[rank 1] rank 1 has 30.0\n")
    assert "return 1 / 0" in outputs[3] and "ZeroDivisionError" in outputs[3]
    assert outputs[5] == "[rank 0] tensor([1.])\n[rank 1] tensor([1.])\n"
    assert outputs[6] == "[rank 0] tensor([2.])\n[rank 1] tensor([2.])\n"
