"""RAG prompts over shared documents, English and Vietnamese.

A corpus of ``documents`` documents per language, each a run of the language's bundled
news-style paragraphs (drawn at random, ``document_tokens`` long); a request is the
RAG system prompt, one document and a question, so requests about the same document
share the system prompt and the whole document as a prefix. Documents are asked about
with Zipf popularity (``zipf``: a few are hot, most are asked once or twice, as a
knowledge base is); arrivals are Poisson.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.workloads.requests import RequestSet, TimedRequest
from simulator.workloads.texts import LANGUAGES, ChatFormat, LanguageTexts


@dataclass(frozen=True)
class RagMix:
    """The corpus and the questions asked of it."""

    requests: int = 6000
    rate: float = 10.0  # requests per second
    documents: int = 500  # per language
    document_tokens: tuple[int, int] = (1500, 6000)
    zipf: float = 1.1
    output_tokens: tuple[int, int] = (64, 384)
    vietnamese_share: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.requests < 1 or self.rate <= 0 or self.documents < 1 or self.zipf <= 0:
            raise ValueError("a RAG mix needs requests >= 1, rate > 0, documents >= 1 and zipf > 0")
        if not 1 <= self.document_tokens[0] <= self.document_tokens[1]:
            raise ValueError("document_tokens must be a range of positive lengths")


def _document(rng: np.random.Generator, texts: LanguageTexts, length: int) -> tuple[int, ...]:
    ids: list[int] = []
    while len(ids) < length:
        ids.extend(texts.paragraphs[rng.integers(len(texts.paragraphs))])
    return tuple(ids[:length])


def rag_requests(mix: RagMix, tokenizer) -> RequestSet:
    """``mix.requests`` questions about the corpus, in arrival order."""
    rng = np.random.default_rng(mix.seed)
    chat = ChatFormat.of(tokenizer)
    heads, questions = {}, {}
    for lang in LANGUAGES:
        texts = LanguageTexts.of(tokenizer, lang)
        system = chat.system(texts.rag_system) + chat.open_user + texts.document_heading
        lengths = rng.integers(mix.document_tokens[0], mix.document_tokens[1] + 1, mix.documents)
        heads[lang] = [system + _document(rng, texts, int(n)) + texts.question_heading for n in lengths]
        questions[lang] = texts.questions
    weights = 1.0 / np.arange(1, mix.documents + 1) ** mix.zipf
    weights /= weights.sum()
    times = np.cumsum(rng.exponential(1.0 / mix.rate, mix.requests)).tolist()
    out = []
    for i, t in enumerate(times):
        lang = "vi" if rng.random() < mix.vietnamese_share else "en"
        doc = int(rng.choice(mix.documents, p=weights))
        question = questions[lang][rng.integers(len(questions[lang]))]
        prompt = heads[lang][doc] + question + chat.close + chat.open_assistant
        output = int(rng.integers(mix.output_tokens[0], mix.output_tokens[1] + 1))
        out.append(TimedRequest(t, prompt, output, session=i, turn=0))
    return RequestSet("rag", tuple(out), f"{mix.documents} documents per language, Zipf {mix.zipf:g}, "
                      f"{round(100 * mix.vietnamese_share)}% Vietnamese")
