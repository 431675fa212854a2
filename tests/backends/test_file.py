"""``FileBackend`` beyond the contract: several processes, a killed holder, the queue
order, fences across restarts and clock steps, sweeping, listing, and its checks."""

from __future__ import annotations

import os
import select
import threading
import time

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

import occupy
from occupy.backends import get_backend
from occupy.backends.file import FileBackend
from occupy.checks import check_backends as check_file_backends
from occupy.exceptions import InvalidBackendError
from tests.support import multiproc
from tests.support.exclusion import assert_exclusive, count_under_lock, taken_over_after_kill
from tests.support.waiting import wait_for_waiters
from tests.testapp.models import Counter

ALIAS = "files"


def _files(*parts: str) -> list[str]:
    path = os.path.join(settings.FILES_LOCATION, *parts)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


@pytest.mark.multiprocess
def test_processes_exclude_each_other(live_db: None) -> None:
    Counter.objects.create(name="files")
    results = multiproc.run(count_under_lock, [(ALIAS, "files", 5, 0.01)] * 4)
    assert_exclusive(results, "files")
    assert _files("using") == [] and _files("pending") == []


@pytest.mark.multiprocess
def test_a_killed_holder_frees_the_key_after_its_ttl(live_db: None) -> None:
    assert taken_over_after_kill(ALIAS, "files:killed", ttl=2) <= 3


def test_waiters_are_served_in_arrival_order(live_db: None) -> None:
    first = occupy.acquire("book:1", owner="first", ttl=30, backend=ALIAS)
    served: list[str] = []

    def wait(owner: str) -> None:
        lease = occupy.acquire("book:1", owner=owner, ttl=30, timeout=20, backend=ALIAS)
        served.append(owner)
        time.sleep(0.05)
        occupy.release(lease)

    threads = []
    for owner in ("a", "b", "c", "d"):
        thread = threading.Thread(target=wait, args=(owner,))
        thread.start()
        threads.append(thread)
        wait_for_waiters(ALIAS, "book:1", len(threads))  # before the next one arrives
    # A newcomer does not jump the queue, even while the key is between two holders.
    with pytest.raises(occupy.Occupied):
        occupy.acquire("book:1", owner="newcomer", timeout=0, backend=ALIAS)
    occupy.release(first)
    for thread in threads:
        thread.join(timeout=20)
    assert served == ["a", "b", "c", "d"]


def test_fences_survive_a_restart_and_a_clock_step_back(
    live_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = occupy.acquire("book:1", ttl=30, backend=ALIAS)
    occupy.release(lease)
    restarted = FileBackend("files", settings.OCCUPY["BACKENDS"][ALIAS])
    # The clock is an hour behind: only the fence file can keep the fence rising.
    behind = lease.fence - 3600 * 1_000_000
    for module in ("attempt", "backend"):  # the grant's clock, and the release's
        monkeypatch.setattr(f"occupy.backends.file.{module}.now_us", lambda: behind)
    again = restarted.acquire("book:1", owner="x", ttl=30, timeout=0)
    assert again.fence == lease.fence + 1
    restarted.release(again)
    restarted.close()


def test_sweep_removes_stale_claims_only(live_db: None) -> None:
    backend = get_backend(ALIAS)
    stale = occupy.acquire("book:1", owner="gone", ttl=0.1, backend=ALIAS)
    live = occupy.acquire("book:2", owner="here", ttl=30, backend=ALIAS)
    attempt = backend.attempt("book:2", "waiter", 30)  # a waiter that crashed while queued
    attempt.enqueue()
    queued = os.path.join(settings.FILES_LOCATION, "pending", attempt.digest, attempt.ticket)
    os.utime(queued, ns=(1, 1))  # its heartbeat ran out long ago
    time.sleep(0.15)
    assert backend.sweep(dry_run=True) == 2
    assert len(_files("using")) == 2
    assert backend.sweep() == 2
    assert _files("using") == [os.path.basename(backend.using_path("book:2"))]
    assert _files("pending") == []
    assert backend.sweep() == 0
    live.ensure_held()
    with pytest.raises(occupy.LeaseLost):
        occupy.release(stale)
    occupy.release(live)


def test_list_locks_shows_holders_and_waiters_without_tokens(live_db: None, capsys) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=ALIAS)
    attempt = get_backend(ALIAS).attempt("book:1", "bob", 30)
    attempt.enqueue()
    claims = list(get_backend(ALIAS).claims())
    assert [(c.key, c.owner, c.state, c.fence) for c in claims] == [
        ("book:1", "alice", "using", lease.fence),
        ("book:1", "bob", "pending", None),
    ]
    call_command("list_locks", backend=[ALIAS])
    out = capsys.readouterr().out
    assert "alice" in out and "bob" in out and "pending" in out
    assert lease.token not in out and attempt.token not in out
    attempt.cancel()
    occupy.release(lease)


