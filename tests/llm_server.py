"""A scripted LLM server on 127.0.0.1 for tests: OpenAI Chat Completions and Anthropic Messages.

The real openai/anthropic SDK clients talk to it through `base_url`, so tests exercise the same
code paths (request building, SSE streaming, the SDKs' own retries) as production, offline.

    with ScriptedLLMServer([Fault("429", retry_after=0.01), Reply(text="```python ...```")]) as srv:
        settings = LLMSettings(provider="openai", model="gpt-5", base_url=srv.base_url_openai)
        ...
        assert len(srv.requests) == 2

Each request consumes the next script entry, whatever the endpoint. An entry is a `Reply`, a
`Fault`, or a callable taking the `RecordedRequest` and returning one of those (for scripts that
answer according to the prompt). When the script runs out the server answers 500 with
`x-should-retry: false` and "script exhausted", so a test fails loudly instead of hanging.

Not a test module (no `test_` prefix); session and TUI tests import it too.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

FaultKind = Literal[
    "429",  # rate limited, with Retry-After / retry-after-ms when retry_after is given
    "500",  # internal server error
    "529",  # Anthropic "overloaded"
    "401",  # bad key
    "403",  # the key may not use this model
    "404",  # unknown model
    "400",  # bad request
    "stall",  # no answer for stall_s seconds (past the client's timeout)
    "truncated",  # a reply cut off at the output limit (finish_reason length / stop_reason max_tokens)
    "no_code",  # a reply with prose but no module
    "bad_json",  # a Judge reply that is not valid JSON
    "disconnect",  # the connection closes without an answer
    "stream_error",  # Anthropic stream that starts and then sends an error event
]

NO_CODE_TEXT = (
    "I would fuse the two kernels and vectorise the loads, but I will describe it instead of writing it."
)
BAD_JSON_TEXT = 'The bottleneck is DRAM bandwidth. {"bottleneck": "memory", "method": fuse the ops'
TRUNCATED_TEXT = "```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        y = "


@dataclass(frozen=True)
class Reply:
    """A successful answer. Token counts left as None are estimated from the text (chars / 4)."""

    text: str = ""
    thinking: str = ""
    finish: Literal["stop", "length", "refusal"] = "stop"
    input_tokens: int | None = None  # the whole prompt, including cached and cache-write tokens
    output_tokens: int | None = None  # including reasoning/thinking tokens
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int | None = None
    model: str | None = None  # default: echo the requested model
    delay_s: float = 0.0


@dataclass(frozen=True)
class Fault:
    """A scripted failure; see FaultKind for what each kind does."""

    kind: FaultKind
    retry_after: float | None = None  # seconds, sent as Retry-After and retry-after-ms
    stall_s: float = 30.0
    text: str | None = None  # override the canned text of truncated / no_code / bad_json


Entry = Reply | Fault | Callable[["RecordedRequest"], "Reply | Fault"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received: which API, the path, headers (lower-case names) and body."""

    api: Literal["openai", "anthropic", "other"]
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw_body: str
    received_at: float
    answered_with: str = ""  # filled from the script entry: "reply", "fault:429", ...

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def system(self) -> str:
        """The system prompt, wherever the API puts it."""
        if self.api == "anthropic":
            system = self.body.get("system", "")
            if isinstance(system, list):
                return "".join(b.get("text", "") for b in system)
            return str(system)
        return "".join(
            _content_text(m.get("content"))
            for m in self.body.get("messages", [])
            if m.get("role") == "system"
        )

    @property
    def messages(self) -> list[dict[str, str]]:
        """User/assistant turns as {role, content} with content flattened to text."""
        return [
            {"role": m.get("role", ""), "content": _content_text(m.get("content"))}
            for m in self.body.get("messages", [])
            if m.get("role") != "system"
        ]

    @property
    def last_user_text(self) -> str:
        users = [m["content"] for m in self.messages if m["role"] == "user"]
        return users[-1] if users else ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


