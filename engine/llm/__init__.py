"""LLM access for the Coder and the Judge: settings, one async client over OpenAI/Anthropic/
OpenAI-compatible servers, usage and cost per call, and a ledger with a dollar cap.

Importing this package never imports openai or anthropic (they load on the first call).
"""

from cudaforge.engine.llm.client import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    classify_exception,
    make_client,
)
from cudaforge.engine.llm.prices import PriceSheet, find_price_sheet, load_price_sheets, price_of
from cudaforge.engine.llm.settings import (
    PLACEHOLDER_API_KEY,
    PROVIDERS,
    LLMSettings,
    check_api_key,
    is_loopback_url,
    provider_notice,
)
from cudaforge.engine.llm.types import (
    Budget,
    CallRecord,
    ErrorKind,
    LLMError,
    LLMReply,
    LLMResult,
    Message,
    Usage,
    UsageLedger,
    UsageTotals,
    read_transcript,
    write_transcript,
)

__all__ = [
    "PLACEHOLDER_API_KEY",
    "PROVIDERS",
    "AnthropicClient",
    "Budget",
    "CallRecord",
    "ErrorKind",
    "LLMClient",
    "LLMError",
    "LLMReply",
    "LLMResult",
    "LLMSettings",
    "Message",
    "PriceSheet",
    "OpenAIChatClient",
    "Usage",
    "UsageLedger",
    "UsageTotals",
    "check_api_key",
    "classify_exception",
    "find_price_sheet",
    "is_loopback_url",
    "load_price_sheets",
    "make_client",
    "price_of",
    "provider_notice",
    "read_transcript",
    "write_transcript",
]
