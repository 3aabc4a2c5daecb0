#!/usr/bin/python3
"""Independent reference for Specula's hf: models (tests/test_hf_models.cpp, "[hf]").

Written from the Hugging Face architecture definitions (transformers' modeling_llama.py, modeling_mistral.py
and modeling_qwen2.py: RMSNorm, rotate-half RoPE with the rope_scaling rules of modeling_rope_utils.py,
repeat_kv for grouped-query attention, SwiGLU MLP, q/k/v biases for Qwen2), with plain PyTorch (Debian's
python3-torch) and its own safetensors reader/writer -- none of Specula's code.

  hf_reference.py make --arch llama|mistral|qwen2 --out DIR [--seed S] [--dtype bf16|fp16|fp32]
                       [--shards N] [--layers L] [--vocab V] [--norms-fp32] [--byte-tokenizer]
      writes a tiny random model folder: config.json and model.safetensors (or N shards + index);
      --norms-fp32 keeps the 1-D tensors in float32 beside 16-bit matrices; --byte-tokenizer adds a
      tokenizer.json with the 256 byte tokens only (ids 256.. are padding when V > 256)
  hf_reference.py logits --model DIR --sequences IN.json --out OUT.json
      IN.json = {"sequences": [[ids...], ...]}; OUT.json = {"logits": [[[V floats] per position] per sequence]}
      computed in float64 from the stored weights (so the only rounding left is Specula's float32)
"""
import argparse
import json
import math
import os
import struct

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
NAMES = {v: k for k, v in DTYPES.items()}


