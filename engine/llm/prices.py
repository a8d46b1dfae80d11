"""Price sheets (profiles/models/*.toml): prices per million tokens and context/output limits.

A model without a sheet, or a sheet without a price, costs None ("unknown"), never zero,
so a budget is not silently treated as untouched.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from cudaforge.engine.errors import ConfigError
from cudaforge.engine.llm.settings import is_loopback_url
from cudaforge.engine.llm.types import Usage

_PRICE_KEYS = ("input_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok", "output_per_mtok")
_KEYS = (
    "provider",
    "aliases",
    *_PRICE_KEYS,
    "context_tokens",
    "max_output_tokens",
    "reasoning",
    "accepts_temperature",
    "price_date",
    "price_source",
    "notes",
)
# Dated snapshots ("gpt-5-mini-2025-08-07", "claude-sonnet-4-5-20250929") share their base's sheet.
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$")
LOCAL_PRICE_SHEET = "local"


def format_cost(dollars: float | None, known: bool = True) -> str:
    """Dollars for any table, file or bar: "?" when unknown (None), "$0.012+?" for a priced part with
    unpriced calls beside it (known=False), never "$0.000" for a cost nobody priced."""
    if dollars is None or (not known and dollars <= 0):
        return "?"
    text = f"${dollars:.3f}" if dollars < 10 else f"${dollars:.2f}"
    return text if known else text + "+?"


@dataclass(frozen=True)
class PriceSheet:
    """What we know about one model; every price is dollars per million tokens, None = unknown."""

    name: str
    provider: str
    input_per_mtok: float | None = None
    cached_input_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None
    output_per_mtok: float | None = None
    context_tokens: int | None = None
    max_output_tokens: int | None = None
    reasoning: bool = False  # a reasoning model: takes an effort/thinking setting
    accepts_temperature: bool = True  # o-series and gpt-5 reasoning models refuse temperature
    aliases: tuple[str, ...] = ()
    price_date: str = ""
    price_source: str = ""
    notes: str = ""

    @property
    def priced(self) -> bool:
        return self.input_per_mtok is not None and self.output_per_mtok is not None

    def cost(self, usage: Usage) -> float | None:
        """Dollars for one call; None if unpriced. Cache rates fall back to the input rate."""
        if not self.priced:
            return None
        assert self.input_per_mtok is not None and self.output_per_mtok is not None
        cached_rate = (
            self.cached_input_per_mtok if self.cached_input_per_mtok is not None else self.input_per_mtok
        )
        write_rate = (
            self.cache_write_per_mtok if self.cache_write_per_mtok is not None else self.input_per_mtok
        )
        dollars = (
            usage.uncached_input_tokens * self.input_per_mtok
            + usage.cached_input_tokens * cached_rate
            + usage.cache_write_tokens * write_rate
            + usage.output_tokens * self.output_per_mtok
        )
        return dollars / 1_000_000


def _parse_price_sheet(name: str, table: Mapping[str, Any], source: str) -> PriceSheet:
    for key in table:
        if key not in _KEYS:
            raise ConfigError(f"{source}: [models.\"{name}\"] unknown key '{key}'")
    values: dict[str, Any] = dict(table)
    for key in _PRICE_KEYS:
        if key in values:
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f'{source}: [models."{name}"] {key} must be a non-negative number')
            values[key] = float(value)
    values["aliases"] = tuple(values.get("aliases", ()))
    if "provider" not in values:
        raise ConfigError(f'{source}: [models."{name}"] needs provider')
    return PriceSheet(name=name, **values)


def parse_price_sheets(text: str, source: str) -> dict[str, PriceSheet]:
    """Sheets from one TOML document (`[models."name"]` tables)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    models = data.get("models", {})
    return {name: _parse_price_sheet(name, table, source) for name, table in models.items()}


@functools.cache
def load_price_sheets() -> dict[str, PriceSheet]:
    """All shipped sheets, read once from package data `cudaforge.profiles/models/*.toml`."""
    sheets: dict[str, PriceSheet] = {}
    folder = resources.files("cudaforge.profiles").joinpath("models")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            sheets.update(
                parse_price_sheets(entry.read_text(encoding="utf-8"), f"profiles/models/{entry.name}")
            )
    return sheets


def find_price_sheet(model: str, sheets: Mapping[str, PriceSheet] | None = None) -> PriceSheet | None:
    """The sheet of `model`: exact name, alias, dated snapshot of a known name, or None."""
    table = load_price_sheets() if sheets is None else sheets
    candidates = [model]
    if "/" in model:  # "openai/gpt-5" as written for routers
        candidates.append(model.rsplit("/", 1)[1])
    for name in candidates:
        if name in table:
            return table[name]
        for sheet in table.values():
            if name in sheet.aliases:
                return sheet
        base = _SNAPSHOT_SUFFIX.sub("", name)
        if base != name and base in table:
            return table[base]
    return None


def price_of(
    model: str,
    usage: Usage,
    *,
    provider: str | None = None,
    base_url: str | None = None,
    sheets: Mapping[str, PriceSheet] | None = None,
) -> float | None:
    """Dollars for `usage` on `model`, or None when unknown.

    A model served by an OpenAI-compatible server on this machine falls back to the `local`
    sheet (free to call) when it has no sheet of its own; the same model name on a remote
    server stays unknown, because someone is probably billing for it.
    """
    sheet = find_price_sheet(model, sheets)
    unpriced = sheet is None or not sheet.priced
    if unpriced and provider == "openai-compatible" and base_url and is_loopback_url(base_url):
        table = load_price_sheets() if sheets is None else sheets
        sheet = table.get(LOCAL_PRICE_SHEET)
    return None if sheet is None else sheet.cost(usage)


def deprecated_models() -> Mapping[str, str]:
    """Model name -> end-of-life date, from the table the anthropic SDK ships ({} without it).
    Read from the installed SDK, so the notice follows the user's SDK version, not our release."""
    try:
        from anthropic._data import DEPRECATED_MODELS  # type: ignore[import-not-found]
    except Exception:  # no SDK, or a version without the table
        return {}
    return DEPRECATED_MODELS if isinstance(DEPRECATED_MODELS, Mapping) else {}


def deprecation_notice(model: str, *, role: str) -> str | None:
    """One line for start-up when `model` is in the SDK's deprecation table, else None. The table lists
    Anthropic's models only, and reading it imports the whole anthropic SDK (1-2 s of CPU, while the
    workbench draws beside it), so other models are not looked up."""
    if "claude" not in model.lower():
        return None
    end_of_life = deprecated_models().get(model)
    if end_of_life is None:
        return None
    return (f"{role}: model {model} is deprecated by its provider and reaches end of life on {end_of_life} "
            f"(the installed anthropic SDK's table); set a current model in [{role.lower()}] model.")

