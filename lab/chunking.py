"""Token-window chunking with the embedding model's tokenizer; title and tags prepended."""
from __future__ import annotations

from dataclasses import dataclass

from lab.config import ChunkConfig
from lab.embed.base import Tokenizer


@dataclass(frozen=True)
class Chunk:
    ordinal: int
    text: str  # the text that is embedded and indexed (header + body)
    start_char: int  # span of the body inside the memory's content
    end_char: int
    n_tokens: int  # tokens of the body


def header(title: str, tags: list[str]) -> str:
    parts = []
    if title.strip():
        parts.append(title.strip())
    if tags:
        parts.append("tags: " + ", ".join(tags))
    return "\n".join(parts)


def chunk_text(
    content: str,
    tokenizer: Tokenizer,
    config: ChunkConfig,
    *,
    title: str = "",
    tags: list[str] | None = None,
    context: str = "",
) -> list[Chunk]:
    """Split ``content`` into windows of ``config.size`` tokens overlapping by ``config.overlap``.

    The window counts the content's tokens only; the title/tags header is added on top, so a
    header never pushes content out of a chunk. A memory of at most ``size`` tokens (or with no
    tokens at all, e.g. only punctuation) stays one chunk. Windows are cut at token boundaries
    and sliced from the original string, so no character is altered.
    """
    head = header(title, tags or []) if config.prepend_title_tags else ""
    if context:  # index-time context (earlier turns, date): indexed with every chunk, never returned
        head = f"{context}\n{head}" if head else context

    def _text(body: str) -> str:
        return f"{head}\n{body}" if head else body

    spans = tokenizer.spans(content)
    if len(spans) <= config.size:
        return [Chunk(0, _text(content), 0, len(content), len(spans))]
    step = config.size - config.overlap
    chunks: list[Chunk] = []
    start_tok = 0
    while True:
        end_tok = min(start_tok + config.size, len(spans))
        # The first window starts at 0 and the last ends at len(content) so that leading and
        # trailing characters outside any token (whitespace, punctuation) are not lost.
        start_char = 0 if start_tok == 0 else spans[start_tok][0]
        end_char = len(content) if end_tok == len(spans) else spans[end_tok - 1][1]
        body = content[start_char:end_char]
        chunks.append(Chunk(len(chunks), _text(body), start_char, end_char, end_tok - start_tok))
        if end_tok == len(spans):
            return chunks
        start_tok += step
