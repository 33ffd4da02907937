"""A tiny random Llama with a word-level tokenizer for ToC fine-tuning tests (no model file), and its book."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
import tokenizers
import transformers

from strata.documents.builder import PaperBuilder
from strata.toc.model import toc_prompts
from strata.toc.tree import document_toc, render_toc

BOOK = {"Sleep": ["Dreams", "Insomnia"], "Memory": ["Encoding", "Forgetting"]}

CHAT = (
    "{% for m in messages %}<start> {{ m['role'] }} {{ m['content'] }} <end> {% endfor %}"
    "{% if add_generation_prompt %}<start> assistant {% endif %}"
)


def book():
    builder = PaperBuilder("tiny-book", "test")
    for chapter, sections in BOOK.items():
        builder.open_section(chapter, 1)
        for section in sections:
            builder.open_section(section, 2)
            builder.add_block(f"{section} is a topic of {chapter.lower()} research.")
    return document_toc(builder.build(title="Tiny Psychology"))


def tiny_tokenizer(toc):
    """Word-level: every word of the prompts, the ToC and the answers is in the vocabulary."""
    registry = toc_prompts()
    prompts = [f"{registry.get(name).system} {registry.get(name).user}" for name in registry.names()]
    text = " ".join([render_toc(toc), *prompts, "0 1 2 3 4 5 6 7 8 9"])
    words = ["<pad>", "<unk>", "<start>", "<end>", "system", "user", "assistant"]
    pre = tokenizers.pre_tokenizers.Whitespace()
    for word, _ in pre.pre_tokenize_str(text + ' questions What is why ? " [ ] { } : ,'):
        if word not in words:
            words.append(word)
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = pre
    tokenizer.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<end>", pad_token="<pad>", unk_token="<unk>", chat_template=CHAT
    )


def tiny_model(tokenizer):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return transformers.LlamaForCausalLM(config).eval()


def write_openstax_book(
    root: Path, name: str, chapters: dict[str, dict[str, str]], questions: Sequence[tuple[str, tuple[str, ...]]]
) -> Path:
    """A book as OpenStax ToC-QA has it, ROOT/NAME/derived/{toc.json, sections.jsonl, queries.jsonl}: chapters of
    sections (title -> text), and (question, gold path) pairs. Returns `root`."""
    derived = root / name / "derived"
    derived.mkdir(parents=True)
    toc = {"type": "book", "title": name.replace("-", " ").title(), "children": []}
    sections = []
    for chapter, modules in chapters.items():
        node = {"type": "chapter", "title": chapter, "children": []}
        for title, text in modules.items():
            module_id = f"m{len(sections)}"
            node["children"].append({"type": "section", "module_id": module_id, "title": title})
            sections.append({"module_id": module_id, "book": name, "path": [chapter, title], "title": title,
                             "text": text})
        toc["children"].append(node)
    (derived / "toc.json").write_text(json.dumps(toc))
    (derived / "sections.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sections))
    queries = [{"query_id": f"{name}:q{i}", "book": name, "question": question, "gold_path": list(gold)}
               for i, (question, gold) in enumerate(questions)]
    (derived / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return root