def test_a_waiter_behind_others_looks_without_the_keys_lock(live_db: None) -> None:
    """A waiter with ``k`` claims ahead of it reads its place without taking the key's
    lock (the head and the holder need it)."""
    backend = get_backend(ALIAS)
    holder = occupy.acquire("book:1", owner="holder", ttl=30, backend=ALIAS)
    attempts = []
    for owner in ("a", "b", "c"):
        attempt = backend.attempt("book:1", owner, 30)
        assert attempt.try_acquire() is None
        attempt.enqueue()
        assert attempt.try_acquire() is None
        attempts.append(attempt)
    assert [attempt.ahead for attempt in attempts] == [0, 1, 2]
    pauses = [attempts[2].next_delay() for _ in range(20)]
    assert max(pauses) <= backend.store.poll_interval  # third in line: a lone waiter's pace

    locked, done = threading.Event(), threading.Event()

    def hold_the_keys_lock() -> None:
        with backend.locks.hold(attempts[2].digest):
            locked.set()
            done.wait(10)

    thread = threading.Thread(target=hold_the_keys_lock)
    thread.start()
    try:
        locked.wait(5)
        looked: list[object] = []
        looker = threading.Thread(target=lambda: looked.append(attempts[2].try_acquire()))
        looker.start()
        looker.join(2)
        assert looked == [None], "a waiter behind others waited for the key's lock"
    finally:
        done.set()
        thread.join(5)
    occupy.release(holder)
    lease = attempts[0].try_acquire()
    assert lease is not None and lease.owner == "a"
    occupy.release(lease)
    for attempt in attempts[1:]:
        attempt.cancel()


@pytest.mark.parametrize(
    "content", [b"", b"occupy-claim-1\0torn by a power c", b"\xff\xfe another program's file"]
)
def test_a_claim_file_occupy_did_not_write_is_held_until_it_expires(
    live_db: None, content: bytes, capsys
) -> None:
    """Held by an unknown holder, never free, until FOREIGN_TTL after its mtime; then the
    next grant replaces it and sweep_locks removes it."""
    from occupy.backends.claims import UNKNOWN_OWNER

    backend = get_backend(ALIAS)
    path = backend.using_path("book:1")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content)
    holder = occupy.holder("book:1", backend=ALIAS)
    assert (holder.owner, holder.fence) == (UNKNOWN_OWNER, 0)
    assert holder.expires_at.timestamp() == pytest.approx(
        os.stat(path).st_mtime + backend.store.foreign_ttl, abs=0.01
    )
    with pytest.raises(occupy.Occupied) as info:
        occupy.acquire("book:1", owner="alice", timeout=0, backend=ALIAS)
    assert info.value.holder.owner == UNKNOWN_OWNER
    assert backend.sweep() == 0 and os.path.exists(path)  # not expired: kept
    assert [(c.key, c.owner, c.since, c.fence) for c in backend.claims()] == [
        (path, UNKNOWN_OWNER, None, None)
    ]
    call_command("list_locks", backend=[ALIAS])
    assert UNKNOWN_OWNER in capsys.readouterr().out
    # Written FOREIGN_TTL ago: expired. A grant replaces it; so does a sweep.
    old = time.time_ns() - round((backend.store.foreign_ttl + 1) * 1e9)
    os.utime(path, ns=(old, old))
    assert occupy.holder("book:1", backend=ALIAS) is None
    lease = occupy.acquire("book:1", owner="alice", timeout=0, backend=ALIAS)
    occupy.release(lease)
    with open(path, "wb") as f:
        f.write(content)
    os.utime(path, ns=(old, old))
    assert backend.sweep(dry_run=True) == 1
    assert backend.sweep() == 1 and not os.path.exists(path)
    assert backend.sweep() == 0


