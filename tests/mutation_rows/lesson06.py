"""Mutation rows of lesson 06 (feedforward.py); merged into tests/mutation_table.py when done."""

from tests.parity import Mutation as M

_LN_BODY = ("        work = x.to(_statistics_dtype(x))\n"
            "        centred = work - work.mean(dim=-1, keepdim=True)\n"
            "        variance = centred.pow(2).mean(dim=-1, keepdim=True)\n"
            "        normalized = centred * torch.rsqrt(variance + self.eps)\n"
            "        return normalized.to(x.dtype) * self.weight + self.bias\n")
_RMS_BODY = ("        work = x.to(_statistics_dtype(x))\n"
             "        normalized = work * torch.rsqrt(work.pow(2).mean(dim=-1, keepdim=True) + self.eps)\n"
             "        return normalized.to(x.dtype) * self.weight\n")
_RMS_NORMALIZED = "        normalized = work * torch.rsqrt(work.pow(2).mean(dim=-1, keepdim=True) + self.eps)\n"
_RMS_RETURN = "keepdim=True) + self.eps)\n        return normalized.to(x.dtype) * self.weight\n"
_PRE = "            return x + self.sublayer(self.norm(x), *args, **kwargs)\n"
_POST = "        return self.norm(x + self.sublayer(x, *args, **kwargs))\n"
_GATE = "            hidden = F.silu(self.gate(x)) * self.up(x)\n"
_GELU = "            hidden = F.gelu(self.up(x))\n"

