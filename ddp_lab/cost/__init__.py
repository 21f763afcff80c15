"""What communication costs, by arithmetic: the book's cost models, from one message to a cluster.

No process is started and no torch imported here: every answer is a formula
fed with sizes, latencies and bandwidths. The modules build on each other:

- ``alpha_beta``: the alpha-beta model of one message (``latency + n /
  bandwidth``) and of the ring collectives, algorithm against bus bandwidth,
  the fit of a latency and a bandwidth to measurements (Chapters 4 and 5),
  the naive all-reduce (Chapter 6) and DDP's buckets (Chapter 8);
- ``links``: the book's one table of links (NVLink, PCIe, InfiniBand,
  Ethernet), each with its source, and a ring all-reduce over nodes, at the
  pace of its slowest link (Chapters 1 and 12b);
- ``scaling``: the cost of one DDP step on a cluster, and when data
  parallelism stops scaling (Chapter 12b);
- ``published_scaling``: scaling results others published, and what the
  model predicts for them (Chapter 12b);
- ``roofline``: arithmetic intensity, ridge points and the roofline of a
  GPU's datasheet; how tensor parallelism lowers a layer's intensity
  (Chapter 14b);
- ``two_d``: the collectives of FSDP x tensor parallelism on a 2-D mesh, per
  dimension and phase (Chapter 15f);
- ``experts``, ``sequences``: the bytes of expert parallelism's all-to-alls,
  of ring attention, and when ring attention hides its transfers (Chapter 15g).

The alpha-beta model is what most pages use, so its names are also this
package's own (``from ddp_lab.cost import collective_time``, ``from ddp_lab
import cost`` then ``cost.bus_factor(...)``); the other three are imported
by their module (``from ddp_lab.cost.links import LINKS``).

>>> from ddp_lab.cost import bus_factor
>>> bus_factor("all_reduce", 4)
1.5
"""

from ddp_lab.cost.alpha_beta import (
                                     COLLECTIVES,
                                     algbw,
                                     bucket_schedule,
                                     bucketed_backward_time,
                                     bus_factor,
                                     busbw,
                                     bytes_sent_per_rank,
                                     collective_time,
                                     fit_latency_bandwidth,
                                     naive_all_reduce_time,
                                     ring_steps,
                                     transfer_time,
)

__all__ = ["COLLECTIVES", "transfer_time", "bus_factor", "ring_steps", "bytes_sent_per_rank", "collective_time",
           "algbw", "busbw", "fit_latency_bandwidth", "naive_all_reduce_time", "bucket_schedule",
           "bucketed_backward_time"]
