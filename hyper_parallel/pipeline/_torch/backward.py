# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""dx / dw split by autograd-graph surgery (torch).

``backward_input`` computes the gradients of a stage's inputs only and remembers, for the weight pass,
where the weight gradients leave the input path; ``backward_weight`` later computes the weight
gradients from there. The graph is cut as follows:

* the *input closure* is every autograd node from which a stage input is reachable (the path dx
  needs); everything outside it that reaches a parameter is the *weight region* (closed downwards:
  a node that reaches an input is in the closure by definition);
* an *intermediate* is a closure node with an edge into the weight region, or a stage output whose
  node lies in the weight region; during the input pass a pre-hook records the gradients arriving
  at every intermediate (complete there: a pre-hook runs once all contributions are summed);
* intermediates that reach a common parameter form one group; the weight pass runs one backward
  per group from its intermediates with the recorded gradients, accumulating into ``.grad`` (so
  post-accumulate hooks such as FSDP's fire). A weight used at two sites on one path puts both sites
  in one group; the gradient one site would push into the other along the input path is replaced
  by the recorded one (a pre-hook), so nothing is counted twice. torch 2.13's split mis-handles
  such graphs (pytorch#180952; a weight reused around another layer fails to run at all) — see
  the regression tests. Multi-output intermediates are handled per output (one edge per output).

The cost of the split: the input pass runs the closure once; the weight pass runs each group's
weight region once, plus — only for groups of a weight reused along one path — the closure segment
between its sites again.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

import torch
from torch.autograd.graph import GradientEdge

__all__ = ["WeightGradPlan", "backward_input", "backward_weight", "backward_full", "grad_node"]


def grad_node(t: torch.Tensor):
    """The autograd node of ``t`` (its AccumulateGrad for a leaf that requires grad)."""
    if t.grad_fn is not None:
        return t.grad_fn
    if t.requires_grad:
        return t.view_as(t).grad_fn.next_functions[0][0]
    return None


class WeightGradPlan:
    """What ``backward_weight`` needs: per group, the intermediates, their recorded gradients and the
    parameters to accumulate into."""

    __slots__ = ("groups",)

    def __init__(self, groups: List[Tuple[list, List[torch.Tensor], bool]]) -> None:
        self.groups = groups  # [( [(node, grads tuple)], params, clamp )]

    def __bool__(self) -> bool:
        return bool(self.groups)


def _graph(roots) -> Tuple[Dict, Dict]:
    """children and parents maps of the graph below ``roots``."""
    children: Dict = {}
    parents: Dict = {}
    stack = [n for n in roots if n is not None]
    while stack:
        node = stack.pop()
        if node in children:
            continue
        kids = [fn for fn, _ in node.next_functions if fn is not None]
        children[node] = kids
        for k in kids:
            parents.setdefault(k, []).append(node)
            if k not in children:
                stack.append(k)
    return children, parents


def _closure(targets, parents) -> Set:
    seen = set()
    stack = [t for t in targets if t is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(parents.get(node, ()))
    return seen


def _reach(node, children, closure, param_nodes, memo) -> frozenset:
    """Parameters reachable from weight-region ``node``."""
    hit = memo.get(node)
    if hit is not None:
        return hit
    out = {node} if node in param_nodes else set()
    for k in children.get(node, ()):
        if k not in closure:
            out |= _reach(k, children, closure, param_nodes, memo)
    memo[node] = frozenset(out)
    return memo[node]


def _groups(intermediates: Dict, reach: Dict) -> List[List]:
    """Union of intermediates that reach a common parameter."""
    owner: Dict = {}
    groups: List[List] = []
    for u in intermediates:
        hits = {id(g): g for p in reach[u] for g in (owner.get(p),) if g is not None}
        merged = [u]
        for g in hits.values():
            merged += g
            groups.remove(g)
        groups.append(merged)
        for v in merged:
            for p in reach[v]:
                owner[p] = merged
    return groups


def _plan(outputs, inputs, params):
    """(closure intermediates -> params, weight-region outputs -> params, param node -> param)."""
    out_nodes = [grad_node(o) for o in outputs]
    children, parents = _graph(out_nodes)
    in_nodes = [grad_node(x) for x in inputs if x.requires_grad]
    closure = _closure([n for n in in_nodes if n in children], parents)
    param_nodes = _param_nodes(children, in_nodes, params)
    memo: Dict = {}
    inner = {}
    for node in closure:
        reach = _branches(node, children, closure, param_nodes, memo)
        if reach:
            inner[node] = reach
    roots = {}
    for node in out_nodes:
        reach = _reach(node, children, closure, param_nodes, memo) if node not in closure else None
        if reach:
            roots[node] = reach
    return inner, roots, param_nodes


def _param_nodes(children, in_nodes, params) -> Dict:
    """AccumulateGrad node -> weight: ``params``, or every leaf the graph reaches besides the inputs (the
    tensors the forward really used, e.g. FSDP's unsharded parameters)."""
    if params is not None:
        return {grad_node(p): p for p in params if p.requires_grad}
    skip = set(in_nodes)
    return {n: n.variable for n in children if hasattr(n, "variable") and n not in skip}


def _branches(node, children, closure, param_nodes, memo) -> frozenset:
    """Parameters reachable through ``node``'s edges into the weight region."""
    out = frozenset()
    for k in children.get(node, ()):
        if k not in closure:
            out |= _reach(k, children, closure, param_nodes, memo)
    return out


def _input_pass(outputs, grads, inputs, inner, captured) -> List[Optional[torch.Tensor]]:
    """Input gradients; records the gradients arriving at every closure intermediate."""
    handles = [u.register_prehook(lambda g, u=u: captured.__setitem__(u, tuple(g))) for u in inner]
    try:
        wanted = [x for x in inputs if x.requires_grad]
        got = torch.autograd.grad(list(outputs), wanted, list(grads), retain_graph=True,
                                  allow_unused=True) if wanted else ()
    finally:
        for h in handles:
            h.remove()
    it = iter(got)
    return [next(it) if x.requires_grad else None for x in inputs]


def backward_input(outputs: Sequence[torch.Tensor], grads: Sequence[Optional[torch.Tensor]],
                   inputs: Sequence[torch.Tensor], params: Optional[Sequence[torch.Tensor]] = None
                   ) -> Tuple[List[Optional[torch.Tensor]], WeightGradPlan]:
    """Gradients of ``inputs`` (None where not needed) and the plan for ``backward_weight``.

    ``params`` (default: every leaf the graph reaches besides ``inputs``, i.e. the tensors the forward
    really used, such as FSDP's unsharded parameters) are the weights ``backward_weight`` accumulates."""
    inner, roots, param_nodes = _plan(outputs, inputs, params)
    captured: Dict = {}
    input_grads = _input_pass(outputs, grads, inputs, inner, captured)
    out_grad = {grad_node(o): (g,) for o, g in zip(outputs, grads)}
    reach = dict(inner)
    reach.update(roots)
    recorded = {u: captured[u] for u in inner if u in captured}
    recorded.update({u: out_grad[u] for u in roots})
    plan = []
    for group in _groups({u: r for u, r in reach.items() if u in recorded}, reach):
        ps = {p for u in group for p in reach[u]}
        plan.append(([(u, recorded[u]) for u in group], [param_nodes[p] for p in ps], len(group) > 1))
    return input_grads, WeightGradPlan(plan)


def backward_weight(plan: WeightGradPlan) -> None:
    """Accumulate the weight gradients recorded by ``backward_input`` into ``.grad``."""
    for entries, params, clamp in plan.groups:
        edges, tensors = [], []
        for node, grads in entries:
            for k, g in enumerate(grads):
                if g is not None:
                    edges.append(GradientEdge(node, k))
                    tensors.append(g)
        if not edges:
            continue
        handles = [node.register_prehook(lambda _g, grads=grads: grads) for node, grads in entries] if clamp else []
        try:
            torch.autograd.backward(edges, grad_tensors=tensors, inputs=params, retain_graph=True)
        finally:
            for h in handles:
                h.remove()
    plan.groups = []


def backward_full(outputs: Sequence[torch.Tensor], grads: Sequence[Optional[torch.Tensor]],
                  inputs: Sequence[torch.Tensor], params: Optional[Sequence[torch.Tensor]] = None
                  ) -> List[Optional[torch.Tensor]]:
    """Full backward: gradients accumulated into every leaf (or only ``inputs`` + ``params`` when given);
    returns the input gradients (taken off the inputs)."""
    if params is None:
        torch.autograd.backward(list(outputs), grad_tensors=list(grads))
    else:
        leaves = [x for x in inputs if x.requires_grad] + [p for p in params if p.requires_grad]
        if leaves:
            torch.autograd.backward(list(outputs), grad_tensors=list(grads), inputs=leaves)
    out = []
    for x in inputs:
        out.append(x.grad if x.requires_grad else None)
        if x.requires_grad:
            x.grad = None
    return out
