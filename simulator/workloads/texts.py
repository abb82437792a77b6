"""The bundled English and Vietnamese prompt sets as token ids, and chat messages built
from them the way a chat template lays them out.

Texts are tokenised with a real tokenizer (the caller's; the benchmarks use the
prepared SmolLM2-135M-Instruct's, the only one on these machines: it spends about 3.5x
the tokens on Vietnamese text that it spends on English, more than Llama 3's
tokenizer would). Messages are laid out in ChatML (SmolLM2's template):
``<|im_start|>role\\n`` content ``<|im_end|>\\n``, the prompt ending with the assistant's
opening, so a conversation's next prompt extends the previous one token for token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadtest.workloads.files import bundled_text, read_prompt_lines

LANGUAGES = ("en", "vi")

ASSISTANT_SYSTEM = {
    "en": (
        "You are Minh An, the virtual assistant of the city hospital network and its public service "
        "portal. Answer in the language of the user's message. Be brief, polite and precise. You can explain "
        "opening hours, appointments, the documents a visit needs, fees, insurance cards, test results "
        "pick-up and how to reach each department. You never give medical advice: for symptoms, tell the "
        "user to call the hotline or come to the emergency department. Never ask for a national ID number "
        "in the chat. When you are not sure, say so and give the number of the information desk. Dates are "
        "day/month/year; prices are in dong. Keep personal details out of your answers unless the user gave "
        "them in this conversation."
    ),
    "vi": (
        "Bạn là Minh An, trợ lý ảo của mạng lưới bệnh viện thành phố và cổng dịch vụ công. Hãy trả lời bằng "
        "ngôn ngữ của người dùng. Trả lời ngắn gọn, lịch sự và chính xác. Bạn có thể giải thích giờ làm việc, "
        "cách đặt lịch khám, giấy tờ cần mang theo, chi phí, thẻ bảo hiểm y tế, cách nhận kết quả xét nghiệm "
        "và đường đến từng khoa. Bạn không bao giờ đưa ra lời khuyên y khoa: khi người dùng có triệu chứng, "
        "hãy đề nghị họ gọi đường dây nóng hoặc đến khoa cấp cứu. Không bao giờ hỏi số căn cước công dân "
        "trong cuộc trò chuyện. Khi không chắc chắn, hãy nói rõ và đưa số điện thoại của quầy thông tin. "
        "Ngày tháng viết theo ngày/tháng/năm; giá tính bằng đồng. Không nhắc lại thông tin cá nhân trừ khi "
        "người dùng đã cung cấp trong cuộc trò chuyện này."
    ),
}

RAG_SYSTEM = {
    "en": ("Answer the question using only the document below. If the document does not contain the answer, "
           "say that it does not. Quote the sentence you used. Answer in the language of the question."),
    "vi": ("Hãy trả lời câu hỏi chỉ dựa vào tài liệu dưới đây. Nếu tài liệu không có câu trả lời, hãy nói rõ "
           "điều đó. Trích dẫn câu bạn đã dùng. Trả lời bằng ngôn ngữ của câu hỏi."),
}

DOCUMENT_HEADING = {"en": "Document:\n", "vi": "Tài liệu:\n"}
QUESTION_HEADING = {"en": "\n\nQuestion: ", "vi": "\n\nCâu hỏi: "}


def _ids(tokenizer, text: str) -> tuple[int, ...]:
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def _set_ids(tokenizer, name: str) -> tuple[tuple[int, ...], ...]:
    lines = read_prompt_lines(bundled_text(name), name)
    return tuple(_ids(tokenizer, line.messages[0]) for line in lines)


@dataclass(frozen=True)
class ChatFormat:
    """ChatML markers as token ids."""

    open_system: tuple[int, ...]
    open_user: tuple[int, ...]
    open_assistant: tuple[int, ...]
    close: tuple[int, ...]

    @classmethod
    def of(cls, tokenizer) -> ChatFormat:
        return cls(_ids(tokenizer, "<|im_start|>system\n"), _ids(tokenizer, "<|im_start|>user\n"),
                   _ids(tokenizer, "<|im_start|>assistant\n"), _ids(tokenizer, "<|im_end|>\n"))

    def system(self, content: Sequence[int]) -> tuple[int, ...]:
        return self.open_system + tuple(content) + self.close

    def user_turn(self, content: Sequence[int]) -> tuple[int, ...]:
        """A user message and the assistant's opening (a prompt ends with it)."""
        return self.open_user + tuple(content) + self.close + self.open_assistant

    def answer(self, content: Sequence[int]) -> tuple[int, ...]:
        """An assistant answer as the next prompt repeats it (after the opening already sent)."""
        return tuple(content) + self.close


@dataclass(frozen=True)
class LanguageTexts:
    """One language's bundled texts as token ids."""

    language: str
    assistant_system: tuple[int, ...]
    rag_system: tuple[int, ...]
    document_heading: tuple[int, ...]
    question_heading: tuple[int, ...]
    paragraphs: tuple[tuple[int, ...], ...]  # news-style paragraphs (the summarise set, instruction cut)
    questions: tuple[tuple[int, ...], ...]  # short questions and administrative requests
    requests: tuple[tuple[int, ...], ...]  # whole prompts of every set (first turns)

    @classmethod
    def of(cls, tokenizer, language: str) -> LanguageTexts:
        if language not in LANGUAGES:
            raise ValueError(f"unknown language {language!r}; valid: {', '.join(LANGUAGES)}")
        summaries = read_prompt_lines(bundled_text(f"{language}-summarise"), f"{language}-summarise")
        paragraphs = tuple(_ids(tokenizer, line.messages[0].split("\n\n", 1)[-1]) for line in summaries)
        questions = _set_ids(tokenizer, f"{language}-questions") + _set_ids(tokenizer, f"{language}-health-admin")
        requests = questions + _set_ids(tokenizer, f"{language}-summarise")
        return cls(language, _ids(tokenizer, ASSISTANT_SYSTEM[language]), _ids(tokenizer, RAG_SYSTEM[language]),
                   _ids(tokenizer, DOCUMENT_HEADING[language]), _ids(tokenizer, QUESTION_HEADING[language]),
                   paragraphs, questions, requests)
