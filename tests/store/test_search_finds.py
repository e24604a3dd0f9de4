"""Search that finds (issue 36): what the model saw is indexed (tool results too, never the
search tool's own), stemmed, ranked with recency, answered as labelled snippets; a superseded
value says a newer one exists; archived summary parts are found, and erased with what they
cover. Memory takes the fallback scan (whole words, no stemming); SQLite (FTS5) and PostgreSQL
(tsvector) their index."""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from bounded_agents.core import search
from bounded_agents.core.messages import (
    ChatMessage,
    Message,
    ToolCall,
    ToolResult,
    to_chat_messages,
)
from bounded_agents.core.ports import (
    AgentStore,
    ErasingStore,
    SummaryArchive,
    supports_erasure,
    supports_summary_archive,
)
from bounded_agents.core.search import SNIPPET_CHARS, HistorySearchTool, snippet
from bounded_agents.core.search_text import MAX_MARKS_IN_A_ROW, fold_case
from bounded_agents.core.turn.public import ToolContext
from bounded_agents.store import MemoryStore, SqlAgentStore
from tests.factories import assistant, user
from tests.store.conftest import ContractStore


def chatter(n: int) -> list[Message]:
    return [
        m
        for i in range(n)
        for m in (user(f"By the way, chapter {i} was about the weather."), assistant("Nice."))
    ]


def tool_exchange(results: dict[str, tuple[str, str]], content: str = "") -> Message:
    """An assistant message that called tools: {call id: (tool name, its result)}."""
    return Message(
        role="assistant",
        content=content,
        tool_calls=[
            ToolCall(id=cid, name=name, arguments={}) for cid, (name, _) in results.items()
        ],
        tool_results=[ToolResult(call_id=cid, content=out) for cid, (_, out) in results.items()],
    )


async def _thread(store: AgentStore, messages: list[Message]) -> str:
    thread = await store.create_thread(actor_id="alice", agent="helper")
    await store.append_messages(thread.id, messages)
    return thread.id


async def _search(
    store: AgentStore, thread_id: str, query: str, prompt: tuple[ChatMessage, ...] = (), k: int = 5
) -> list[dict[str, Any]]:
    result = await HistorySearchTool(store).invoke_in_turn(
        {"query": query, "k": k}, ToolContext(thread_id=thread_id, prompt=prompt)
    )
    assert not result.is_error, result.content
    rows: list[dict[str, Any]] = json.loads(result.content)["results"]
    return rows


def _archive(store: object) -> SummaryArchive:
    assert supports_summary_archive(store)
    return store


def _erasing(store: object) -> ErasingStore:
    assert supports_erasure(store)
    return store


async def test_tool_results_are_found_and_the_search_tools_own_are_not(
    store: ContractStore,
) -> None:
    tid = await _thread(
        store,
        [
            user("Check the stock please."),
            tool_exchange({"c1": ("inventory", "pallet count for bay 7: 4411 units")}),
            *chatter(3),
            tool_exchange({"c2": ("search_history", '{"results": [{"content": "zebracode"}]}')}),
            user("A zebracode came up once."),
        ],
    )

    pallet = await _search(store, tid, "pallet count")
    zebra = await _search(store, tid, "zebracode")

    assert [(r["seq"], r["role"]) for r in pallet] == [(2, "tool")]
    assert pallet[0]["content"] == "pallet count for bay 7: 4411 units"
    assert [r["seq"] for r in zebra] == [10]  # the user's message, never the search result (9)


async def test_a_tool_result_the_prompt_shows_is_not_returned_again(store: ContractStore) -> None:
    exchange = tool_exchange({"c1": ("inventory", "pallet count for bay 7: 4411 units")})
    tid = await _thread(store, [user("Check the stock please."), exchange, *chatter(3)])
    shown = tuple(to_chat_messages([exchange]))

    assert [r["seq"] for r in await _search(store, tid, "pallet count")] == [2]
    assert await _search(store, tid, "pallet count", shown) == []


@pytest.mark.parametrize(
    ("query", "stated"),
    [
        ("deploying", "We deployed the build on Tuesday."),
        ("invoices", "The invoice was paid."),
        ("connection", "It keeps connecting to the old host."),
    ],
)
async def test_a_stemmed_word_finds_its_other_forms(
    sql_store: SqlAgentStore, query: str, stated: str
) -> None:
    tid = await _thread(sql_store, [user(stated), *chatter(3)])

    found = await _search(sql_store, tid, query)

    assert [r["content"] for r in found] == [stated]


