#!/usr/bin/python3
"""Independent reference for Specula's byte-level BPE tokenizer (tests/test_hf_models.cpp, "[hf]").

The encoder follows OpenAI's GPT-2 encoder.py (bytes_to_unicode, get_pairs, the bpe() merge loop) with the
Hugging Face tokenizer.json conventions on top (added tokens split out first, leftmost-longest; a Split
pre-tokenizer regex; ignore_merges; the TemplateProcessing prefix), using the `regex` module (Debian's
python3-regex) for \\p{L}-style patterns -- none of Specula's code.

  bpe_reference.py train --corpus FILE --bytes N --merges M --style llama3|qwen2 --out tokenizer.json
      learns M merges (most frequent adjacent pair, ties broken by the pair's text) on the first N bytes
  bpe_reference.py encode --tokenizer tokenizer.json --input FILE --out ids.json
"""
import argparse
import collections
import json
import unicodedata

import regex

PATTERNS = {
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def bytes_to_unicode():  # GPT-2 encoder.py
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTE_ENCODER = bytes_to_unicode()


def get_pairs(word):  # GPT-2 encoder.py
    return set(zip(word, word[1:]))


def train(args):
    with open(args.corpus, "rb") as f:
        text = f.read()[: args.bytes].decode("utf-8", errors="ignore")
    words = collections.Counter(
        tuple(BYTE_ENCODER[b] for b in piece.encode("utf-8")) for piece in regex.findall(PATTERNS[args.style], text))
    merges = []
    for _ in range(args.merges):
        counts = collections.Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                counts[pair] += n
        if not counts:
            break
        best = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        merged = {}
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    vocab = {BYTE_ENCODER[b]: i for i, b in enumerate(range(256))}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    V = len(vocab)
    llama3 = args.style == "llama3"
    specials = ["<|begin_of_text|>", "<|eot_id|>"] if llama3 else ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    added = [{"id": V + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None if llama3 else {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERNS[args.style]}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [], "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [V], "tokens": ["<|begin_of_text|>"]}}},
        ]} if llama3 else {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": llama3,
                  "vocab": vocab,
                  # Llama 3 files list merges as "a b", newer Qwen2 ones as ["a", "b"]: both forms are read.
                  "merges": [a + " " + b for a, b in merges] if llama3 else [[a, b] for a, b in merges]},
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)


class Encoder:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        model = t["model"]
        self.vocab = model["vocab"]
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        self.ranks = dict(zip(merges, range(len(merges))))
        self.ignore_merges = model.get("ignore_merges", False)
        self.added = sorted(((a["content"], a["id"]) for a in t["added_tokens"]), key=lambda a: -len(a[0]))
        steps = t["pre_tokenizer"]["pretokenizers"]
        self.pattern = regex.compile(next(s["pattern"]["Regex"] for s in steps if s["type"] == "Split"))
        self.nfc = (t.get("normalizer") or {}).get("type") == "NFC"
        self.prefix = []
        processors = (t.get("post_processor") or {}).get("processors", [])
        for p in processors:
            if p["type"] == "TemplateProcessing":
                for item in p["single"]:
                    if "Sequence" in item:
                        break
                    self.prefix += p["special_tokens"][item["SpecialToken"]["id"]]["ids"]

    def bpe(self, token):  # GPT-2 encoder.py
        if self.ignore_merges and token in self.vocab:
            return [token]
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return [token]
        while True:
            bigram = min(pairs, key=lambda pair: self.ranks.get(pair, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new_word, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        return list(word)

    def encode_segment(self, text):
        if self.nfc:
            text = unicodedata.normalize("NFC", text)
        ids = []
        for piece in self.pattern.findall(text):
            token = "".join(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
            ids += [self.vocab[t] for t in self.bpe(token)]
        return ids

    def encode(self, text):
        ids, start, i = list(self.prefix), 0, 0
        while i < len(text):
            hit = next(((c, t) for c, t in self.added if text.startswith(c, i)), None)
            if hit is None:
                i += 1
                continue
            ids += self.encode_segment(text[start:i]) + [hit[1]]
            i += len(hit[0])
            start = i
        return ids + self.encode_segment(text[start:])


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("--corpus", required=True)
    t.add_argument("--bytes", type=int, default=20000)
    t.add_argument("--merges", type=int, default=200)
    t.add_argument("--style", choices=sorted(PATTERNS), default="llama3")
    t.add_argument("--out", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--tokenizer", required=True)
    e.add_argument("--input", required=True)
    e.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.command == "train":
        train(args)
    else:
        with open(args.input, encoding="utf-8") as f:
            text = f.read()
        with open(args.out, "w") as f:
            json.dump({"ids": Encoder(args.tokenizer).encode(text)}, f)


if __name__ == "__main__":
    main()
