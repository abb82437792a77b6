"""Tokens per character of the bundled prompt sets, English against Vietnamese.

Counts every prompt of each bundled set (``loadtest/data/prompts``) with a model's
tokenizer (without special tokens or the chat template) and prints, per topic and for
all sets of a language pooled, side by side per language: prompts, characters
(Unicode code points), tokens, tokens/char and chars/token, then each language's
tokens/char over English's: how much more the same amount of text costs at a price
per token.

    .venv/bin/python -m benchmarks.tokens_per_char [--tokenizer PATH] [--out results/tokens_per_char.json]

``--tokenizer`` is a local Hugging Face model folder (default: the prepared
SmolLM2-135M-Instruct in ``$SERVEOUT_HOME/models``). Figures are printed and written
as JSON, never asserted. Nothing is sent over the network.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.common.model import MODEL as DEFAULT_MODEL
from loadtest.errors import LoadTestError
from loadtest.workloads.text_density import TextDensity, language_densities, set_densities
from loadtest.workloads.tokenizer import default_tokenizer_path, load_tokenizer

BASE_LANGUAGE = "en"


def topic_of(prompt_set: str) -> str:
    return prompt_set.split("-", 1)[1] if "-" in prompt_set else prompt_set


def _cells(d: TextDensity | None) -> list[str]:
    if d is None:
        return ["-"] * 5
    tpc, cpt = d.tokens_per_char, d.chars_per_token
    return [str(d.prompts), f"{d.characters:,}", f"{d.tokens:,}",
            "-" if tpc is None else f"{tpc:.3f}", "-" if cpt is None else f"{cpt:.2f}"]


def _ratio(d: TextDensity | None, base: TextDensity | None) -> str:
    if d is None or base is None or d.tokens_per_char is None or not base.tokens_per_char:
        return "-"
    return f"{d.tokens_per_char / base.tokens_per_char:.2f}x"


def table(per_set: tuple[TextDensity, ...]) -> list[str]:
    """A Markdown table: one row per topic and one for all sets, languages side by side."""
    languages = sorted({d.language for d in per_set}, key=lambda lang: (lang != BASE_LANGUAGE, lang))
    others = [lang for lang in languages if lang != BASE_LANGUAGE]
    by_topic: dict[str, dict[str, TextDensity]] = {}
    for d in per_set:
        by_topic.setdefault(topic_of(d.name), {})[d.language] = d
    by_topic["all sets"] = {d.language: d for d in language_densities(per_set)}
    header = ["topic"]
    for lang in languages:
        header += [f"{lang} prompts", f"{lang} chars", f"{lang} tokens", f"{lang} tok/char", f"{lang} chars/tok"]
    header += [f"{lang}/{BASE_LANGUAGE} tok/char" for lang in others]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for topic, row in by_topic.items():
        cells = [topic]
        for lang in languages:
            cells += _cells(row.get(lang))
        cells += [_ratio(row.get(lang), row.get(BASE_LANGUAGE)) for lang in others]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help=f"a local Hugging Face model folder (default: the prepared {DEFAULT_MODEL})")
    parser.add_argument("--out", type=Path, default=Path("results") / "tokens_per_char.json")
    args = parser.parse_args(argv)
    path = args.tokenizer or default_tokenizer_path(DEFAULT_MODEL)
    try:
        per_set = set_densities(load_tokenizer(path))
    except LoadTestError as exc:
        print(f"tokens_per_char: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"Tokens per character of the bundled prompt sets, tokenizer {path}:\n")
    print("\n".join(table(per_set)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figures = {"tokenizer": str(path), "sets": [d.model_dump() for d in per_set],
               "languages": [d.model_dump() for d in language_densities(per_set)]}
    args.out.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
