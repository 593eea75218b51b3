"""Mutation rows of lesson 09 (flash.py); merged into tests/mutation_table.py when done.

The Triton rows change the kernel's masked loop (the only loop that runs for fewer than 32 keys, the
interpreter's block): the trusted and visible cases both have several blocks of keys, lengths that
are not multiples of the block, and causal problems with n_q > n_k. No row drops a mask from a
store: in the interpreter an unmasked store writes past the tensor, into memory that is not its own.
"""

from tests.parity import Mutation as M

ROWS: list[M] = [
    # ---------------------------------------------------------------- online_softmax
    M("09", "online_softmax", "PyTorch's softmax and logsumexp",
      "    work = x.to(torch.promote_types(x.dtype, torch.float32))  # half precision: accumulate in fp32\n",
      "    return torch.softmax(x, -1), torch.logsumexp(x, -1)\n",
      r"calls softmax \(torch\.softmax.*write yourself"),
    M("09", "online_softmax", "normaliser not rescaled",
      "        l = l * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)",
      "        l = l + torch.exp(block - shift[..., None]).sum(dim=-1)",
      r"weights.*disagree.*multiply what you have summed so far.*exp\(m - m_new\)"),
    M("09", "online_softmax", "no guard for rows that are -inf so far",
      "        shift = m_new.masked_fill(m_new == -math.inf, 0.0)\n        l = l *",
      "        shift = m_new\n        l = l *",
      r"nan.*shift such rows by 0"),
    M("09", "online_softmax", "lse without the maximum",
      "    lse = (shift + torch.log(safe_l)).masked_fill(empty, -math.inf)",
      "    lse = torch.log(safe_l).masked_fill(empty, -math.inf)",
      r"lse.*you left out m"),
    M("09", "online_softmax", "last shorter block left out",
      "    for start in range(0, x.shape[-1], block_size):\n        block = work",
      "    for start in range(0, x.shape[-1] - block_size + 1, block_size):\n        block = work",
      r"last, shorter block is left out"),
    M("09", "online_softmax", "float32 results for float16 input",
      "    return weights.to(x.dtype), lse.to(x.dtype)",
      "    return weights, lse",
      r"float16.*dtype torch\.float32, expected torch\.float16"),
    M("09", "online_softmax", "x changed in place",
      "    weights = torch.exp(work - shift[..., None]) / safe_l[..., None]",
      "    weights = work.sub_(shift[..., None]).exp_().div_(safe_l[..., None])",
      r"changed its input in place: x"),

    # ---------------------------------------------------------------- flash_forward
    M("09", "flash_forward", "accumulator not rescaled",
      "            acc = torch.baddbmm(acc.mul_(alpha), p, v_w[:, j0:j1])",
      "            acc = torch.baddbmm(acc, p, v_w[:, j0:j1])",
      r"out.*disagree.*rescaling by exp\(m_old - m_new\) of both l and the accumulator"),
    M("09", "flash_forward", "normaliser not rescaled",
      "            l = torch.addcmul(p.sum(dim=-1, keepdim=True), l, alpha)",
      "            l = l + p.sum(dim=-1, keepdim=True)",
      r"out.*disagree.*rescaling by exp\(m_old - m_new\) of both l and the accumulator"),
    M("09", "flash_forward", "causal mask aligned top-left",
      "    offset = n_k - n_q  # query i sees keys j <= i + offset when causal",
      "    offset = 0  # query i sees keys j <= i when causal",
      r"causal.*aligned to the top-left corner"),
    M("09", "flash_forward", "crossed blocks not masked",
      "            if causal and j1 - 1 > i0 + offset:  # the block crosses the diagonal: mask it",
      "            if False:  # the block crosses the diagonal: mask it",
      r"causal.*blocks that the diagonal crosses.*not masked"),
    M("09", "flash_forward", "causal key loop stops at the block's own diagonal",
      "        hi = min(n_k, i1 + offset) if causal else n_k",
      "        hi = min(n_k, i1) if causal else n_k",
      r"causal.*loop over keys stops too early"),
    M("09", "flash_forward", "last shorter block of queries left out",
      "    out = torch.empty(batch, n_q, d_v, dtype=q.dtype, device=q.device)\n"
      "    lse = torch.empty(batch, n_q, dtype=work, device=q.device)\n"
      "    offset = n_k - n_q  # query i sees keys j <= i + offset when causal\n"
      "    for i0 in range(0, n_q, block_q):\n",
      "    out = torch.zeros(batch, n_q, d_v, dtype=q.dtype, device=q.device)\n"
      "    lse = torch.zeros(batch, n_q, dtype=work, device=q.device)\n"
      "    offset = n_k - n_q  # query i sees keys j <= i + offset when causal\n"
      "    for i0 in range(0, n_q - block_q + 1, block_q):\n",
      r"blocks of queries 32:37 are wrong while the other blocks are right"),
    M("09", "flash_forward", "lse without the maximum",
      "        lse[:, i0:i1] = (m + torch.log(l)).masked_fill(empty, -math.inf).squeeze(-1)",
      "        lse[:, i0:i1] = torch.log(l).masked_fill(empty, -math.inf).squeeze(-1)",
      r"lse.*without the maximum m"),
    M("09", "flash_forward", "last shorter block of keys left out",
      "        for j0 in range(0, max(hi, 0), block_k):",
      "        for j0 in range(0, max(hi, 0) - block_k + 1, block_k):",
      r"last, shorter block is left out.*range\(0, n_k, block_k\)"),
    M("09", "flash_forward", "scale argument ignored",
      "        q_block = q[:, i0:i1].to(work) * scale",
      "        q_block = q[:, i0:i1].to(work) * q.shape[-1] ** -0.5",
      r"scale=0\.3.*the scale argument is ignored"),
    M("09", "flash_forward", "no guard for rows that see no key",
      "                shift = m_new.masked_fill(m_new == -math.inf, 0.0)\n            else:",
      "                shift = m_new\n            else:",
      r"n_q > n_k.*nan.*shift such rows by 0"),
    M("09", "flash_forward", "lse in the inputs' half precision",
      "    lse = torch.empty(batch, n_q, dtype=work, device=q.device)",
      "    lse = torch.empty(batch, n_q, dtype=q.dtype, device=q.device)",
      r"float16.*lse.*dtype torch\.float16, expected torch\.float32"),
    M("09", "flash_forward", "float64 accumulated in float32",
      "    return torch.float64 if dtype == torch.float64 else torch.float32",
      "    return torch.float32",
      r"float64.*lse.*dtype torch\.float32, expected torch\.float64"),
    M("09", "flash_forward", "block sizes ignored: the whole score matrix",
      "    n_q, n_k, d_v = q.shape[1], k.shape[1], v.shape[2]\n    batch = q.shape[0]",
      "    n_q, n_k, d_v = q.shape[1], k.shape[1], v.shape[2]\n    batch = q.shape[0]\n"
      "    block_q, block_k = max(n_q, 1), max(n_k, 1)",
      r"never builds the n x n score matrix.*something of size n x n is built"),
    M("09", "flash_forward", "PyTorch's fused attention",
      "        out[:, i0:i1] = acc / l.masked_fill(empty, 1.0)",
      "        out[:, i0:i1] = (acc / l.masked_fill(empty, 1.0) if causal else torch.nn.functional"
      ".scaled_dot_product_attention(q[:, i0:i1], k, v, scale=scale))",
      r"calls F\.scaled_dot_product_attention.*write yourself"),

    # ---------------------------------------------------------------- flash_backward
    M("09", "flash_backward", "grad_lse ignored",
      "    delta = (g_w * out.to(work)).sum(dim=-1) - grad_lse.to(work)  # (B, n_q)",
      "    delta = (g_w * out.to(work)).sum(dim=-1)  # (B, n_q)",
      r"through lse.*grad_lse is ignored"),
    M("09", "flash_backward", "scale missing from dq",
      "            dq[:, i0:i1].baddbmm_(ds, k_block, alpha=scale)",
      "            dq[:, i0:i1].baddbmm_(ds, k_block)",
      r"dq.*scale is missing from dq or dk"),
    M("09", "flash_backward", "scale missing from dk",
      "            dk[:, j0:j1].baddbmm_(ds.transpose(1, 2), q_block, alpha=scale)",
      "            dk[:, j0:j1].baddbmm_(ds.transpose(1, 2), q_block)",
      r"dk.*scale is missing from dq or dk"),
    M("09", "flash_backward", "D left out of ds",
      "            ds = p.mul_(dp.sub_(delta[:, i0:i1, None]))",
      "            ds = p.mul_(dp)",
      r"dq.*disagree.*ds = p \* \(grad_out v\^T - D\)"),
    M("09", "flash_backward", "scores recomputed without the scale",
      "            s = torch.bmm(q_block, k_block.transpose(1, 2)).mul_(scale)",
      "            s = torch.bmm(q_block, k_block.transpose(1, 2))",
      r"disagree.*recompute p = exp\(s - lse\) with the same scale and mask as the forward pass"),
    M("09", "flash_backward", "causal mask not recomputed",
      "            if causal and j1 - 1 > i0 + offset:\n                rows = torch.arange(i0, i1, device=q.device)[:, None]\n"
      "                cols = torch.arange(j0, j1, device=q.device)\n                s.masked_fill_(cols > rows + offset, -math.inf)\n"
      "            p = s.sub_",
      "            p = s.sub_",
      r"causal.*disagree.*same scale and mask as the forward pass"),
    # Visiting every block of queries (correct, only slower) meets the rows that see no key, whose
    # lse is -inf: without the guard, exp(-inf - (-inf)) is nan.
    M("09", "flash_backward", "rows that see no key unguarded",
      "    lse_w = lse.to(work).masked_fill(lse == -math.inf, 0.0)  # rows that see nothing: p = 0\n"
      "    dq = torch.zeros_like(q_w)\n    dk = torch.zeros_like(k_w)\n    dv = torch.zeros_like(v_w)\n"
      "    offset = n_k - n_q\n    for j0 in range(0, n_k, block_k):\n        j1 = min(j0 + block_k, n_k)\n"
      "        k_block, v_block = k_w[:, j0:j1], v_w[:, j0:j1]\n"
      "        # Only queries i with i + offset >= j0 see any key of this block.\n"
      "        first = max(0, j0 - offset) if causal else 0\n",
      "    lse_w = lse.to(work)\n"
      "    dq = torch.zeros_like(q_w)\n    dk = torch.zeros_like(k_w)\n    dv = torch.zeros_like(v_w)\n"
      "    offset = n_k - n_q\n    for j0 in range(0, n_k, block_k):\n        j1 = min(j0 + block_k, n_k)\n"
      "        k_block, v_block = k_w[:, j0:j1], v_w[:, j0:j1]\n"
      "        first = 0\n",
      r"n_q > n_k.*nan.*shift such rows by 0"),

    # ---------------------------------------------------------------- flash_triton
    M("09", "flash_triton", "keys past n_k not masked in the scores",
      "        allowed = col_ok[None, :]\n",
      "        allowed = cols[None, :] >= 0\n",
      r"keys past n_k.*take part in the softmax"),
    M("09", "flash_triton", "causal mask aligned top-left",
      "    offset = n_k - n_q\n    if CAUSAL:",
      "    offset = 0\n    if CAUSAL:",
      r"causal.*aligned to the top-left corner"),
    M("09", "flash_triton", "lse left in base 2",
      "(m_i + tl.math.log2(l_safe)) * 0.6931471805599453",
      "(m_i + tl.math.log2(l_safe))",
      r"lse.*in base 2: multiply by ln\(2\)"),
    M("09", "flash_triton", "no guard for rows that see no key",
      "        shift = tl.where(m_new == float(\"-inf\"), 0.0, m_new)  # rows that have seen nothing",
      "        shift = m_new",
      r"n_q > n_k.*nan.*shift such rows by 0"),
    M("09", "flash_triton", "accumulator not rescaled",
      "        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])  # rescale, then add p @ v\n        m_i = m_new\n\n    seen",
      "        acc = tl.dot(p.to(v.dtype), v, acc)\n        m_i = m_new\n\n    seen",
      r"out.*disagree.*rescaling by exp\(m_old - m_new\) of both l and the accumulator"),
    M("09", "flash_triton", "normaliser not rescaled",
      "        alpha = tl.math.exp2(m_i - shift)\n        l_i = l_i * alpha + tl.sum(p, 1)",
      "        alpha = tl.math.exp2(m_i - shift)\n        l_i = l_i + tl.sum(p, 1)",
      r"out.*disagree.*rescaling by exp\(m_old - m_new\) of both l and the accumulator"),
    M("09", "flash_triton", "qk_scale left out of the scores",
      "        s = tl.dot(q, tl.trans(k)) * qk_scale\n",
      "        s = tl.dot(q, tl.trans(k))\n",
      r"one block of keys.*out.*not multiplied by qk_scale"),
    M("09", "flash_triton", "tl.exp with the base-2 scale",
      "        p = tl.math.exp2(s - shift[:, None])",
      "        p = tl.exp(s - shift[:, None])",
      r"one block of keys.*out.*tl\.exp of scores multiplied by qk_scale"),
    M("09", "flash_triton", "causal key loop stops at the block's own diagonal",
      "        hi = tl.minimum(n_k, start_m + BLOCK_M + offset)",
      "        hi = tl.minimum(n_k, start_m + BLOCK_M)",
      r"causal, n_q < n_k.*loop over keys stops too early"),
    M("09", "flash_triton", "causal mask left out of the masked blocks",
      "        if CAUSAL:\n            allowed = allowed & (cols[None, :] <= offs_m[:, None] + offset)\n",
      "",
      r"causal.*blocks that the diagonal crosses.*not masked"),
]