# ---------------------------------------------------------------------------------------------- safetensors
def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.element_size() == 2 else t.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        buf = bytearray(data[8 + n + a:8 + n + b])
        t = torch.frombuffer(buf, dtype=DTYPES[e["dtype"]]) if buf else torch.zeros(0, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out


def read_weights(folder):
    single = os.path.join(folder, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for name in files:
        out.update(read_safetensors(os.path.join(folder, name)))
    return out


# ---------------------------------------------------------------------------------------------- tiny models
def gpt2_byte_alphabet():
    # GPT-2's bytes_to_unicode (encoder.py): printable bytes stand for themselves, the others map to 256 + n.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def write_byte_tokenizer(path):
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    vocab = {c: b for b, c in gpt2_byte_alphabet().items()}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": []}}
    with open(path, "w") as f:
        json.dump(tok, f)


def make(args):
    torch.manual_seed(args.seed)
    qwen2 = args.arch == "qwen2"
    cfg = {
        "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                           "qwen2": "Qwen2ForCausalLM"}[args.arch]],
        "model_type": args.arch,
        "vocab_size": args.vocab,
        "hidden_size": 64,
        "intermediate_size": 128 if qwen2 else 160,
        "num_hidden_layers": args.layers,
        "num_attention_heads": 8 if qwen2 else 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "rms_norm_eps": 1e-6 if qwen2 else 1e-5,
        "rope_theta": 1000000.0 if qwen2 else 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": qwen2,
        "torch_dtype": {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[args.dtype],
    }
    if args.arch == "llama":
        # Llama 3.1's rule with a short original context, so that it changes most frequencies at test lengths.
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
    elif args.arch == "mistral":
        cfg["rope_scaling"] = {"type": "linear", "factor": 4.0}
        cfg["sliding_window"] = None
    else:
        cfg.update({"use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 2})
    d, ff, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = d // H

    def mat(rows, cols):  # unit-scale activations: logits of a few units, attention far from uniform
        return torch.randn(rows, cols) / math.sqrt(cols)

    w = {"model.embed_tokens.weight": torch.randn(V, d), "model.norm.weight": 0.8 + 0.4 * torch.rand(d)}
    for i in range(args.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 0.8 + 0.4 * torch.rand(d)
        w[p + "post_attention_layernorm.weight"] = 0.8 + 0.4 * torch.rand(d)
        w[p + "self_attn.q_proj.weight"] = mat(H * D, d)
        w[p + "self_attn.k_proj.weight"] = mat(K * D, d)
        w[p + "self_attn.v_proj.weight"] = mat(K * D, d)
        w[p + "self_attn.o_proj.weight"] = mat(d, H * D)
        if qwen2:
            for n, rows in (("q", H * D), ("k", K * D), ("v", K * D)):
                w[p + f"self_attn.{n}_proj.bias"] = 0.5 * torch.randn(rows)
        w[p + "mlp.gate_proj.weight"] = mat(ff, d)
        w[p + "mlp.up_proj.weight"] = mat(ff, d)
        w[p + "mlp.down_proj.weight"] = mat(d, ff)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(V, d)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    w = {k: v.to(torch.float32 if args.norms_fp32 and v.dim() == 1 else dtype) for k, v in w.items()}

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if args.byte_tokenizer:
        write_byte_tokenizer(os.path.join(args.out, "tokenizer.json"))
    if args.shards <= 1:
        write_safetensors(os.path.join(args.out, "model.safetensors"), w)
        return
    names = sorted(w)
    weight_map = {}
    for s in range(args.shards):
        file = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
        part = {n: w[n] for n in names[s::args.shards]}
        write_safetensors(os.path.join(args.out, file), part)
        weight_map.update({n: file for n in part})
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(t.numel() * t.element_size() for t in w.values())},
                   "weight_map": weight_map}, f, indent=2)


# ---------------------------------------------------------------------------------------------- forward
def rope_inv_freq(cfg, dim):
    # modeling_rope_utils.py: _compute_default / _linear / _llama3_parameters
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    s = cfg.get("rope_scaling") or {}
    kind = s.get("rope_type", s.get("type", "default"))
    if kind == "linear":
        inv = inv / s["factor"]
    elif kind == "llama3":
        factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / lo, old / hi
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    elif kind != "default":
        raise SystemExit(f"rope_scaling {kind} not in the reference")
    return inv


def rms_norm(x, weight, eps):  # LlamaRMSNorm / Qwen2RMSNorm
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def forward(cfg, w, ids):
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    K = cfg.get("num_key_value_heads", H)
    D, eps, N = d // H, cfg["rms_norm_eps"], len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]  # [N, d]
    freqs = torch.outer(torch.arange(N, dtype=torch.float64), rope_inv_freq(cfg, D))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [N, D]
    mask = torch.triu(torch.full((N, N), float("-inf"), dtype=torch.float64), 1)

    def linear(h, name):
        y = h @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(h, p + "self_attn.q_proj").view(N, H, D).transpose(0, 1)
        k = linear(h, p + "self_attn.k_proj").view(N, K, D).transpose(0, 1)
        v = linear(h, p + "self_attn.v_proj").view(N, K, D).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        # repeat_kv: kv head j serves query heads j * n_rep .. (j + 1) * n_rep - 1
        k = k[:, None].expand(K, H // K, N, D).reshape(H, N, D)
        v = v[:, None].expand(K, H // K, N, D).reshape(H, N, D)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(D) + mask, dim=-1) @ v  # [H, N, D]
        x = x + linear(att.transpose(0, 1).reshape(N, H * D), p + "self_attn.o_proj")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = linear(h, p + "mlp.gate_proj"), linear(h, p + "mlp.up_proj")
        x = x + linear(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj")
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return x @ head.T  # [N, V]


def logits(args):
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    w = {k: v.to(torch.float64) for k, v in read_weights(args.model).items()}
    with open(args.sequences) as f:
        sequences = json.load(f)["sequences"]
    out = [forward(cfg, w, seq).tolist() for seq in sequences]
    with open(args.out, "w") as f:
        json.dump({"logits": out}, f)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("--arch", choices=["llama", "mistral", "qwen2"], required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--vocab", type=int, default=384)
    m.add_argument("--norms-fp32", action="store_true")
    m.add_argument("--byte-tokenizer", action="store_true")
    lg = sub.add_parser("logits")
    lg.add_argument("--model", required=True)
    lg.add_argument("--sequences", required=True)
    lg.add_argument("--out", required=True)
    args = parser.parse_args()
    make(args) if args.command == "make" else logits(args)


if __name__ == "__main__":
    main()
