"""Syntax highlighting without recompiling tree-sitter's query on every `load_text`.

Textual's TextArea compiles its language's highlight query each time a document is loaded (40-45 ms
for Python here, 100-300 ms while a round runs on a 2-core machine), and the Source pane loads a new
document for every round it shows. A compiled `tree_sitter.Query` is immutable and meant to be
reused ("Queries should be prepared once, then reused", Textual's own docstring), so the compiled
query is kept per language and query text. `install()` wraps `SyntaxAwareDocument.prepare_query`
once; if Textual's internals change shape, it leaves them alone (highlighting stays correct, only
slower).
"""

from __future__ import annotations

from typing import Any

_CACHE: dict[tuple[int, str], tuple[Any, Any]] = {}
_installed = False


def install() -> bool:
    """Cache compiled highlight queries (idempotent). True when the cache is in place."""
    global _installed
    if _installed:
        return True
    try:
        from textual.document._syntax_aware_document import SyntaxAwareDocument
    except ImportError:
        return False
    original = getattr(SyntaxAwareDocument, "prepare_query", None)
    if original is None:
        return False

    def prepare_query(self: Any, query: str) -> Any:
        # Keyed by the Language object (Textual keeps one per language name) and the query's text.
        key = (id(self.language), query)
        hit = _CACHE.get(key)
        if hit is None or hit[0] is not self.language:
            hit = _CACHE[key] = (self.language, original(self, query))
        return hit[1]

    SyntaxAwareDocument.prepare_query = prepare_query  # type: ignore[method-assign]
    _installed = True
    return True