def test_keys_become_safe_file_names(live_db: None) -> None:
    keys = ["../../etc/passwd", "a/b", "dir\\file", ".", "x" * 255, "bööк:1 "]
    leases = [occupy.acquire(key, owner="o", timeout=0, backend=ALIAS) for key in keys]
    names = _files("using")
    assert len(names) == len(keys)
    assert all(len(name) == 64 and set(name) <= set("0123456789abcdef") for name in names)
    assert sorted(c.key for c in get_backend(ALIAS).claims()) == sorted(keys)
    for lease in leases:
        occupy.release(lease)


def test_the_directory_may_be_removed_behind_its_back(live_db: None) -> None:
    """A cleaner emptying LOCATION: the backend makes its directories and lock files
    again, and never keeps locking a lock file that is no longer there."""
    occupy.release(occupy.acquire("book:1", backend=ALIAS))
    import shutil

    shutil.rmtree(settings.FILES_LOCATION)
    lease = occupy.acquire("book:1", owner="a", backend=ALIAS)
    with pytest.raises(occupy.Occupied):
        occupy.acquire("book:1", owner="b", timeout=0, backend=ALIAS)
    occupy.release(lease)


def test_location_is_required() -> None:
    with pytest.raises(InvalidBackendError, match="LOCATION"):
        FileBackend("files", {"BACKEND": "occupy.backends.file.FileBackend"})


def _file_setup(location: object) -> dict:
    config = {"BACKEND": "occupy.backends.file.FileBackend"}
    if location is not None:
        config["LOCATION"] = location
    return {
        "OCCUPY": {
            "BACKENDS": {
                "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
                "files": config,
            }
        }
    }


def test_checks(tmp_path) -> None:
    with override_settings(**_file_setup(str(tmp_path / "locks"))):
        assert check_file_backends() == []
    with override_settings(**_file_setup(None)):
        assert [m.id for m in check_file_backends()] == ["occupy.E006"]
    with override_settings(**_file_setup("relative/locks")):
        assert [m.id for m in check_file_backends()] == ["occupy.W003"]
    not_a_directory = tmp_path / "file.txt"  # unusable even for root
    not_a_directory.write_text("")
    with override_settings(**_file_setup(str(not_a_directory / "locks"))):
        assert [m.id for m in check_file_backends()] == ["occupy.W005"]


@pytest.mark.timeout(20)
def test_a_lease_lost_receiver_may_use_the_same_key(live_db: None) -> None:
    """The signal is sent outside the key's lock, so a receiver locking it cannot hang."""
    from occupy import signals

    seen = []
    signals.lease_lost.connect(
        lambda lease, **kw: seen.append(occupy.holder(lease.key, backend=ALIAS)),
        weak=False,
        dispatch_uid="test-file-lost-receiver",
    )
    try:
        lease = occupy.acquire("book:1", owner="alice", ttl=0.1, backend=ALIAS)
        time.sleep(0.2)
        with pytest.raises(occupy.LeaseLost):
            lease.extend(30)
        assert seen == [None]
    finally:
        signals.lease_lost.disconnect(dispatch_uid="test-file-lost-receiver")


@pytest.mark.timeout(20)
def test_a_forked_child_does_not_share_the_parents_key_locks(live_db: None) -> None:
    """A child inherits the parent's open lock files, and with them the parent's flocks,
    and its thread locks as they were (maybe held): it must start afresh, so that it
    waits while the parent is inside a step on a key, and gets in once it is done."""
    backend = get_backend(ALIAS)
    occupy.release(occupy.acquire("book:1", backend=ALIAS))  # the lock files are open
    d = backend.attempt("book:1", "x", 1).digest
    looked, told = os.pipe()
    with backend.locks.hold(d):
        pid = os.fork()
        if pid == 0:  # the child
            os.close(looked)
            done = threading.Event()
            threading.Thread(
                target=lambda: (backend.holder("book:1"), done.set()), daemon=True
            ).start()
            if done.wait(0.5):
                os._exit(1)  # got in while the parent held the key's lock
            os.write(told, b"x")  # it waited 0.5 s: the parent may let go now
            os._exit(0 if done.wait(10) else 2)  # 2: never got in (a copied held lock)
        os.close(told)
        # Held until the child has looked for 0.5 s, however late it was scheduled.
        ready, _, _ = select.select([looked], [], [], 10)
        os.close(looked)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ready, "the child never said it had waited"


