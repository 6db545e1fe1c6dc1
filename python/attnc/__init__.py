"""attnc for Python: compile an attention variant (Spec) to a CUDA kernel with libattnc, and run
it on torch tensors with autograd (attention). `import attnc` needs neither torch nor a GPU;
attention() and calling a Kernel import torch when first used."""
from ._errors import AttncError, ArgumentError, CompileError, SpecError
from ._version import __version__
from .kernel import Kernel, KernelInfo, compile
from .spec import Spec

__all__ = ["AttncError", "ArgumentError", "CompileError", "SpecError", "Spec", "Kernel",
           "KernelInfo", "compile", "attention", "__version__"]


def attention(q, k, v, *, mask=None, score=None, inputs=None, dropout_p=0.0, scale=None,
              layout="bhsd", deterministic=False, return_lse=False, spec=None,
              cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None,
              block_table=None, seq_lens_kv=None, num_splits=0, decode="auto",
              host_seq_lens_kv=None):
    """Attention of q, k, v under a variant (mask, score, dropout), differentiable in q, k, v.

    q: [B, Hq, Sq, D] (layout "bhsd", as SDPA and FlexAttention) or [B, Sq, Hq, D] ("bshd", as
    FlashAttention); k, v: [B, Hkv, Skv, D] and [B, Hkv, Skv, Dv] in the same layout, Hq a
    multiple of Hkv; bf16 or fp16 CUDA tensors. Returns out shaped like q with Dv, and with
    return_lse also the log-sum-exp [B, Hq, Sq] (float32, natural log).

    mask, score: as attnc.Spec's fields (docs/spec.md), e.g. mask="causal",
    score="30 * tanh(score / 30)". inputs: {name: tensor} for the spec's declared inputs; their
    declaration is inferred from dtype (int32 -> i32, float32 -> f32) and shape unless `spec`
    declares them: with L = max(Sq, Skv), [L] -> pos, [B, L] -> b, pos, [Hq] -> h, [B, Hq] ->
    b, h, [B, Hq, L] -> b, h, pos (a length longer than L is allowed; [Hq] and [B, Hq] read as
    heads when the tensor is float32 or Hq < L, else as positions). dropout_p in [0, 1): seed and
    offset drawn from torch's CUDA generator. scale: default 1/sqrt(D). deterministic: the
    backward without atomics. spec: an attnc.Spec whose given fields are used; the others come
    from the tensors. Argument errors raise ArgumentError before anything is launched.

    Varlen and paged K/V (no dropout; docs/python.md): cu_seqlens_q (int32
    [B + 1] on q's device) makes q packed rows [total_q, Hq, D], out [total_q, Hq, Dv] and the
    LSE [Hq, total_q]; cu_seqlens_kv makes k, v [total_kv, Hkv, D]; block_table (int32
    [B, max_pages]) with seq_lens_kv (int32 [B]) makes k, v pools of pages, [pages, page_size,
    Hkv, D] in layout "bshd" ([pages, Hkv, page_size, D] in "bhsd"). max_seqlen_q, max_seqlen_kv:
    the longest sequence's lengths (required with cu_seqlens_*; paged: default max_pages x
    page_size). Masks align per sequence (bottom-right causal), positions count within it.
    num_splits: the decode kernel's kv splits (0: derived); decode: "auto", "on" or "off".
    host_seq_lens_kv: a CPU int32 copy of seq_lens_kv (a server's scheduler has one), with which
    a batch of mixed lengths takes the split count of its total work rather than of its longest
    sequence, and the lengths are checked against the pages before launch.
    Gradients of packed (not paged) calls without num_splits or decode: the call then copies
    cu_seqlens to the host once (a sync), for the backward's launch per sequence.

    Runs on torch.cuda.current_stream(). Under CUDA graph capture (after a warm-up call on the
    capture stream) forward and backward replay; dropout under capture raises AttncError, since
    every replay would repeat the captured mask.
    """
    from . import torch_ops
    return torch_ops.attention(q, k, v, mask=mask, score=score, inputs=inputs,
                               dropout_p=dropout_p, scale=scale, layout=layout,
                               deterministic=deterministic, return_lse=return_lse, spec=spec,
                               cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv,
                               max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv,
                               block_table=block_table, seq_lens_kv=seq_lens_kv,
                               num_splits=num_splits, decode=decode,
                               host_seq_lens_kv=host_seq_lens_kv)
