"""What a piece of code sends: every collective it issues, by phase, with the bytes it hands over (Chapter 15d).

Chapter 15d counts what tensor parallelism sends, forward and backward, with
:func:`record_collectives`::

    with record_collectives() as log:
        log.phase = "forward"
        z = block(x)
        log.phase = "backward"
        z.sum().backward()
    log.count("all_reduce", "backward"), log.nbytes("all_reduce", "backward")

The recorder is the package's one: ``ddp_lab.collectives.recorder``, which
the labs' checkers use too, and which says how it sees every collective (a
``TorchDispatchMode``) and which tensor's size it writes down. These are its
names, under the module the chapter imports them from.
"""

from ddp_lab.collectives.recorder import Collective, CollectiveLog, record_collectives

__all__ = ["Collective", "CollectiveLog", "record_collectives"]