@pytest.mark.parametrize(
    "stray",
    [
        "using/junk.txt",
        "using/dir",
        "using/" + "ab" * 32 + "/",
        "pending/notes.txt",
        "pending/" + "cd" * 32,
        "fences/README",
        "fences/" + "ef" * 32 + "/",
    ],
)
def test_entries_occupy_did_not_write_are_skipped_and_reported(
    live_db: None, stray: str, capsys, caplog
) -> None:
    """Before, a ``junk.txt`` in ``using/`` made claims(), list_locks and sweep_locks raise
    KeyError, and a directory in place of a claim crashed them too."""
    from occupy.checks import check_stores

    backend = get_backend(ALIAS)
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=ALIAS)
    waiter = backend.attempt("book:1", "bob", 30)
    waiter.enqueue()
    path = os.path.join(settings.FILES_LOCATION, stray)
    if stray.endswith("/") or stray.endswith("dir"):
        os.makedirs(path)
    else:
        with open(path, "w") as f:
            f.write("not a claim")
    # A directory inside a key's queue is not a ticket either.
    os.makedirs(
        os.path.join(backend.directory.queue_path(backend.directory.queued().__next__()), "subdir")
    )
    with caplog.at_level("WARNING", logger="occupy.backends.file"):
        assert [(c.key, c.owner, c.state) for c in backend.claims()] == [
            ("book:1", "alice", "using"),
            ("book:1", "bob", "pending"),
        ]
        assert "subdir" in caplog.text and "not occupy's" in caplog.text
        assert backend.sweep() == 0
    assert os.path.basename(path.rstrip("/")) in caplog.text
    call_command("list_locks", backend=[ALIAS])
    assert "alice" in capsys.readouterr().out
    call_command("sweep_locks", backend=[ALIAS])
    assert os.path.exists(path)  # not occupy's to remove
    warnings = [
        w
        for w in check_stores(databases=["default"])
        if w.id == "occupy.W004" and w.obj.endswith("['files']")
    ]
    assert len(warnings) == 1 and "2 entries" in warnings[0].msg
    assert os.path.basename(path.rstrip("/")) in warnings[0].msg
    waiter.cancel()
    occupy.release(lease)
    assert occupy.holder("book:1", backend=ALIAS) is None


def _plant_fence_file(backend: FileBackend, key: str, fence: int) -> str:
    from occupy.backends.claims import Entry, digest
    from occupy.backends.file import records

    path = os.path.join(backend.root, "fences", digest(key))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(records.dump_claim(Entry("t" * 32, "old", fence, 1, 1, 1, key)))
    return path


def test_fences_rise_exactly_to_2_63_minus_1_and_are_then_refused(live_db: None) -> None:
    backend = get_backend(ALIAS)
    _plant_fence_file(backend, "book:1", 2**63 - 2)
    lease = occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=ALIAS)
    assert lease.fence == 2**63 - 1
    with pytest.raises(occupy.StoreUnavailable, match="2\\^63 - 1"):
        occupy.takeover("book:1", owner="bob", ttl=30, backend=ALIAS)
    assert occupy.holder("book:1", backend=ALIAS).owner == "alice"  # untouched
    occupy.release(lease)
    with pytest.raises(occupy.StoreUnavailable, match="delete fences/") as info:
        occupy.acquire("book:1", owner="carol", ttl=30, timeout=0, backend=ALIAS)
    assert info.value.key == "book:1"
    os.unlink(os.path.join(backend.root, "fences", backend.directory.fenced().__next__()))
    occupy.release(occupy.acquire("book:1", owner="carol", ttl=30, timeout=0, backend=ALIAS))


