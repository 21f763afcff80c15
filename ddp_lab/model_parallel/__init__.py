"""Chapters 15, 15c, 15d, 15f and 15g: splitting the model itself over ranks, and choosing how.

- ``tensor_parallel``: the Megatron MLP split column- and row-wise over ranks, with its f and g operators (15, 15d);
- ``tp_cost``: tensor against data parallelism, per layer, in the alpha-beta model (15d);
- ``choosing``: a layout for a given model and cluster, memory first, then communication (15d);
- ``pipeline``: GPipe and 1F1B schedules, and the bubble, by arithmetic (no torch) (15, 15c);
- ``pipeline_run``: the schedules run on real ranks with ``torch.distributed.pipelining``, each
  micro-batch's forward and backward timed (15c);
- ``pipeline_timeline``: what a run's records say: order, bubble, activations held (15c);
- ``checkpointing``: activation checkpointing, its memory saved and its recomputation counted (15c);
- ``two_d``: FSDP x tensor parallelism on a 2-D ``DeviceMesh``, its collectives per mesh
  dimension, and the recipe from a chosen layout to the two calls (15f);
- ``deep_pipelines``: interleaved 1F1B and zero-bubble schedules with virtual stages, and
  data x pipeline parallelism (15f);
- ``experts``: a mixture-of-experts layer, one expert per rank, tokens dispatched and combined
  with all-to-all (15g);
- ``ring_attention``: context parallelism, key/value blocks passed round a ring, softmax
  combined online (15g);
- ``sequence_parallel``: Megatron's sequence parallelism on 15d's MLP, reduce-scatter and
  all-gather in place of the all-reduce (15g).

FSDP, which shards data parallelism rather than the model, is in ``ddp_lab.data_parallel.fsdp``.
"""