@pytest.mark.parametrize("query", ["\u0130stanbul", "Istanbul", "istanbul"])
async def test_a_word_with_a_dotted_capital_i_is_found_as_written(
    store: ContractStore, query: str
) -> None:
    # Python lowers "İ" (U+0130) to "i" and a combining dot, which split "İstanbul" into the
    # words "i" and "stanbul": SQLite's index, which holds "istanbul", found nothing. The word
    # as written is found on every store; its dotless spellings wherever the index lowers
    # "İ" to "i": memory and SQLite always, PostgreSQL as its database's ctype does (a
    # C-locale cluster, as the Citus tests start, leaves "İ" as it is).
    tid = await _thread(
        store,
        [
            user("The workshop moved to \u0130zmir, the hotel is in \u0130stanbul."),
            assistant("Ok."),
        ],
    )
    folds_to_i = True
    if isinstance(store, SqlAgentStore) and store.engine.dialect.name == "postgresql":
        async with store.engine.connect() as conn:
            folds_to_i = await conn.scalar(sa.text("SELECT lower('\u0130') = 'i'")) is True
    expected = [1] if query == "\u0130stanbul" or folds_to_i else []
    assert [r["seq"] for r in await _search(store, tid, query)] == expected


async def test_a_superseded_value_is_labelled_with_the_newer_seq(store: ContractStore) -> None:
    tid = await _thread(
        store,
        [
            user("The deploy window is Tuesday 14:00."),  # 1
            *chatter(5),  # 2..11
            user("Update: the deploy window is now Thursday 09:00."),  # 12
            *chatter(5),  # 13..22
            user("When is the deploy window?"),  # 23, the turn's question
        ],
    )
    prompt = (ChatMessage(role="user", content="When is the deploy window?"),)

    found = await _search(store, tid, "deploy window", prompt)

    by_seq = {r["seq"]: r for r in found}
    assert set(by_seq) == {1, 12}  # the question is in the prompt: skipped
    assert by_seq[1]["newer"] == 12
    assert "newer" not in by_seq[12]  # the question repeats the terms but is no newer value


@pytest.mark.parametrize(("stored", "asked"), [("NFD", "NFC"), ("NFC", "NFD"), ("NFD", "NFD")])
async def test_a_word_with_an_accent_is_found_whichever_unicode_form_each_side_wrote(
    store: ContractStore, stored: str, asked: str
) -> None:
    """Found by attack: text written decomposed (NFD: "e" and a combining accent, as macOS
    file names and some keyboards write it) was out of reach on PostgreSQL of a query
    written composed, and the other way round (the parser indexes the code points it is
    given); the fallback scan cut the word at the accent. Each hit also says which of the
    query's words it holds (the `newer` label reads them), so an older composed value is
    labelled with a newer decomposed one."""
    older = "The venue is the café Lumière."
    newer = "Update: the venue is now the café Crémieux."
    tid = await _thread(
        store,
        [
            user(unicodedata.normalize("NFC", older)),  # 1
            *chatter(3),  # 2..7
            user(unicodedata.normalize(stored, newer)),  # 8
            *chatter(3),
        ],
    )

    found = await _search(store, tid, unicodedata.normalize(asked, "café"))

    by_seq = {r["seq"]: r for r in found}
    assert set(by_seq) == {1, 8}
    assert unicodedata.normalize("NFC", by_seq[8]["content"]) == newer
    assert by_seq[1]["newer"] == 8


@pytest.mark.parametrize("form", ["NFC", "NFD"])
@pytest.mark.parametrize(
    ("stated", "asked"),
    [
        ("ファイル名は がぎぐ です", "がぎぐ"),
        ("The file is named résumé-final.pdf", "résumé"),
        ("यह हिन्दी में लिखा है", "हिन्दी"),
    ],
)
async def test_a_word_with_marks_is_found_and_marked_in_either_form(
    store: ContractStore, form: str, stated: str, asked: str
) -> None:
    """Found by review: SQLite's tokenizer folds Latin accents, not a Japanese voicing mark
    written apart; the fallback scan cut a word at each mark (a Devanagari vowel sign too)
    and left a decomposed match unmarked, so a long text's snippet missed it."""
    long = "filler words here. " * 40 + unicodedata.normalize(form, stated) + " end." * 40
    tid = await _thread(store, [user(long), *chatter(3)])

    found = await _search(
        store, tid, unicodedata.normalize("NFC" if form == "NFD" else "NFD", asked)
    )

    assert [r["seq"] for r in found] == [1]
    assert asked in unicodedata.normalize("NFC", found[0]["content"])  # the snippet holds it


