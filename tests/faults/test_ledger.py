"""The ledger itself: it must see loss, duplicates and torn records, or the matrix proves nothing."""

from __future__ import annotations

from tests.faults.ledger import Ledger, lines_of


def test_ledger_counts_loss_duplicates_and_torn_lines(tmp_path):
    ledger = Ledger("r1")
    log = tmp_path / "app.json"
    ledger.append(log, 5)
    got = lines_of(log)
    assert str(ledger.check(got)) == "5 expected: 0 lost, 0 duplicates, 0 torn"
    report = ledger.check([got[0], got[0], got[2], got[3][:20], b'{"other": 1}'])
    assert report.lost == [1, 3, 4]
    assert report.duplicates == 1
    assert report.torn == [got[3][:20]]
    assert report.foreign == 1
    try:
        report.assert_delivered(max_duplicates=5)
    except AssertionError as exc:
        assert "3 lost" in str(exc)
    else:
        raise AssertionError("a report with lost lines passed")
