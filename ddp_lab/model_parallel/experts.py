"""Expert parallelism: a mixture-of-experts layer with one expert per rank (Chapter 15g).

A top-1 router (Switch Transformer's, Fedus et al., 2021, arXiv 2101.03961)
sends each token to one expert, a small MLP, and scales the expert's output
by the router's probability for it, ``y = p_e(x) E_e(x)``; the probability
is what carries the gradient back to the router. With one expert per rank
(GShard's layout, Lepikhin et al., 2020, arXiv 2006.16668), each rank
routes its own tokens, then:

1. sorts them by expert and counts them: ``counts[e]`` tokens for expert e;
2. exchanges the counts (an all-to-all of W numbers), so that each expert
   learns how many tokens each rank will send it;
3. **dispatch**: ``all_to_all_single`` with the counts as input split sizes
   and the received counts as output split sizes;
4. runs its expert on what arrived;
5. **combine**: the reverse all-to-all, the two split sizes swapped,
   brings every token's output back to the rank it came from.

:class:`AllToAll` makes the token all-to-alls differentiable: the gradient
of an all-to-all is the all-to-all of the gradients the other way round
(split sizes swapped). :func:`moe_reference` is the same layer computed by
one process on all the tokens, to compare with.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = ["make_moe_weights", "route", "expert_mlp", "moe_reference", "AllToAll", "expert_parallel_moe"]


def make_moe_weights(hidden: int, experts: int, *, seed: int = 0, skew: float = 0.0):
    """The router ``(hidden x experts)`` and each expert's two weights, from one seed.

    ``skew`` is a bias added to the router's logit for expert 0: 0 for a
    router as initialised, larger to send more of the tokens to expert 0.
    Returns ``(router, router_bias, w1, w2)`` with ``w1`` of shape
    ``(experts, hidden, 2 hidden)`` and ``w2`` ``(experts, 2 hidden, hidden)``.
    """
    generator = torch.Generator().manual_seed(seed)
    router = torch.randn(hidden, experts, generator=generator) / hidden ** 0.5
    router_bias = torch.zeros(experts)
    router_bias[0] = skew
    w1 = torch.randn(experts, hidden, 2 * hidden, generator=generator) / hidden ** 0.5
    w2 = torch.randn(experts, 2 * hidden, hidden, generator=generator) / (2 * hidden) ** 0.5
    return router, router_bias, w1, w2


def route(x: torch.Tensor, router: torch.Tensor, router_bias: torch.Tensor):
    """Top-1 routing: ``(expert of each token, its gate probability)``."""
    probs = torch.softmax(x @ router + router_bias, dim=-1)
    gate, expert = probs.max(dim=-1)
    return expert, gate


def expert_mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert: ``GeLU(x w1) w2``."""
    return F.gelu(x @ w1) @ w2


def moe_reference(x, router, router_bias, w1, w2):
    """The whole layer in one process: each token through its expert, scaled by its gate."""
    expert, gate = route(x, router, router_bias)
    out = torch.zeros_like(x)
    for e in range(w1.shape[0]):
        mine = expert == e
        out = out.index_put((mine,), expert_mlp(x[mine], w1[e], w2[e]))
    return out * gate.unsqueeze(-1)