class ScriptedLLMServer:
    """Threaded HTTP server replaying a script; use as a context manager (random free port)."""

    AUTH_HEADERS = ("authorization", "x-api-key")

    def __init__(self, script: Iterable[Entry] = ()) -> None:
        self._script: deque[Entry] = deque(script)
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> ScriptedLLMServer:
        handler = type("_Handler", (_Handler,), {"owner": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="scripted-llm", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes stalled handlers
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests use --------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url_openai(self) -> str:
        return f"http://127.0.0.1:{self.port}/openai/v1"

    @property
    def base_url_compat(self) -> str:
        """For provider 'openai-compatible' (same protocol, a path of its own for assertions)."""
        return f"http://127.0.0.1:{self.port}/compat/v1"

    @property
    def base_url_anthropic(self) -> str:
        return f"http://127.0.0.1:{self.port}/anthropic"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def push(self, *entries: Entry) -> None:
        """Append entries to the script (a test can script as a session goes)."""
        with self._lock:
            self._script.extend(entries)

    def leaks(self, secret: str) -> list[str]:
        """Where `secret` appears in what the server received, other than the auth headers."""
        found = []
        for i, req in enumerate(self.requests):
            for name, value in req.headers.items():
                if name not in self.AUTH_HEADERS and secret in value:
                    found.append(f"request {i} header {name}")
            if secret in req.raw_body or secret in req.path:
                found.append(f"request {i} body/path")
        return found

    # -- internals -------------------------------------------------------------------------------
    def _next(self, request: RecordedRequest) -> Reply | Fault | None:
        with self._lock:
            entry = self._script.popleft() if self._script else None
        if entry is not None and callable(entry):
            entry = entry(request)
        return entry

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedLLMServer
    protocol_version = "HTTP/1.0"  # one request per connection; SSE ends when the socket closes

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        return

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length).decode("utf-8") if length else ""
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = {}
        if self.path.endswith("/chat/completions"):
            api = "openai"
        elif self.path.endswith("/v1/messages"):
            api = "anthropic"
        else:
            api = "other"
        request = RecordedRequest(
            api=api,
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body if isinstance(body, dict) else {},
            raw_body=raw,
            received_at=time.time(),
        )
        if api == "other":
            self.owner._record(request)
            self._json(404, {"error": {"message": f"no such endpoint {self.path}"}})
            return
        entry = self.owner._next(request)
        label = (
            "exhausted" if entry is None else ("reply" if isinstance(entry, Reply) else f"fault:{entry.kind}")
        )
        self.owner._record(_with_label(request, label))
        # A client that gave up (timeout, cancellation) leaves nothing to answer.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._answer(api, request, entry)

    # -- answering ------------------------------------------------------------------------------
    def _answer(self, api: str, request: RecordedRequest, entry: Reply | Fault | None) -> None:
        if entry is None:
            self._error(api, 500, "api_error", "script exhausted", {"x-should-retry": "false"})
            return
        if isinstance(entry, Fault):
            reply = self._fault(api, entry)
            if reply is None:
                return
            entry = reply
        if entry.delay_s:
            self.owner._stop.wait(entry.delay_s)
        stream = bool(request.body.get("stream"))
        if api == "openai":
            self._openai(request, entry, stream)
        else:
            self._anthropic(request, entry, stream)

    def _fault(self, api: str, fault: Fault) -> Reply | None:
        """Send the fault's response, or turn it into a scripted Reply (content faults)."""
        kind = fault.kind
        if kind == "truncated":
            return Reply(text=fault.text if fault.text is not None else TRUNCATED_TEXT, finish="length")
        if kind == "no_code":
            return Reply(text=fault.text if fault.text is not None else NO_CODE_TEXT)
        if kind == "bad_json":
            return Reply(text=fault.text if fault.text is not None else BAD_JSON_TEXT)
        if kind == "stall":
            self.owner._stop.wait(fault.stall_s)
            if not self.owner._stop.is_set():
                return Reply(text="a reply that came too late")
            return None
        if kind == "disconnect":
            self.close_connection = True
            self.connection.close()
            return None
        if kind == "stream_error":
            self._anthropic_stream_error()
            return None
        headers: dict[str, str] = {}
        if fault.retry_after is not None:
            headers["retry-after"] = str(max(0, math.ceil(fault.retry_after)))
            headers["retry-after-ms"] = str(int(fault.retry_after * 1000))
        status = int(kind)
        err_type = {
            "429": "rate_limit_error",
            "500": "api_error",
            "529": "overloaded_error",
            "401": "authentication_error",
            "403": "permission_error",
            "404": "not_found_error",
            "400": "invalid_request_error",
        }[kind]
        self._error(api, status, err_type, f"scripted {kind}", headers)
        return None

    def _error(self, api: str, status: int, err_type: str, message: str, headers: dict[str, str]) -> None:
        if api == "anthropic":
            body: dict[str, Any] = {"type": "error", "error": {"type": err_type, "message": message}}
        else:
            body = {"error": {"message": message, "type": err_type, "param": None, "code": None}}
        self._json(status, body, headers)

    def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.end_headers()

    def _sse(self, data: dict[str, Any] | str, event: str | None = None) -> None:
        chunk = "" if event is None else f"event: {event}\n"
        chunk += f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
        self.wfile.write(chunk.encode("utf-8"))
        self.wfile.flush()

    # -- OpenAI Chat Completions -------------------------------------------------------------------
    def _openai(self, request: RecordedRequest, reply: Reply, stream: bool) -> None:
        usage = _usage(request, reply)
        finish = {"stop": "stop", "length": "length", "refusal": "content_filter"}[reply.finish]
        model = reply.model or request.model
        rid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        openai_usage = {
            "prompt_tokens": usage["input"],
            "completion_tokens": usage["output"],
            "total_tokens": usage["input"] + usage["output"],
            "prompt_tokens_details": {"cached_tokens": usage["cached"]},
            "completion_tokens_details": {"reasoning_tokens": usage["reasoning"] or 0},
        }
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.thinking:
            message["reasoning_content"] = reply.thinking
        if not stream:
            self._json(
                200,
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                    "usage": openai_usage,
                },
            )
            return
        self._sse_start()
        base = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
        self._sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for piece in _pieces(reply.text):
            self._sse({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        self._sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (request.body.get("stream_options") or {}).get("include_usage"):
            self._sse({**base, "choices": [], "usage": openai_usage})
        self._sse("[DONE]")

    # -- Anthropic Messages --------------------------------------------------------------------------
    def _anthropic(self, request: RecordedRequest, reply: Reply, stream: bool) -> None:
        usage = _usage(request, reply)
        stop = {"stop": "end_turn", "length": "max_tokens", "refusal": "refusal"}[reply.finish]
        model = reply.model or request.model
        # Anthropic's input_tokens excludes cache reads and writes.
        uncached = usage["input"] - usage["cached"] - usage["cache_write"]
        final_usage: dict[str, Any] = {
            "input_tokens": uncached,
            "output_tokens": usage["output"],
            "cache_read_input_tokens": usage["cached"],
            "cache_creation_input_tokens": usage["cache_write"],
        }
        if usage["reasoning"] is not None:
            final_usage["output_tokens_details"] = {"thinking_tokens": usage["reasoning"]}
        blocks: list[dict[str, Any]] = []
        if reply.thinking:
            blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": "sig-scripted"})
        blocks.append({"type": "text", "text": reply.text})
        mid = f"msg_{uuid.uuid4().hex[:12]}"
        if not stream:
            self._json(
                200,
                {
                    "id": mid,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": blocks,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": final_usage,
                },
            )
            return
        self._sse_start()
        start_usage = {**final_usage, "output_tokens": 1}
        start_usage.pop("output_tokens_details", None)
        message = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage,
        }
        self._sse({"type": "message_start", "message": message}, "message_start")
        self._sse({"type": "ping"}, "ping")
        for index, block in enumerate(blocks):
            if block["type"] == "thinking":
                start = {"type": "thinking", "thinking": "", "signature": ""}
                self._sse(
                    {"type": "content_block_start", "index": index, "content_block": start},
                    "content_block_start",
                )
                for piece in _pieces(block["thinking"]):
                    delta = {"type": "thinking_delta", "thinking": piece}
                    self._sse(
                        {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
                    )
                delta = {"type": "signature_delta", "signature": block["signature"]}
                self._sse(
                    {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
                )
            else:
                start = {"type": "text", "text": ""}
                self._sse(
                    {"type": "content_block_start", "index": index, "content_block": start},
                    "content_block_start",
                )
                for piece in _pieces(block["text"]):
                    delta = {"type": "text_delta", "text": piece}
                    self._sse(
                        {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
                    )
            self._sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        self._sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": final_usage,
            },
            "message_delta",
        )
        self._sse({"type": "message_stop"}, "message_stop")

    def _anthropic_stream_error(self) -> None:
        self._sse_start()
        message = {
            "id": "msg_err",
            "type": "message",
            "role": "assistant",
            "model": "scripted",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
        self._sse({"type": "message_start", "message": message}, "message_start")
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "scripted overload"}}
        self._sse(error, "error")


def _with_label(request: RecordedRequest, label: str) -> RecordedRequest:
    return RecordedRequest(**{**request.__dict__, "answered_with": label})


def _pieces(text: str, size: int = 64) -> list[str]:
    """Split text into stream deltas (at least one, so empty replies still stream a block)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _usage(request: RecordedRequest, reply: Reply) -> dict[str, Any]:
    if reply.input_tokens is not None:
        prompt = reply.input_tokens
    else:
        chars = len(request.system) + sum(len(m["content"]) for m in request.messages)
        prompt = chars // 4 + 1
    output = reply.output_tokens
    if output is None:
        output = (len(reply.text) + len(reply.thinking)) // 4 + 1
    return {
        "input": prompt,
        "cached": reply.cached_input_tokens,
        "cache_write": reply.cache_write_tokens,
        "output": output,
        "reasoning": reply.reasoning_tokens,
    }


__all__ = [
    "BAD_JSON_TEXT",
    "NO_CODE_TEXT",
    "TRUNCATED_TEXT",
    "Entry",
    "Fault",
    "RecordedRequest",
    "Reply",
    "ScriptedLLMServer",
]
