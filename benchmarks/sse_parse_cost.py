"""CPU cost per SSE chunk of loadtest's stream parsing: general path vs fast path.

Feeds a vLLM-like chat stream (role chunk, ``--tokens`` one-token content chunks, a
finish chunk, a usage chunk, ``[DONE]``) line by line, as the generator's ``readline``
gives it, to
  - slow: :class:`SSEDecoder` + :meth:`StreamTimer.on_event` (the path every chunk took
    before the fast path, a little cheaper now that ``ChunkInfo`` is a tuple; still the
    path for unusual streams),
  - fast: :class:`StreamReader` (the generator's path now),
  - vllm: a copy of the shape of vLLM's benchmark handler (strip, decode, drop
    ``data: ``, ``json.loads``, pick the delta), for scale,
in alternating rounds in one process, and prints the best round's µs per chunk of each.

    .venv/bin/python -m benchmarks.sse_parse_cost [--tokens 256] [--streams 40] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import time

from loadtest.client.sse import SSEDecoder, StreamReader, StreamTimer


def vllm_like_stream(tokens: int) -> list[bytes]:
    """The lines of one chat stream as vLLM's OpenAI server writes it."""
    head = {"id": "chatcmpl-8c1e0f0d4a6b4a8e9f3c2d1b0a9e8f7d", "object": "chat.completion.chunk",
            "created": 1764557000, "model": "Qwen/Qwen2.5-0.5B-Instruct"}

    def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
        choices = [] if usage else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        body = {**head, "choices": choices, **({"usage": usage} if usage else {})}
        return b"data: " + json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"

    lines = [chunk({"role": "assistant", "content": ""})]
    lines += [chunk({"content": f" tok{i % 97}"}) for i in range(tokens)]
    lines.append(chunk({"content": ""}, finish="length"))
    lines.append(chunk({}, usage={"prompt_tokens": 128, "completion_tokens": tokens, "total_tokens": 128 + tokens}))
    lines.append(b"data: [DONE]\n")
    out: list[bytes] = []
    for line in lines:
        out += [line, b"\n"]
    return out


def slow(lines: list[bytes]) -> StreamTimer:
    decoder, timer = SSEDecoder(), StreamTimer()
    for at, line in enumerate(lines):
        for event in decoder.feed(line):
            timer.on_event(event, at)
    for event in decoder.close():
        timer.on_event(event, len(lines))
    return timer


def fast(lines: list[bytes]) -> StreamTimer:
    reader = StreamReader()
    for at, line in enumerate(lines):
        reader.feed(line, at)
    reader.close(len(lines))
    return reader.timer


def vllm(lines: list[bytes]) -> list[str]:
    text = []
    for line in lines:
        chunk_bytes = line.strip()
        if not chunk_bytes:
            continue
        chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
        if chunk != "[DONE]":
            data = json.loads(chunk)
            if choices := data.get("choices"):
                text.append(choices[0]["delta"].get("content") or "")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    lines = vllm_like_stream(args.tokens)
    events = len(lines) // 2
    a, b = slow(lines), fast(lines)
    assert (a.ttft, a.gaps, a.output_text, a.usage, a.done) == (b.ttft, b.gaps, b.output_text, b.usage, b.done)
    best = {"slow": float("inf"), "fast": float("inf"), "vllm": float("inf")}
    paths = {"slow": slow, "fast": fast, "vllm": vllm}
    for round_ in range(args.rounds):
        order = list(paths) if round_ % 2 == 0 else list(reversed(paths))
        for name in order:
            start = time.perf_counter()
            for _ in range(args.streams):
                paths[name](lines)
            per_chunk = (time.perf_counter() - start) / (args.streams * events)
            best[name] = min(best[name], per_chunk)
    print(f"{events} SSE events per stream (2 readline chunks each), "
          f"{args.streams} streams x {args.rounds} rounds, best round:")
    for name, label in (("slow", "SSEDecoder.feed + StreamTimer.on_event"),
                        ("fast", "StreamReader.feed (fast path)"),
                        ("vllm", "vLLM-style handler + json.loads")):
        print(f"  {name:5} {best[name] * 1e6:7.2f} µs/event  {label}")
    print(f"  slow/fast = {best['slow'] / best['fast']:.2f}x   fast/vllm = {best['fast'] / best['vllm']:.2f}x")


if __name__ == "__main__":
    main()
