"""Locust users for the demo gateway (or any OpenAI-style gateway): the same session flow as
``obsbox load``: ask, read the streamed reply, follow up with the conversation, think 1-3 s.

    pip install 'obsbox[locust]'
    locust -f scripts/locustfile.py --host http://127.0.0.1:8000

OBSBOX_WORKER_POOL sets the X-Worker-Pool header (default: locust). Locust reports the time to
the end of each reply; the time to its first byte is the gateway's gateway_reply_latency_seconds.
"""

from __future__ import annotations

import os
import random

from locust import HttpUser, between, task

from obsbox.exporters.demo import prompts
from obsbox.exporters.demo.load import FOLLOW_UPS, SYSTEM, reply_text

ROUTE = "/v1/chat/completions"


class ChatUser(HttpUser):
    wait_time = between(1, 3)

    def on_start(self) -> None:
        self.rng = random.Random()
        self.headers = {"X-Worker-Pool": os.environ.get("OBSBOX_WORKER_POOL", "locust")}

    def ask(self, messages: list[dict[str, str]], name: str) -> str | None:
        body = {"model": "code-small", "messages": messages, "stream": True, "max_tokens": 256}
        with self.client.post(ROUTE, json=body, headers=self.headers, name=name, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"{response.status_code}: {response.text[:200]}")
                return None
            if not response.text.rstrip().endswith("data: [DONE]"):
                response.failure("the stream ended without data: [DONE]")
                return None
            return reply_text(response.content, stream=True)

    @task
    def conversation(self) -> None:
        start = prompts.prefix(prompts.draw(self.rng))
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": start}]
        reply = self.ask(messages, "ask")
        if reply is None:
            return
        follow_up = f"{start} {self.rng.choice(FOLLOW_UPS)}"
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": follow_up}]
        self.ask(messages, "follow-up")


__all__ = ["ChatUser"]
