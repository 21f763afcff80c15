"""The ``%ddp`` and ``%%ddp`` magics: persistent ranks from notebook cells.

    %load_ext ddp_lab
    %ddp start 4                 # 4 ranks, process group initialised once

    %%ddp
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    print(t)                     # shown rank by rank

    %ddp stop

Line magic commands: ``start N [--backend B] [--nodes K] [--threads T]
[--timeout S]`` (checked before running ranks are replaced), ``stop``,
``restart``, ``status`` (running or stopped, and why: a rank that died is
named with its signal), ``push NAME ...`` (the notebook's variables, sent by
value, become the ranks' own: this is how a function defined in an ordinary
cell reaches ``%%ddp`` cells, which see only the ranks' variables). The cell magic takes
``--timeout S``. Every cell runs on every rank, in the ranks' own variables
(``torch``, ``dist``, ``rank``, ``world_size``, ``local_rank`` to begin with).

No chapter uses it yet: a documented tool (README, "Ranks that stay between cells").
"""

from __future__ import annotations

import argparse
import shlex

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from ddp_lab.launcher.persistent import Ranks


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(f"%ddp: {message}\n{self.format_usage()}")


def _line_parser():
    parser = _Parser(prog="%ddp", add_help=False)
    parser.add_argument("command", choices=["start", "stop", "restart", "status", "push"])
    parser.add_argument("world_size", nargs="?", type=int)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=None)
    return parser


def _cell_parser():
    parser = _Parser(prog="%%ddp", add_help=False)
    parser.add_argument("--timeout", type=float, default=None)
    return parser


@magics_class
class DDPMagics(Magics):
    """Holds the notebook's one set of persistent ranks."""

    ranks = None

    @line_magic
    def ddp(self, line):
        words = shlex.split(line)
        if words[:1] == ["push"]:
            self._push(words[1:])
            return
        args = _line_parser().parse_args(words)
        if args.command == "start":
            self._start(args)
        elif args.command == "stop":
            if self.ranks is not None:
                self.ranks.stop()
        elif args.command == "restart":
            self._require_ranks().restart()
        else:
            print(self.ranks if self.ranks is not None else "no ranks started")

    def _push(self, names):
        """``%ddp push NAME ...``: the notebook's variables, by value, on every rank."""
        if not names:
            raise ValueError("%ddp push needs the names of notebook variables, e.g. %ddp push train data")
        namespace = self.shell.user_ns
        missing = [name for name in names if name not in namespace]
        if missing:
            raise NameError(f"%ddp push: no variable named {', '.join(missing)} in the notebook")
        self._require_ranks().push(**{name: namespace[name] for name in names})

    def _start(self, args):
        """Start new ranks; a typo must not cost the running ones their variables.

        ``Ranks(..., start=False)`` checks every argument and starts nothing,
        so the running ranks are stopped only once the new ones can start.
        """
        if args.world_size is None:
            raise ValueError("%ddp start needs the number of ranks, e.g. %ddp start 4")
        options = {"backend": args.backend, "nodes": args.nodes, "threads": args.threads}
        if args.timeout is not None:
            options["timeout"] = args.timeout
        ranks = Ranks(args.world_size, **options, start=False)
        if self.ranks is not None:
            self.ranks.stop()
        self.ranks = ranks
        ranks.start()

    @cell_magic("ddp")
    def ddp_cell(self, line, cell):
        args = _cell_parser().parse_args(shlex.split(line))
        self._require_ranks().execute(cell, timeout=args.timeout)

    def _require_ranks(self):
        if self.ranks is None:
            raise RuntimeError("no ranks yet: start them with %ddp start 4 (any number of ranks)")
        return self.ranks
