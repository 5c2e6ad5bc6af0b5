"""A scripted OpenAI-compatible model server on 127.0.0.1, for the producer tests (no network, no model).

`POST /v1/chat/completions` (and `/chat/completions`) answers from a script: the case is the `[case:NAME]`
marker in the conversation's first user message, the turn is the number of assistant messages already
in the request. A script entry is one of

- `{"content": str}`: an answer, finish reason `stop`;
- `{"tool_calls": [(name, arguments_dict), ...]}`: a tool-call turn, finish reason `tool_calls`;
- `{"content": str, "finish_reason": "length"}`: a generation cut at its token limit;
- `{"status": 500 | 503}`: the provider fails (an OpenAI-style error body).

A turn past the end of a case's script repeats its last entry. Every request is kept in `requests`
(the body as sent), so a test can compare with what the client sent. `GET /v1/models` lists one model.
"""
from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CASE = re.compile(r"\[case:([\w-]+)\]")
MODEL = "fake-model"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def usage_of(body: dict, completion_tokens: int) -> dict:
    prompt = sum(len(_text(m.get("content")).split()) + 4 for m in body.get("messages") or [])
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens}


def chunks_of(doc: dict, include_usage: bool) -> list[dict]:
    choice = doc["choices"][0]
    msg = choice["message"]
    head = {k: doc[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    out = [head | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    if msg.get("content"):
        out.append(head | {"choices": [{"index": 0, "delta": {"content": msg["content"]}, "finish_reason": None}]})
    for i, call in enumerate(msg.get("tool_calls") or []):
        out.append(head | {"choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            {"index": i, "id": call["id"], "type": "function", "function": call["function"]}]}}]})
    out.append(head | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    if include_usage:
        out.append(head | {"choices": [], "usage": doc["usage"]})
    return out


class FakeOpenAI:
    def __init__(self, script: dict[str, list[dict]]):
        self.script = script
        self.requests: list[dict] = []
        self.responses: list[dict] = []
        self._n = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _send(self, status: int, doc: dict) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]})
                else:
                    self._send(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                status, doc = outer.answer(body)
                if status == 200 and body.get("stream"):
                    self._stream(doc, bool((body.get("stream_options") or {}).get("include_usage")))
                else:
                    self._send(status, doc)

            def _stream(self, doc: dict, include_usage: bool) -> None:
                """The same answer as server-sent `chat.completion.chunk`s, then `[DONE]`."""
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                for chunk in chunks_of(doc, include_usage):
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def case_of(self, body: dict) -> str | None:
        for m in body.get("messages") or []:
            if m.get("role") == "user":
                found = CASE.search(_text(m.get("content")))
                if found:
                    return found.group(1)
        return None

    def answer(self, body: dict) -> tuple[int, dict]:
        case = self.case_of(body)
        turn = sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")
        steps = self.script.get(case or "", [{"content": "ok"}])
        step = steps[min(turn, len(steps) - 1)]
        with self._lock:
            self.requests.append(body)
            self._n += 1
            n = self._n
        if "status" in step:
            doc = {"error": {"message": f"scripted provider failure {step['status']}", "type": "server_error",
                             "code": step["status"]}}
            with self._lock:
                self.responses.append({"case": case, "turn": turn, "status": step["status"]})
            return step["status"], doc
        message: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
        finish = step.get("finish_reason")
        if step.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"call_{case}_{turn}_{i}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (name, args) in enumerate(step["tool_calls"])]
            finish = finish or "tool_calls"
        finish = finish or "stop"
        out_tokens = step.get("completion_tokens") or max(1, len(_text(step.get("content")).split()) + 3)
        doc = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
               "model": body.get("model") or MODEL,
               "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
               "usage": usage_of(body, out_tokens)}
        with self._lock:
            self.responses.append({"case": case, "turn": turn, "status": 200, "doc": doc})
        return 200, doc

    def __enter__(self) -> "FakeOpenAI":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
