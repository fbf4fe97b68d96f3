"""Self-attention split into its projections, so that they run as matmul kernels.

torch.fx keeps ``nn.MultiheadAttention`` as one leaf call, which runs in torch as a whole:
its input and output projections (ViT's 197 x 2304 x 768 and 197 x 768 x 768 matmuls, half
of each encoder layer's multiply-adds) never reach a kernel. `split_attention` replaces a
plain self-attention call by the input projection (an ``nn.Linear`` sharing the module's
``in_proj_weight``), the attention of the heads (`attend`: torch's
``scaled_dot_product_attention``, a torch step) and the module's own ``out_proj``. Only
calls that mean the same thing are split: query, key and value one tensor, no masks, no
causal flag, packed projections without ``bias_k``/``bias_v`` or ``add_zero_attn``, eval
mode, and only the output read (the weights, if taken apart, unread).
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.nn.utils import skip_init

# nn.MultiheadAttention.forward's parameters in order
_MODULE_ARGS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
                "average_attn_weights", "is_causal")


def attend(qkv: torch.Tensor, heads: int, batch_first: bool) -> torch.Tensor:
    """Scaled dot-product attention of ``heads`` heads over packed ``qkv`` (the input
    projection's output, [..., 3 * E]); the heads' outputs concatenated, laid out as the
    input ((N, L, E) when ``batch_first``, else (L, N, E)), contiguous."""
    if not batch_first:
        qkv = qkv.transpose(0, 1)
    n, length, e3 = qkv.shape
    q, k, v = qkv.view(n, length, 3, heads, e3 // (3 * heads)).permute(2, 0, 3, 1, 4)
    out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, length, e3 // 3)
    return (out if batch_first else out.transpose(0, 1)).contiguous()


def split_attention(gm: fx.GraphModule) -> int:
    """Split, in place, each plain self-attention call of ``gm`` (see the module's
    docstring); returns how many were split."""
    modules = dict(gm.named_modules())
    count = 0
    for node in list(gm.graph.nodes):
        mha = modules.get(str(node.target)) if node.op == "call_module" else None
        if not isinstance(mha, nn.MultiheadAttention) or not _plain(node, mha):
            continue
        proj = skip_init(nn.Linear, mha.embed_dim, 3 * mha.embed_dim,
                         bias=mha.in_proj_bias is not None, device=mha.in_proj_weight.device,
                         dtype=mha.in_proj_weight.dtype)
        proj.weight = mha.in_proj_weight
        if mha.in_proj_bias is not None:
            proj.bias = mha.in_proj_bias
        name = f"{node.target}.autotune_in_proj"
        gm.add_submodule(name, proj.eval())
        query = node_arguments(node, _MODULE_ARGS)["query"]
        replace_attention(gm, node, query, name, f"{node.target}.out_proj", mha.num_heads,
                          mha.batch_first)
        count += 1
    if count:
        gm.graph.lint()
        gm.recompile()
    return count


def self_attention_of(given: dict[str, Any], node: fx.Node) -> Optional[fx.Node]:
    """The one tensor a call with arguments ``given`` attends over, when it is query, key
    and value alike, with no masks or causal flag and only its output read (its weights'
    getitem, if any, unread); else None."""
    query = given.get("query")
    if not isinstance(query, fx.Node) or given.get("key") is not query or \
            given.get("value") is not query or given.get("key_padding_mask") is not None or \
            given.get("attn_mask") is not None or given.get("is_causal", False):
        return None
    read = bool(node.users) and all(
        u.op == "call_function" and u.target is operator.getitem
        and (u.args[1:] == (0,) or (u.args[1:] == (1,) and not u.users)) for u in node.users)
    return query if read else None


def replace_attention(gm: fx.GraphModule, node: fx.Node, query: fx.Node, in_proj: str,
                      out_proj: str, heads: int, batch_first: bool) -> None:
    """Replace the attention call ``node`` by the modules ``in_proj`` and ``out_proj``
    around `attend` (its output's readers rewired, an unread weights' getitem dropped)."""
    with gm.graph.inserting_before(node):
        qkv = gm.graph.call_module(in_proj, (query,))
        attended = gm.graph.call_function(attend, (qkv, heads, batch_first))
        out = gm.graph.call_module(out_proj, (attended,))
    for user in list(node.users):
        if user.args[1] == 0:
            user.replace_all_uses_with(out)
        gm.graph.erase_node(user)
    gm.graph.erase_node(node)


def node_arguments(node: fx.Node, names: Sequence[str]) -> dict[str, Any]:
    """A call's arguments by name: its positional ones named in order by ``names``, then
    its keyword ones."""
    return {**dict(zip(names, node.args)), **node.kwargs}


def _plain(node: fx.Node, mha: nn.MultiheadAttention) -> bool:
    """Whether the call is self-attention that `attend` computes exactly, only its output
    read."""
    return (self_attention_of(node_arguments(node, _MODULE_ARGS), node) is not None
            and not mha.training and mha._qkv_same_embed_dim and mha.in_proj_weight is not None
            and mha.bias_k is None and mha.bias_v is None and not mha.add_zero_attn)
