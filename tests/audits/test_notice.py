"""The words of a notification and each receiver kind's request shape (docs/remote-ops.md §9.1)."""

from __future__ import annotations

import json

import pytest

from remote_gpu_trainer.audits.notice import Notice, next_commands, notice_payload, notice_text

NEXT = next_commands("r1", "gpu-box", "/home/u/my proj")
DIED = Notice(run="r1", instance="box", instance_id="gpu-box", event="died", detail="exit 137",
              burn_per_hour=1.5, currency="USD", next=NEXT)


def test_next_commands_are_pasteable_with_the_project_quoted() -> None:
    assert NEXT == ("rgt pull r1 '/home/u/my proj'", "rgt verify r1 '/home/u/my proj'",
                    "rgt down r1 '/home/u/my proj' --confirm gpu-box")
    assert next_commands("r1", "i-9") == ("rgt pull r1", "rgt verify r1", "rgt down r1 --confirm i-9")


def test_text_names_run_box_event_burn_and_next_commands() -> None:
    title, body = notice_text(DIED)
    assert title == "rgt: run r1 died on box"
    assert body == ("Run r1 on box (gpu-box) died (exit 137).\n"
                    "The box is still billing $1.50/h until it is torn down.\n"
                    "Next:\n"
                    "  rgt pull r1 '/home/u/my proj'\n"
                    "  rgt verify r1 '/home/u/my proj'\n"
                    "  rgt down r1 '/home/u/my proj' --confirm gpu-box")


def test_json_kind_carries_every_field() -> None:
    body, headers = notice_payload(DIED, "json")
    assert headers == {"Content-Type": "application/json"}
    document = json.loads(body)
    assert {k: document[k] for k in ("run", "instance", "instance_id", "event", "detail", "burn_per_hour",
                                     "currency", "next")} == {
        "run": "r1", "instance": "box", "instance_id": "gpu-box", "event": "died", "detail": "exit 137",
        "burn_per_hour": 1.5, "currency": "USD", "next": list(NEXT)}
    assert document["title"] == "rgt: run r1 died on box"


def test_ntfy_kind_is_plain_text_with_title_priority_and_tags() -> None:
    body, headers = notice_payload(DIED, "ntfy")
    assert body.decode() == notice_text(DIED)[1]
    assert headers == {"Content-Type": "text/plain; charset=utf-8", "Title": "rgt: run r1 died on box",
                       "Priority": "high", "Tags": "x"}
    _, finished = notice_payload(Notice("r1", "box", "gpu-box", "finished", "", 0.0, "EUR", NEXT), "ntfy")
    assert (finished["Priority"], finished["Tags"]) == ("default", "white_check_mark")


def test_slack_and_discord_kinds() -> None:
    title, body = notice_text(DIED)
    slack, slack_headers = notice_payload(DIED, "slack")
    assert json.loads(slack) == {"text": f"*{title}*\n{body}"}
    assert slack_headers == {"Content-Type": "application/json"}
    discord, _ = notice_payload(DIED, "discord")
    assert json.loads(discord) == {"content": f"**{title}**\n{body}"}
    long = Notice("r1", "box", "gpu-box", "stalled", "x" * 5000, 2.0, "USD", NEXT)
    assert len(json.loads(notice_payload(long, "discord")[0])["content"]) == 2000


def test_a_non_latin1_title_still_makes_a_valid_ntfy_header() -> None:
    _, headers = notice_payload(Notice("r1", "盒子", "id", "finished", "", 0.25, "CNY", NEXT), "ntfy")
    assert headers["Title"] == "rgt: run r1 finished on ??"
    body, _ = notice_payload(Notice("r1", "盒子", "id", "finished", "", 0.25, "CNY", NEXT), "ntfy")
    assert "still billing 0.25 CNY/h" in body.decode()


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown notification kind 'teams'"):
        notice_payload(DIED, "teams")