class AllToAll(torch.autograd.Function):
    """``dist.all_to_all_single`` with uneven splits, differentiable.

    Forward: rows ``input_splits[j]`` of the input go to rank j, and
    ``output_splits[i]`` rows arrive from rank i. Backward: the same
    exchange with the two lists swapped, carrying the gradients home.
    """

    @staticmethod
    def forward(ctx, x, input_splits, output_splits, group):
        ctx.splits, ctx.group = (list(input_splits), list(output_splits)), group
        out = x.new_empty((sum(output_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), list(output_splits), list(input_splits), group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        input_splits, output_splits = ctx.splits
        back = grad.new_empty((sum(input_splits),) + tuple(grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), input_splits,
                               output_splits, group=ctx.group)
        return back, None, None, None


def expert_parallel_moe(x, router, router_bias, w1_mine, w2_mine, group=None):
    """This rank's tokens through the layer: ``(output, counts, received)``.

    ``x`` holds this rank's tokens; ``router`` and ``router_bias`` are the
    same on every rank; ``w1_mine`` and ``w2_mine`` are this rank's expert.
    ``counts[e]``: tokens this rank sent to expert e; ``received[s]``: tokens
    this rank's expert received from rank s.
    """
    world = dist.get_world_size(group)
    if router.shape[1] != world:
        raise ValueError(f"one expert per rank: the router has "
                         f"{router.shape[1]} experts for {world} ranks")
    expert, gate = route(x, router, router_bias)
    order = torch.argsort(expert, stable=True)  # tokens grouped by expert
    counts = torch.bincount(expert, minlength=world)
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts, group=group)  # 1. how many
    send, recv = counts.tolist(), received.tolist()
    arrived = AllToAll.apply(x[order], send, recv, group)  # 2. dispatch
    done = expert_mlp(arrived, w1_mine, w2_mine)           # 3. the expert
    back = AllToAll.apply(done, recv, send, group)         # 4. combine
    out = torch.empty_like(back).index_copy(0, order, back)  # undo the sort
    return out * gate.unsqueeze(-1), send, recv


def compare_with_one_process(tokens_per_rank: int = 16, hidden: int = 8, *, skews=(0.0, 3.0), seed: int = 0,
                             atol: float = 1e-6):
    """Inside a rank: the layer under each router ``skew``, against one process running it on all tokens.

    Every rank builds all W ranks' tokens and the same weights (one seed),
    runs the whole layer alone, then its own share expert-parallel, with
    every collective recorded. Returns, per skew, a dict: ``same`` (output,
    gradients of the input, router and own expert, ``allclose`` within
    ``atol``), ``sent`` and ``received`` token counts, and the collectives
    as ``(phase, name, nbytes)``.
    """
    from ddp_lab.collectives.recorder import record_collectives

    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(seed + 1)
    x_all = torch.randn(world * tokens_per_rank, hidden, generator=generator)
    grad_all = torch.randn(world * tokens_per_rank, hidden, generator=generator)
    mine = slice(rank * tokens_per_rank, (rank + 1) * tokens_per_rank)
    results = {}
    for skew in skews:
        weights = make_moe_weights(hidden, world, seed=seed, skew=skew)
        whole = [t.clone().requires_grad_() for t in (x_all, *weights)]
        (moe_reference(*whole) * grad_all).sum().backward()
        x = x_all[mine].clone().requires_grad_()
        router, bias = (t.clone().requires_grad_() for t in weights[:2])
        w1, w2 = (t[rank].clone().requires_grad_() for t in weights[2:])
        with record_collectives() as log:
            log.phase = "forward"
            out, sent, received = expert_parallel_moe(x, router, bias, w1, w2)
            log.phase = "backward"
            (out * grad_all[mine]).sum().backward()
        router_grad = router.grad.clone()
        dist.all_reduce(router_grad)  # each rank's router saw only its tokens: add them up
        close = [torch.allclose(out, moe_reference(*weights_for(x_all[mine], weights)), atol=atol),
                 torch.allclose(x.grad, whole[0].grad[mine], atol=atol),
                 torch.allclose(router_grad, whole[1].grad, atol=atol),
                 torch.allclose(w1.grad, whole[3].grad[rank], atol=atol),
                 torch.allclose(w2.grad, whole[4].grad[rank], atol=atol)]
        results[skew] = {"same": close, "sent": sent, "received": received,
                         "calls": [(c.phase, c.name, c.nbytes) for c in log.calls]}
    return results


def weights_for(x, weights):
    """``(x, router, router_bias, w1, w2)`` detached: the reference layer's arguments."""
    return (x, *(t.detach() for t in weights))