ROWS: list[M] = [
    # ------------------------------------------------------------------ FeedForward
    M("06", "feedforward", "SwiGLU gate without bias",
      "self.gate = nn.Linear(d_model, d_ff, bias=bias)", "self.gate = nn.Linear(d_model, d_ff, bias=False)",
      r"gate\.bias"),
    M("06", "feedforward", "a gate for GELU too",
      '        if activation == "swiglu":\n            self.gate', "        if True:\n            self.gate",
      r"has parameters down\.bias .*gate\.weight.*; expected down\.bias"),
    M("06", "feedforward", "biases whatever bias says",
      "self.up = nn.Linear(d_model, d_ff, bias=bias)", "self.up = nn.Linear(d_model, d_ff)",
      r"pass bias=bias"),
    M("06", "feedforward", "tanh GELU", _GELU, '            hidden = F.gelu(self.up(x), approximate="tanh")\n',
      r"tanh approximation"),
    M("06", "feedforward", "ReLU", _GELU, "            hidden = torch.relu(self.up(x))\n", r"you used ReLU"),
    M("06", "feedforward", "no non-linearity", _GELU, "            hidden = self.up(x)\n", r"no non-linearity"),
    M("06", "feedforward", "silu on up", _GATE, "            hidden = F.silu(self.up(x)) * self.gate(x)\n",
      r"silu is applied to up"),
    M("06", "feedforward", "sigmoid gate", _GATE, "            hidden = torch.sigmoid(self.gate(x)) * self.up(x)\n",
      r"you used sigmoid"),
    M("06", "feedforward", "GELU gate", _GATE, "            hidden = F.gelu(self.gate(x)) * self.up(x)\n",
      r"GELU on the gate"),
    M("06", "feedforward", "gate unused", _GATE, "            hidden = self.up(x)\n", r"gate is not used"),
    M("06", "feedforward", "silu as exp over one plus exp", _GATE,
      "            gate = self.gate(x)\n"
      "            hidden = gate * torch.exp(gate) / (1 + torch.exp(gate)) * self.up(x)\n",
      r"overflows float32"),
    M("06", "feedforward", "squeezed output", "        return self.down(hidden)\n",
      "        return self.down(hidden).squeeze()\n", r"has shape .*squeeze"),
    M("06", "feedforward", "float32 output", "        return self.down(hidden)\n",
      "        return self.down(hidden).float()\n", r"dtype torch\.float32, expected torch\.float64"),

    # ------------------------------------------------------------------ LayerNorm
    M("06", "layer_norm", "F.layer_norm", _LN_BODY,
      "        return F.layer_norm(x, (self.d,), self.weight, self.bias, self.eps)\n",
      r"calls F\.layer_norm \(or nn\.LayerNorm\)"),
    M("06", "layer_norm", "nn.LayerNorm", _LN_BODY,
      "        norm = nn.LayerNorm(self.d, eps=self.eps).to(x.dtype)\n"
      "        norm.load_state_dict(self.state_dict())\n"
      "        return norm(x)\n",
      r"calls F\.layer_norm \(or nn\.LayerNorm\)"),
    M("06", "layer_norm", "F.group_norm of one group", _LN_BODY,
      "        grouped = F.group_norm(x.reshape(-1, 1, self.d), 1, eps=self.eps)\n"
      "        return grouped.reshape(x.shape) * self.weight + self.bias\n",
      r"calls F\.group_norm"),
    M("06", "layer_norm", "unbiased variance",
      "        variance = centred.pow(2).mean(dim=-1, keepdim=True)\n",
      "        variance = work.var(dim=-1, keepdim=True)\n", r"unbiased variance"),
    M("06", "layer_norm", "eps outside the root",
      "        normalized = centred * torch.rsqrt(variance + self.eps)\n",
      "        normalized = centred / (variance.sqrt() + self.eps)\n", r"outside the square root"),
    M("06", "layer_norm", "eps of __init__ ignored", "torch.rsqrt(variance + self.eps)",
      "torch.rsqrt(variance + 1e-5)", r"eps given to __init__ is ignored"),
    M("06", "layer_norm", "no eps", "torch.rsqrt(variance + self.eps)", "torch.rsqrt(variance)",
      r"eps is missing"),
    M("06", "layer_norm", "bias not added",
      "        return normalized.to(x.dtype) * self.weight + self.bias\n",
      "        return normalized.to(x.dtype) * self.weight\n", r"the bias is not added"),
    M("06", "layer_norm", "weight not applied",
      "        return normalized.to(x.dtype) * self.weight + self.bias\n",
      "        return normalized.to(x.dtype) + self.bias\n", r"the weight is not applied"),
    M("06", "layer_norm", "statistics over the first dimension",
      "        centred = work - work.mean(dim=-1, keepdim=True)\n"
      "        variance = centred.pow(2).mean(dim=-1, keepdim=True)\n",
      "        centred = work - work.mean(dim=0, keepdim=True)\n"
      "        variance = centred.pow(2).mean(dim=0, keepdim=True)\n",
      r"normalized over the first dimension"),
    M("06", "layer_norm", "variance as mean of squares minus squared mean",
      "        variance = centred.pow(2).mean(dim=-1, keepdim=True)\n",
      "        variance = work.pow(2).mean(dim=-1, keepdim=True) - work.mean(dim=-1, keepdim=True).pow(2)\n",
      r"mean\(x\*\*2\) - mean\(x\)\*\*2 loses every digit"),
    M("06", "layer_norm", "statistics in half precision",
      "        work = x.to(_statistics_dtype(x))\n        centred",
      "        work = x\n        centred", r"overflow float16: compute the statistics in float32"),
    M("06", "layer_norm", "not cast back to half precision",
      "        return normalized.to(x.dtype) * self.weight + self.bias\n",
      "        return normalized * self.weight + self.bias\n", r"dtype torch\.float32, expected torch\.float16"),
    M("06", "layer_norm", "centres x in place",
      "        centred = work - work.mean(dim=-1, keepdim=True)\n",
      "        work -= work.mean(dim=-1, keepdim=True)\n        centred = work\n", r"changed its input in place"),

    # ------------------------------------------------------------------ RMSNorm
    M("06", "rms_norm", "F.rms_norm", _RMS_BODY, "        return F.rms_norm(x, (self.d,), self.weight, self.eps)\n",
      r"calls F\.rms_norm \(or nn\.RMSNorm\)"),
    M("06", "rms_norm", "nn.RMSNorm", _RMS_BODY,
      "        norm = nn.RMSNorm(self.d, eps=self.eps).to(x.dtype)\n"
      "        norm.load_state_dict(self.state_dict())\n"
      "        return norm(x)\n",
      r"calls F\.rms_norm \(or nn\.RMSNorm\)"),
    M("06", "rms_norm", "no eps", _RMS_NORMALIZED,
      "        normalized = work * torch.rsqrt(work.pow(2).mean(dim=-1, keepdim=True))\n", r"eps is missing"),
    M("06", "rms_norm", "no eps, through vector_norm", _RMS_NORMALIZED,
      "        normalized = work / (torch.linalg.vector_norm(work, dim=-1, keepdim=True) / self.d ** 0.5)\n",
      r"eps is missing"),
    M("06", "rms_norm", "mean subtracted", _RMS_NORMALIZED,
      "        centred = work - work.mean(dim=-1, keepdim=True)\n"
      "        normalized = centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + self.eps)\n",
      r"you subtracted the mean"),
    M("06", "rms_norm", "eps outside the root", _RMS_NORMALIZED,
      "        normalized = work / (work.pow(2).mean(dim=-1, keepdim=True).sqrt() + self.eps)\n",
      r"outside the square root"),
    M("06", "rms_norm", "sum of squares", _RMS_NORMALIZED,
      "        normalized = work * torch.rsqrt(work.pow(2).sum(dim=-1, keepdim=True) + self.eps)\n",
      r"divided by the length of x"),
    M("06", "rms_norm", "weight not applied", _RMS_RETURN,
      "keepdim=True) + self.eps)\n        return normalized.to(x.dtype)\n",
      r"the weight is not applied"),
    M("06", "rms_norm", "eps of __init__ ignored", "keepdim=True) + self.eps)", "keepdim=True) + 1e-6)",
      r"eps given to __init__ is ignored"),
    M("06", "rms_norm", "statistics in half precision",
      "        work = x.to(_statistics_dtype(x))\n        normalized",
      "        work = x\n        normalized", r"overflow float16: compute the statistics in float32"),
    M("06", "rms_norm", "not cast back to half precision", _RMS_RETURN,
      "keepdim=True) + self.eps)\n        return normalized * self.weight\n",
      r"dtype torch\.float32, expected torch\.float16"),

    # ------------------------------------------------------------------ Residual
    M("06", "residual", "pre-norm normalizes the sum", _PRE,
      "            return self.norm(x + self.sublayer(x, *args, **kwargs))\n", r"normalized after adding the residual"),
    M("06", "residual", "post-norm normalizes the input", _POST,
      "        return x + self.sublayer(self.norm(x), *args, **kwargs)\n", r"normalized before the sublayer"),
    M("06", "residual", "normalized skip path", _PRE,
      "            return self.norm(x) + self.sublayer(self.norm(x), *args, **kwargs)\n", r"skip path carries norm"),
    M("06", "residual", "pre-norm without the residual", _PRE,
      "            return self.sublayer(self.norm(x), *args, **kwargs)\n", r"the residual is missing"),
    M("06", "residual", "post-norm without the residual", _POST,
      "        return self.norm(self.sublayer(x, *args, **kwargs))\n", r"the residual is missing"),
    M("06", "residual", "pre-norm normalizes the output", _PRE,
      "            return x + self.norm(self.sublayer(x, *args, **kwargs))\n", r"normalized the sublayer's output"),
    M("06", "residual", "post-norm normalizes only the output", _POST,
      "        return x + self.norm(self.sublayer(x, *args, **kwargs))\n", r"normalized only the sublayer's output"),
    M("06", "residual", "norm never applied", _PRE, "            return x + self.sublayer(x, *args, **kwargs)\n",
      r"the norm is never applied"),
    M("06", "residual", "positional arguments dropped", _PRE + "        " + _POST.lstrip(),
      "            return x + self.sublayer(self.norm(x), **kwargs)\n"
      "        return self.norm(x + self.sublayer(x, **kwargs))\n",
      r"positional arguments do not reach the sublayer"),
    M("06", "residual", "keyword arguments dropped", _PRE + "        " + _POST.lstrip(),
      "            return x + self.sublayer(self.norm(x), *args)\n"
      "        return self.norm(x + self.sublayer(x, *args))\n",
      r"keyword arguments do not reach the sublayer"),
    M("06", "residual", "extra arguments dropped", _PRE + "        " + _POST.lstrip(),
      "            return x + self.sublayer(self.norm(x))\n"
      "        return self.norm(x + self.sublayer(x))\n",
      r"the extra arguments do not reach the sublayer"),
]
