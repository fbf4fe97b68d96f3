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

import torch
import torch.nn.functional as F
from torch import fx, nn

_MHA_ARGS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
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
        proj = nn.Linear(mha.embed_dim, 3 * mha.embed_dim, bias=mha.in_proj_bias is not None,
                         device=mha.in_proj_weight.device, dtype=mha.in_proj_weight.dtype)
        proj.weight = mha.in_proj_weight
        if mha.in_proj_bias is not None:
            proj.bias = mha.in_proj_bias
        name = f"{node.target}.autotune_in_proj"
        gm.add_submodule(name, proj.eval())
        with gm.graph.inserting_before(node):
            qkv = gm.graph.call_module(name, (_arguments(node)["query"],))
            heads = gm.graph.call_function(attend, (qkv, mha.num_heads, mha.batch_first))
            out = gm.graph.call_module(f"{node.target}.out_proj", (heads,))
        for user in list(node.users):  # the output's reads; an unread weights' getitem
            if user.args[1] == 0:
                user.replace_all_uses_with(out)
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        count += 1
    if count:
        gm.graph.lint()
        gm.recompile()
    return count


def _arguments(node: fx.Node) -> dict[str, object]:
    return {**dict(zip(_MHA_ARGS, node.args)), **node.kwargs}


def _plain(node: fx.Node, mha: nn.MultiheadAttention) -> bool:
    """Whether the call is self-attention that `attend` computes exactly, only its output
    read."""
    given = _arguments(node)
    query = given.get("query")
    return (isinstance(query, fx.Node) and given.get("key") is query
            and given.get("value") is query
            and given.get("key_padding_mask") is None and given.get("attn_mask") is None
            and not given.get("is_causal", False)
            and not mha.training and mha._qkv_same_embed_dim and mha.in_proj_weight is not None
            and mha.bias_k is None and mha.bias_v is None and not mha.add_zero_attn
            and bool(node.users)
            and all(u.op == "call_function" and u.target is operator.getitem
                    and (u.args[1:] == (0,) or (u.args[1:] == (1,) and not u.users))
                    for u in node.users))
