"""The file reader hands whole lines on as Blocks, uncut, and cuts lines one by one only where it
must (an overlong line, a byte order mark, a batch's end). Whatever it does, the lines that come out
are the file's lines: the same bytes, offsets and truncation as cutting every line on its own."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsbox.exporters.bridge.deferred import Changes, Deferred, complete
from obsbox.exporters.bridge.record import Block, Lines, Origin, Record, count_lines
from obsbox.exporters.bridge.sources.reader import BOM, FileReader, _lines_within
from tests.bridge.harness import open_reader

MAX_LINE = 64


def reader_for(path, chunk: int) -> FileReader:
    return open_reader(path, max_line_bytes=MAX_LINE, read_chunk_bytes=chunk, format="json")


def expected(content: bytes) -> list[tuple[bytes, int, bool]]:
    """Every line cut on its own: (bytes, offset, truncated); a byte order mark is not part of the
    first line, and the last line counts even without its newline."""
    out, pos = [], 0
    lines = content.split(b"\n")
    if not lines[-1]:
        lines.pop()
    for index, line in enumerate(lines):
        body = line[3:] if index == 0 and line.startswith(BOM) else line
        out.append((body[:MAX_LINE], pos, len(body) > MAX_LINE))
        pos += len(line) + 1
    return out


def read_all(path, chunk: int, rooms: list[int]) -> tuple[list[tuple[bytes, int, bool]], int]:
    """What the reader gives for the whole file, reading with each batch room in turn; and how many
    Blocks it gave."""
    reader = reader_for(path, chunk)
    out = Lines()
    for turn in range(100_000):
        before, room = len(out), rooms[turn % len(rooms)]
        if not reader.read(out, room, 1 << 20, verify_head=False).grew:
            break
        assert len(out) - before <= room, "a read keeps to the batch's room"
    out.extend(reader.take_partial())
    reader.close()
    blocks = [item for item in out.items if type(item) is Block]
    assert all(block.count == block.data.count(b"\n") and block.data.endswith(b"\n") for block in blocks)
    assert len(out) == len(out.records())
    return [(rec.raw, rec.offset, rec.truncated) for rec in out.records()], len(blocks)


line = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" ")),
    st.integers(MAX_LINE - 2, 3 * MAX_LINE).map(lambda n: b"x" * n),  # around and over the limit
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(line, max_size=60),
    bom=st.booleans(),
    trailing_newline=st.booleans(),
    reads=st.tuples(st.integers(1, 400), st.lists(st.integers(1, 30), min_size=1, max_size=4)),
)
def test_whatever_the_reads_and_batches_the_lines_are_the_files_lines(tmp_path, lines, bom, trailing_newline, reads):
    """``reads``: the reader's read size, and the batches' rooms in turn."""
    content = (BOM if bom else b"") + b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    path = tmp_path / "app.log"
    path.write_bytes(content)
    chunk, rooms = reads
    got, _ = read_all(path, chunk, rooms)
    assert got == expected(content)


def test_whole_lines_after_the_first_read_come_as_one_block(tmp_path):
    path = tmp_path / "app.log"
    lines = [b'{"n":%d}' % n for n in range(100)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    got, blocks = read_all(path, 256, [1000])
    assert got == expected(path.read_bytes()) and blocks >= 1
    out = Lines()  # an overlong line in a later read: that read is cut line by line, and says so
    path.write_bytes(b"\n".join(lines[:30]) + b"\n" + b"y" * 200 + b"\n")
    reader = reader_for(path, 1 << 20)
    reader.read(out, 1000, 1 << 20, verify_head=False)
    assert not any(type(item) is Block for item in out.items)


@given(data=st.binary(max_size=600).map(lambda b: b.replace(b"\0", b"\n")), limit=st.integers(64, 200))
def test_the_overlong_line_check_never_misses_one_and_passes_short_lines(data, limit):
    end = data.rfind(b"\n") + 1
    longest = max(map(len, data[:end].split(b"\n")))
    if _lines_within(data, end, limit):
        assert longest <= limit
    if longest < limit // 2:
        assert _lines_within(data, end, limit)


def block_of(origin: Origin, first: int, count: int, offset: int) -> Block:
    return Block(origin, b"".join(b'{"n":%d}\n' % n for n in range(first, first + count)), offset, count)


def test_a_batch_shared_among_workers_is_cut_inside_its_blocks_and_loses_no_line():
    one, two = Origin("/var/log/a.log", b"a" * 16), Origin("/var/log/b.log", b"b" * 16)
    lines = Lines()
    lines.append(block_of(one, 0, 10, 0))
    lines.extend([Record(b'{"n":10}', two, 0)])
    lines.append(block_of(one, 11, 5, 500))
    parts = lines.parts(3)
    assert [len(part) for part in parts] == [6, 6, 4]
    assert [r.raw for part in parts for r in part.records()] == [r.raw for r in lines.records()]
    assert [r.offset for part in parts for r in part.records()] == [r.offset for r in lines.records()]
    for part in parts:
        assert all(b.count == b.data.count(b"\n") for b in part.items if type(b) is Block)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    st.binary(max_size=8).map(lambda b: b.replace(b"\n", b"")),
    st.integers(-1, 35),
    st.data(),
)
def test_lines_are_counted_and_cut_as_a_find_per_line_would(lines, partial, most, data):
    """``count_lines`` deletes newlines to count them: it must agree, line for line, with walking
    the lines one ``find`` at a time, for every room and every end at a line's end."""
    text = b"".join(line + b"\n" for line in lines) + partial
    ends = [0, *(sum(len(line) + 1 for line in lines[: n + 1]) for n in range(len(lines)))]
    end = data.draw(st.sampled_from(ends))
    counted, at = 0, 0
    while counted != most and at < end:
        at = text.find(b"\n", at, end) + 1
        counted += 1
    assert count_lines(text, end, most) == (counted, at)


def test_a_batch_back_from_a_worker_is_made_into_records_only_when_read():
    origin = Origin("/var/log/a.log", b"a" * 16)
    lines = Lines()
    lines.append(block_of(origin, 0, 4, 0))
    changes = Changes("a" * 32 * 4, "b" * 16 * 4, [None] * 4, {2: (None, "invalid_json", None, b"")})
    batch = Deferred(lines, changes)
    tail = batch[1:3]
    assert len(batch) == 4 and len(tail) == 2 and batch.made is None, "lengths and slices make nothing"
    assert [rec.offset for rec in tail] == [8, 16] and batch.made is not None, "reading a slice makes the batch"
    assert [rec.parse_error for rec in complete(batch)] == [None, None, "invalid_json", None]
    assert {rec.trace_id for rec in batch} == {"a" * 32} and batch[3].span_id == "b" * 16