@pytest.mark.parametrize(
    ("stated", "asked"),
    [
        ("我的订单号是 A-12345\uff0c请帮我查一下。", "订单号"),
        ("注文番号は 12345 です。", "注文番号"),
        ("배송 주소는 서울역 근처입니다.", "주소"),
        ("พัสดุของฉันติดอยู่ที่ศุลกากร", "ศุลกากร"),
    ],
)
async def test_a_word_inside_text_written_without_spaces_is_found(
    store: ContractStore, stated: str, asked: str
) -> None:
    """Found by attack: Chinese, Japanese and Thai are written without spaces (Korean attaches
    its particles), and both indexes take a run of such letters as ONE word, so a search for a
    word inside it found nothing, on every store. Such a query also scans the newest messages
    for its words as substrings (`FALLBACK_SCAN_ROWS`), and marks them."""
    tid = await _thread(store, [user(stated), *chatter(3), user("另外\uff0c谢谢。")])

    found = await _search(store, tid, asked)

    assert [(r["seq"], r["content"]) for r in found] == [(1, stated)]


async def test_the_scan_splits_into_words_only_a_text_holding_a_spaced_term(
    store: ContractStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Splitting every scanned text into words was 97% of a scan's time: a Chinese query over
    2,000 messages of 19 KB tool results took 1.8 s in the scan alone (docs/history.md). A
    word is a substring, so a text that does not hold a spaced term as a substring is never
    split; an unspaced term is counted as a substring and needs no split at all."""
    logs = " ".join(f"worker-{i} processed batch {i * 7} ok" for i in range(200))
    tid = await _thread(store, [user("注文番号は 12345 です。"), *(user(logs) for _ in range(30))])
    splits: list[int] = []
    pattern = search._word()

    class Counted:
        def findall(self, text: str) -> list[str]:
            if len(text) > 1000:  # not the query's own split: a scanned log message
                splits.append(len(text))
            return pattern.findall(text)

        def sub(self, *args: Any) -> str:
            return pattern.sub(*args)

    monkeypatch.setattr(search, "_word", lambda: Counted())
    assert [r["seq"] for r in await _search(store, tid, "注文番号")] == [1]
    assert splits == []
    assert [r["seq"] for r in await _search(store, tid, "注文番号 12345")][:1] == [1]
    assert splits == [], "no log message holds 12345"
    await _search(store, tid, "注文番号 batch")
    assert len(splits) >= 30, "each log message holds 'batch': split"


async def test_a_query_in_spaced_words_reads_no_transcript(
    store: ContractStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The substring scan is paid by a query holding unspaced letters only: an indexed store
    answers any other query from its index, without reading the thread's newest rows."""
    tid = await _thread(store, [user("The parcel is stuck at customs."), *chatter(3)])
    reads: list[str] = []
    listing = store.list_messages

    async def counted(*args: Any, **kwargs: Any) -> list[Message]:
        reads.append("list")
        return await listing(*args, **kwargs)

    monkeypatch.setattr(store, "list_messages", counted)
    assert [r["seq"] for r in await _search(store, tid, "customs")] == [1]
    english = len(reads)
    assert [r["seq"] for r in await _search(store, tid, "海关")] == []
    assert len(reads) > english
    if isinstance(store, SqlAgentStore):
        assert english == 0


async def test_a_row_holding_every_term_of_a_mixed_query_comes_first_and_unsuperseded(
    store: ContractStore,
) -> None:
    """Found by attack: the scan's hits (a query holding unspaced letters) came before the
    index's whatever they held, so the one message holding both terms came last, labelled
    as superseded by a message holding one."""
    tid = await _thread(
        store,
        [
            user("We deployed the build to the 東京 server v2.3"),  # 1
            *(m for i in range(3) for m in (user(f"東京 chatter {i}"), assistant("ok"))),
        ],
    )

    found = await _search(store, tid, "東京 deployed", k=10)

    assert found[0]["seq"] == 1
    assert "newer" not in found[0]
    assert [r["seq"] for r in found[1:]] == [6, 4, 2]
    if isinstance(store, SqlAgentStore):
        assert all("at" in r for r in found)  # the index's date, for rows the scan found too


@pytest.mark.parametrize("shown_text", ["Café au lait", "Line one of the lait log\n\nline two"])
async def test_a_tool_result_the_prompt_shows_is_skipped_in_any_form(
    store: ContractStore, shown_text: str
) -> None:
    """Found by attack: a shown tool result written decomposed (NFD) came back (the fallback
    marks composed text), and one holding a blank line always did (it was split on it)."""
    exchange = tool_exchange({"c1": ("notes", unicodedata.normalize("NFD", shown_text))})
    tid = await _thread(store, [user("Read my notes."), exchange, *chatter(3)])
    shown = tuple(to_chat_messages([exchange]))

    assert [r["seq"] for r in await _search(store, tid, "lait")] == [2]
    assert await _search(store, tid, "lait", shown) == []


@pytest.mark.parametrize(
    ("older", "shown_text", "query"),
    [
        ("4411", "order 44110 shipped, 4411 boxes", "4411"),
        ("東京", "東京倉庫は閉鎖", "東京"),
        ("PIN accepted ok", "PIN accepted okay? no: PIN accepted ok was a lie", "accepted"),
    ],
)
async def test_an_older_tool_result_inside_a_shown_one_is_still_found(
    store: ContractStore, older: str, shown_text: str, query: str
) -> None:
    """Found by review: a shown result was matched as a substring, so an older result whose
    text sat inside a shown one was treated as shown and hidden (a fact out of reach)."""
    shown_exchange = tool_exchange({"c2": ("lookup", shown_text)})
    tid = await _thread(
        store,
        [
            user("Look it up."),
            tool_exchange({"c1": ("lookup", older)}),  # 2
            assistant("noted"),
            user("And now?"),
            shown_exchange,  # 5
        ],
    )
    shown = tuple(to_chat_messages([shown_exchange]))

    assert [r["seq"] for r in await _search(store, tid, query, shown)] == [2]


async def test_two_archived_parts_ending_at_one_seq_are_both_found_by_a_mixed_query(
    store: ContractStore,
) -> None:
    """Found by review: merging the scan's hits with the index's keyed rows by seq and role,
    so of two archived parts ending at one seq, the newer (a correction) was dropped."""
    tid = await _thread(store, chatter(5))
    archive = _archive(store)
    await archive.archive_summary_part(tid, 1, 9, "東京 warehouse: 10 pallets")
    await archive.archive_summary_part(tid, 5, 9, "東京 warehouse: 12 pallets")

    found = await _search(store, tid, "東京 pallets", k=10)

    parts = sorted(r["content"] for r in found if r["role"] == "summary")
    assert parts == ["東京 warehouse: 10 pallets", "東京 warehouse: 12 pallets"]


async def test_a_decomposed_korean_query_and_a_mixed_case_term_are_found_and_marked(
    store: ContractStore,
) -> None:
    """Found by attack: a Hangul query written as jamo (NFD) took no scan, and a term mixing
    Latin and unspaced letters was matched case-folded but marked case-sensitively, so a
    long text's snippet missed it."""
    filler = "あ" * 600
    tid = await _thread(
        store,
        [user("배송 주소는 서울역 근처입니다."), user(f"{filler} ABC東京 {filler}"), *chatter(2)],
    )

    korean = await _search(store, tid, unicodedata.normalize("NFD", "주소"))
    mixed = await _search(store, tid, "abc東京")

    assert [r["seq"] for r in korean] == [1]
    assert [r["seq"] for r in mixed] == [2] and "ABC東京" in mixed[0]["content"]


def test_a_run_of_combining_marks_is_cut_before_it_is_composed() -> None:
    """Found by attack: CPython orders a run of combining marks by insertion sort, so one
    128 KiB message of out-of-order marks made every search of its thread take 20 s. Runs
    longer than Unicode's stream-safe 30 are cut first."""
    hostile = "a" + "\u0301" * 5000 + "\u0316" * 5000 + " end"

    folded = fold_case(hostile)

    assert folded.endswith(" end")
    assert max(len(run) for run in re.findall("[\u0300-\u036f]+", folded)) <= MAX_MARKS_IN_A_ROW


async def test_results_are_snippets_around_the_match_not_whole_messages(
    store: ContractStore,
) -> None:
    log = " ".join(f"line {i} ok" for i in range(400))
    text = f"{log} ERROR disk quota exceeded on volume nine {log}"
    tid = await _thread(store, [user(text), *chatter(2)])

    found = await _search(store, tid, "quota volume")

    content = found[0]["content"]
    assert "quota exceeded on volume nine" in content
    assert len(content) <= SNIPPET_CHARS + 2  # and the two ellipses
    assert content.startswith("…") and content.endswith("…")
    assert len(text) > 10 * len(content)


def test_a_snippet_of_a_short_text_is_the_whole_text_and_marks_are_removed() -> None:
    assert snippet("the \x02code\x03 is X-1") == "the code is X-1"
    long = "a " * 500 + "\x02needle\x03" + " b" * 500
    cut = snippet(long, 100)
    assert "needle" in cut and "\x02" not in cut and len(cut) <= 102


async def test_equal_matches_come_newest_first(store: ContractStore) -> None:
    tid = await _thread(
        store, [user("Parking is on level 3."), *chatter(4), user("Parking is on level 4.")]
    )

    found = await _search(store, tid, "parking level")

    assert [r["seq"] for r in found] == [10, 1]


async def test_a_text_said_twice_comes_back_once_at_its_newest(store: ContractStore) -> None:
    tid = await _thread(
        store, [user("Parking is on level 3."), *chatter(4), user("Parking is on level 3.")]
    )

    found = await _search(store, tid, "parking level")

    assert [r["seq"] for r in found] == [10]


async def test_the_archive_port_stores_a_part_once_and_pages_newest_first(
    store: ContractStore,
) -> None:
    archive = _archive(store)
    tid = await _thread(store, chatter(10))

    first = await archive.archive_summary_part(tid, 1, 8, "Notes: the budget is 40 kEUR.")
    again = await archive.archive_summary_part(tid, 1, 8, "a replay's other text")
    await archive.archive_summary_part(tid, 9, 14, "Notes: the venue is Lisbon.")

    assert again == first  # once per range: the first text stays
    parts = await archive.archived_parts(tid)
    assert [(p.from_seq, p.to_seq) for p in parts] == [(9, 14), (1, 8)]
    assert [p.to_seq for p in await archive.archived_parts(tid, before_seq=14)] == [8]
    assert [p.to_seq for p in await archive.archived_parts(tid, limit=1)] == [14]
    assert parts[1].content == "Notes: the budget is 40 kEUR."
    with pytest.raises(ValueError):
        await archive.archive_summary_part(tid, 5, 4, "backwards")


async def test_an_archived_part_is_found_and_gone_after_the_threads_erasure(
    store: ContractStore,
) -> None:
    tid = await _thread(store, chatter(10))
    await _archive(store).archive_summary_part(tid, 1, 12, "Notes: the customer's kiwicode.")

    found = await _search(store, tid, "kiwicode")

    assert len(found) == 1
    assert {k: v for k, v in found[0].items() if k != "at"} == {
        "seq": 12,
        "role": "summary",
        "content": "Notes: the customer's kiwicode.",
        "from_seq": 1,
        "to_seq": 12,
    }
    assert await _erasing(store).delete_thread(tid)
    assert await _archive(store).archived_parts(tid) == []
    assert await _search(store, tid, "kiwicode") == []


async def test_erasing_a_covered_message_erases_the_parts_that_cover_it(
    store: ContractStore,
) -> None:
    archive = _archive(store)
    tid = await _thread(store, chatter(10))  # seqs 1..20
    await archive.archive_summary_part(tid, 1, 8, "Notes: plumcode one.")
    await archive.archive_summary_part(tid, 9, 16, "Notes: plumcode two.")

    assert await _erasing(store).delete_message(tid, 9)

    assert [(p.from_seq, p.to_seq) for p in await archive.archived_parts(tid)] == [(1, 8)]
    assert [r["from_seq"] for r in await _search(store, tid, "plumcode")] == [1]


def test_both_stores_keep_an_archive() -> None:
    assert supports_summary_archive(MemoryStore())
    assert supports_summary_archive(SqlAgentStore.from_url("sqlite+aiosqlite://"))


async def test_a_question_found_brings_the_users_reply_as_a_row_of_its_own(
    store: ContractStore,
) -> None:
    tid = await _thread(
        store,
        [
            *chatter(3),  # 1..6
            user("Hello again."),  # 7
            assistant("Glad to help. Before I forget, what is your order number?"),  # 8
            user("It is ORD-41234."),  # 9: the answer holds no word of the question
            *chatter(3),  # 10..15
        ],
    )

    found = await _search(store, tid, "order number")

    assert [(r["seq"], r["role"], r.get("reply_to")) for r in found] == [
        (8, "assistant", None),
        (9, "user", 8),
    ]
    assert found[1]["content"] == "It is ORD-41234."


async def test_a_reply_is_not_added_for_a_statement_nor_when_shown_or_already_found(
    store: ContractStore,
) -> None:
    tid = await _thread(
        store,
        [
            user("Hello."),  # 1
            assistant("Noted, your order number is on file."),  # 2: no question
            user("Thanks, the order number ends in 34."),  # 3: found by itself
            assistant("What is the order number then?"),  # 4: asks; its reply is 5
            user("ORD-41234."),  # 5
            assistant("And the full order number for the invoice?"),  # 6: asks; reply 7
            user("The full order number is ORD-41234-B."),  # 7: also found by itself
            *chatter(2),
        ],
    )
    reply_shown = (ChatMessage(role="user", content="ORD-41234."),)

    found = await _search(store, tid, "order number", k=10)
    shown = await _search(store, tid, "order number", reply_shown, k=10)

    assert sorted((r["seq"], r.get("reply_to")) for r in found) == [
        (2, None),  # a statement: no reply row after it
        (3, None),
        (4, None),
        (5, 4),
        (6, None),
        (7, None),  # found by itself: not repeated as the reply of 6
    ]
    assert 5 not in {r["seq"] for r in shown}  # the prompt shows the reply already


async def test_an_erased_reply_is_not_replaced_by_a_later_message(store: ContractStore) -> None:
    tid = await _thread(
        store,
        [
            user("Hello."),  # 1
            assistant("What is your order number?"),  # 2
            user("It is ORD-41234."),  # 3: erased below
            user("Unrelated: the weather is fine."),  # 4: not an answer to 2
            *chatter(2),
        ],
    )
    assert await _erasing(store).delete_message(tid, 3)

    found = await _search(store, tid, "order number")

    assert [(r["seq"], r.get("reply_to")) for r in found] == [(2, None)]


async def test_the_replies_to_every_question_found_are_one_read(sql_store: SqlAgentStore) -> None:
    """Three questions found, three replies: the search's read and ONE read of the replies
    (`messages_at`), where each reply was a read of its own before."""
    tid = await _thread(
        sql_store,
        [
            user("Hello."),  # 1
            assistant("What is the order number?"),  # 2
            user("ORD-41234."),  # 3
            assistant("And the order number of the spare part?"),  # 4
            user("ORD-55120."),  # 5
            assistant("Which order number did the refund go to?"),  # 6
            user("The first one."),  # 7
            *chatter(2),
        ],
    )
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(" ".join(statement.split()))

    event.listen(sql_store.engine.sync_engine, "before_cursor_execute", record)
    try:
        found = await _search(sql_store, tid, "order number")
    finally:
        event.remove(sql_store.engine.sync_engine, "before_cursor_execute", record)

    assert sorted((r["seq"], r.get("reply_to")) for r in found) == [
        (2, None),
        (3, 2),
        (4, None),
        (5, 4),
        (6, None),
        (7, 6),
    ]
    # A read of message rows by seq (`MESSAGES_AT`, or `MESSAGES_AFTER` a reply at a time as
    # before): the search's own statements read its index, never this shape.
    reads_of_messages = [s for s in statements if s.startswith("SELECT messages.seq")]
    assert len(reads_of_messages) == 1, reads_of_messages
    assert "messages.seq IN" in reads_of_messages[0]