def test_a_recorded_fence_past_2_63_is_not_one_occupy_wrote(live_db: None) -> None:
    backend = get_backend(ALIAS)
    _plant_fence_file(backend, "book:1", 2**63 + 5)
    lease = occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=ALIAS)
    assert 0 < lease.fence < 2**63 - 1  # from the clock floor, never past 2^63 - 1
    occupy.release(lease)


def test_a_queued_claim_beyond_the_longest_ttl_blocks_nothing(live_db: None) -> None:
    """A ticket whose mtime (its expiry) lies past now plus MAX_TTL is not occupy's: the
    key is granted, listing skips it and a sweep removes it."""
    backend = get_backend(ALIAS)
    attempt = backend.attempt("book:1", "planted", 30)
    holder = occupy.acquire("book:1", owner="alice", ttl=30, backend=ALIAS)
    attempt.enqueue()
    occupy.release(holder)
    queue = backend.directory.queue_path(attempt.digest)
    far = (2**33) * 1_000_000_000  # the year 2242
    for ticket in os.listdir(queue):
        os.utime(os.path.join(queue, ticket), ns=(far, far))
    assert [c.owner for c in backend.claims()] == []
    lease = occupy.acquire("book:1", owner="bob", ttl=30, timeout=0, backend=ALIAS)
    occupy.release(lease)
    backend.sweep()  # the grant removed it already, as an expired ticket
    assert backend.directory.tickets(attempt.digest) == []


@pytest.mark.parametrize("place", ["using", "fences"])
@pytest.mark.parametrize("age", [0, 3600])
def test_a_directory_where_a_keys_file_belongs_is_refused_and_never_moved(
    live_db: None, place: str, age: int, capsys
) -> None:
    """Before, a takeover (or a grant once the directory's mtime was FOREIGN_TTL old)
    moved ``using/<digest>`` to ``fences/<digest>``: holder() said free from then on,
    while every acquire and takeover raised StoreUnavailable for good and sweep_locks
    left it."""
    from occupy.backends.claims import digest
    from occupy.checks import check_stores

    backend = get_backend(ALIAS)
    d = digest("book:1")
    path = os.path.join(backend.root, place, d)
    os.makedirs(os.path.join(path, "inside"))
    then = time.time_ns() - age * 1_000_000_000
    os.utime(path, ns=(then, then))
    calls = {
        "holder": lambda: occupy.holder("book:1", backend=ALIAS),
        "acquire": lambda: occupy.acquire("book:1", owner="alice", timeout=0, backend=ALIAS),
        "wait": lambda: occupy.acquire("book:1", owner="alice", timeout=0.2, backend=ALIAS),
        "takeover": lambda: occupy.takeover("book:1", owner="bob", ttl=30, backend=ALIAS),
    }
    for name, call in calls.items():
        with pytest.raises(occupy.StoreUnavailable) as info:
            call()
        assert path in str(info.value) and "removed by hand" in str(info.value), name
        assert info.value.key == "book:1"
    call_command("sweep_locks", backend=[ALIAS])
    # Nothing moved, nothing left behind: no claim, fence or queued claim was written.
    other = "fences" if place == "using" else "using"
    assert os.path.isdir(os.path.join(path, "inside"))
    assert not os.path.exists(os.path.join(backend.root, other, d))
    assert backend.directory.tickets(d) == []
    warnings = [
        w
        for w in check_stores(databases=["default"])
        if w.id == "occupy.W004" and w.obj.endswith("['files']")
    ]
    assert len(warnings) == 1 and repr(path) in warnings[0].msg
    assert f"{place}/<digest>" in warnings[0].msg
    # Removed by hand, the key works again.
    os.rmdir(os.path.join(path, "inside"))
    os.rmdir(path)
    assert occupy.holder("book:1", backend=ALIAS) is None
    lease = occupy.acquire("book:1", owner="alice", timeout=0, backend=ALIAS)
    occupy.release(occupy.takeover("book:1", owner="bob", ttl=30, backend=ALIAS))
    assert lease.fence > 0
