"""MemoryEventLog: the in-process store, for tests and runs that need not outlive the process."""

from __future__ import annotations

import functools
import socket
from bisect import bisect_right
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from itertools import islice
from operator import itemgetter
from types import TracebackType
from typing import Self

import attrs

from ._errors import LeaseLost, SessionLocked, StoreUnavailable, TokenExists, UnknownToken
from ._events import Event, EventKind, SessionKey, check_key, utcnow
from ._rules import (
    NO_MARKS,
    Marks,
    as_utc,
    check_batch_keys,
    check_claim_limit,
    check_fenced_batch,
    check_limit,
    checkpoint_of,
    control_marks,
    is_due,
    is_interrupted,
    lease_expiry,
    lease_gone,
    may_take_lease,
    process_alive,
    prunable,
    summary_before_checkpoint,
    summary_of,
    with_marks,
)
from ._store import (
    SECRET_REUSED,
    Claim,
    EventLog,
    Lease,
    LeaseHolder,
    Now,
    PrunedSession,
    PruneResult,
    SessionSummary,
    TokenRecord,
)

#: An appended event as the log keeps it: its seq, and the event as it was given.
_Stored = tuple[int, Event]

_seq_of = itemgetter(0)


def _kept(stored: _Stored, checkpoint_seq: int) -> bool:
    """Whether a prune keeps the stored event: the latest checkpoint (seq 0: none), or a
    note."""
    seq, event = stored
    return seq == checkpoint_seq or event.kind is EventKind.NOTE


def _with_seq(stored: _Stored) -> Event:
    """The stored event as a reader sees it: with its seq."""
    seq, event = stored
    return Event(
        key=event.key,
        kind=event.kind,
        payload=event.payload,
        author=event.author,
        at=event.at,
        id=event.id,
        seq=seq,
        v=event.v,
    )


class MemoryEventLog(EventLog):
    """An :class:`~eventlog.EventLog` that keeps events as objects in this process.

    Appending is cheap (no encoding, no I/O, no copies: each event is kept as given, next to
    its seq; readers get events with their seq) and atomic: a batch is added with no ``await``
    in between, so other tasks see all of it or none of it. Events are kept per session, and
    the latest checkpoint per session, so reads never scan other sessions. Leases follow the
    same rules as :class:`~eventlog.SqliteEventLog`'s. Nothing survives the process.

    ``clock`` gives the current UTC time for leases and the ``holder`` of :meth:`sessions`.
    """

    durable: bool = False

    def __init__(self, *, clock: Now = utcnow) -> None:
        self._clock = clock
        self._host = socket.gethostname()
        self._seq = 0
        self._events: dict[SessionKey, list[_Stored]] = {}
        self._checkpoints: dict[SessionKey, _Stored] = {}
        self._summaries: dict[SessionKey, SessionSummary] = {}  # built on demand, per checkpoint
        # the marks of the control requests after each session's latest checkpoint
        self._marks: dict[SessionKey, Marks] = {}
        self._leases: dict[SessionKey, Lease] = {}  # the held ones
        self._epochs: dict[SessionKey, int] = {}  # the last epoch of each session, kept forever
        self._tokens: dict[str, TokenRecord] = {}  # by name, in the order they were created
        self._token_names: dict[str, str] = {}  # each token's name by its digest
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryEventLog(events={self._seq}, sessions={len(self._events)})"

    async def __aenter__(self) -> Self:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the log; idempotent. A closed log refuses every further call."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable("this MemoryEventLog is closed")

    async def append(self, events: Sequence[Event], *, lease: Lease | None = None) -> list[int]:
        """Append ``events`` atomically, in order; returns their ``seq``s, in order.

        A checkpoint kind without a checkpoint payload fails the whole batch (``TypeError``).
        With ``lease``, a lease that is no longer the session's (holder and epoch) raises
        :class:`~eventlog.LeaseLost` and nothing is written; every event of the batch must be
        of ``lease.key`` (``ValueError``).
        """
        if self._closed:
            self._check_open()
        check_batch_keys(events)
        if lease is not None:
            check_fenced_batch(events, lease)
            self._check_fence(lease)
        for event in events:
            if event.kind == EventKind.CHECKPOINT:
                checkpoint_of(event)  # a checkpoint kind must carry a checkpoint
        # Nothing below can fail: the batch lands whole.
        first = self._seq + 1
        self._seq += len(events)
        by_session = self._events
        key: SessionKey | None = None
        bucket: list[_Stored] = []
        for seq, event in enumerate(events, first):
            if event.key is not key:  # batches are mostly one session: hash its key once
                key = event.key
                bucket = by_session.setdefault(key, [])
            bucket.append((seq, event))
            if event.kind == EventKind.CHECKPOINT:
                self._checkpoints[key] = (seq, event)
                self._marks.pop(key, None)
            elif event.kind == EventKind.CONTROL:
                self._mark(key, event)
        return list(range(first, self._seq + 1))

    def _mark(self, key: SessionKey, event: Event) -> None:
        """Note what a control request says of its session's summary (see ``control_marks``)."""
        self._marks[key] = control_marks(event, self._marks.get(key, NO_MARKS))

    async def read(
        self,
        key: SessionKey,
        *,
        after_seq: int = 0,
        kinds: Collection[EventKind] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Events of one session with ``seq > after_seq``, oldest first, optionally filtered."""
        self._check_open()
        check_limit(limit)
        bucket = self._events.get(key, [])
        start = bisect_right(bucket, after_seq, key=_seq_of)
        found: Iterable[_Stored] = islice(bucket, start, None)
        if kinds is not None:
            wanted = frozenset(kinds)
            found = (stored for stored in found if stored[1].kind in wanted)
        return [_with_seq(stored) for stored in islice(found, limit)]

    async def read_last(
        self, key: SessionKey, kinds: Collection[EventKind], limit: int
    ) -> list[Event]:
        """The newest ``limit`` events of the given kinds of one session, oldest first."""
        self._check_open()
        check_limit(limit)
        wanted = frozenset(kinds)
        bucket = self._events.get(key, [])
        newest = (stored for stored in reversed(bucket) if stored[1].kind in wanted)
        found = [_with_seq(stored) for stored in islice(newest, limit)]
        found.reverse()
        return found

    async def count(self, key: SessionKey) -> int:
        """How many events the session has (0 for an unknown one)."""
        self._check_open()
        return len(self._events.get(key, []))

    async def latest_checkpoint(self, key: SessionKey) -> Event | None:
        """The session's newest checkpoint event, or ``None``."""
        self._check_open()
        stored = self._checkpoints.get(key)
        return None if stored is None else _with_seq(stored)

    async def sessions(self) -> list[SessionSummary]:
        """Every session that has an event, with its live holder; newest first, by its latest
        checkpoint's seq, else its newest event's."""
        self._check_open()
        checkpoints = self._checkpoints
        listed = [
            (s.checkpoint_seq, attrs.evolve(s, checkpoint=checkpoint_of(checkpoints[s.key][1])))
            for s in self._current_summaries()
        ]
        listed += self._without_checkpoint()
        listed.sort(key=_seq_of, reverse=True)
        return [self._with_holder(summary) for _, summary in listed]

    async def due_sessions(self, now: datetime) -> list[SessionSummary]:
        """Sessions whose latest checkpoint is ``deferred`` with ``next_wake_at <= now`` (the
        summary's, which a wake request moves earlier).

        Earliest wake time first.
        """
        self._check_open()
        due = [summary for summary in self._current_summaries() if is_due(summary, now)]
        due.sort(key=lambda s: (s.next_wake_at, s.checkpoint_seq))
        return [self._with_holder(summary) for summary in due]

    async def prune(
        self, before: datetime, *, dry_run: bool = False, interrupted: bool = False
    ) -> PruneResult:
        """Drop the events of sessions that finished before ``before``, but their final
        checkpoint (the rules are :meth:`eventlog.EventLog.prune`'s; ``interrupted`` takes the
        cut-off sessions and those without a checkpoint too).

        One step with no ``await`` in it: no run can take a session's lease meanwhile.
        """
        self._check_open()
        now = as_utc(self._clock())
        asker = LeaseHolder.this_process()
        pruned: list[PrunedSession] = []
        held: list[SessionKey] = []
        listed = [(summary.checkpoint_seq, summary) for summary in self._current_summaries()]
        listed += self._without_checkpoint()
        for _, summary in sorted(listed, key=_seq_of):
            key = summary.key
            bucket = self._events[key]
            kept = [stored for stored in bucket if _kept(stored, summary.checkpoint_seq)]
            newest = bucket[-1][1].at
            if len(kept) == len(bucket) or not prunable(
                summary, newest, before, interrupted=interrupted
            ):
                continue  # already pruned, or not to be
            lease = self._leases.get(key)
            if lease is not None and not may_take_lease(
                lease.holder, lease.expires_at, asker, now, this_host=self._host
            ):
                held.append(key)
                continue
            gone = len(bucket) - len(kept)
            pruned.append(PrunedSession(key, gone, summary.stop_reason, summary.updated_at))
            if not dry_run:
                self._events[key] = kept
        return PruneResult(as_utc(before), tuple(pruned), tuple(held), dry_run=dry_run)

    def _current_summaries(self) -> list[SessionSummary]:
        """Each session's summary as its latest checkpoint left it (built once per checkpoint)."""
        summaries = self._summaries
        current: list[SessionSummary] = []
        for key, (seq, event) in self._checkpoints.items():
            summary = summaries.get(key)
            if summary is None or summary.checkpoint_seq != seq:
                summary = summaries[key] = summary_of(event, seq)
            current.append(with_marks(summary, self._marks.get(key, NO_MARKS)))
        return current

    def _without_checkpoint(self) -> list[tuple[int, SessionSummary]]:
        """The sessions with events but no checkpoint, each as its newest event leaves it (and
        the control requests so far mark it), with that event's seq."""
        found: list[tuple[int, SessionSummary]] = []
        for key, bucket in self._events.items():
            if bucket and key not in self._checkpoints:
                seq, newest = bucket[-1]
                summary = summary_before_checkpoint(key, newest.at)
                found.append((seq, with_marks(summary, self._marks.get(key, NO_MARKS))))
        return found

    def _with_holder(self, summary: SessionSummary) -> SessionSummary:
        lease = self._leases.get(summary.key)
        if lease is None or lease.expires_at <= as_utc(self._clock()):
            return summary
        return attrs.evolve(summary, holder=str(lease.holder))

    async def acquire_lease(self, key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
        """Take the session's lease for ``ttl`` seconds or raise :class:`SessionLocked`.

        A holder that did not hold it already gets the next epoch.
        """
        self._check_open()
        check_key(key)
        now = as_utc(self._clock())
        expires_at = lease_expiry(now, ttl)
        current = self._leases.get(key)
        if current is not None and not may_take_lease(
            current.holder, current.expires_at, holder, now, this_host=self._host
        ):
            raise SessionLocked(str(key), str(current.holder))
        if current is not None and current.holder == holder:
            epoch = current.epoch
        else:
            epoch = self._epochs[key] = self._epochs.get(key, 0) + 1
        lease = Lease(key, holder, expires_at, log_seq=self._seq, epoch=epoch)
        self._leases[key] = lease
        return lease

    async def claim_due(
        self,
        now: datetime,
        holder: LeaseHolder,
        ttl: float,
        *,
        limit: int,
        interrupted: bool = False,
    ) -> list[Claim]:
        """Take the lease of up to ``limit`` due sessions nobody holds, in one step (no
        ``await`` in it); the rules are :meth:`eventlog.EventLog.claim_due`'s.

        Every claim is a new holding: a new epoch, even of a lease the claimer let expire.
        """
        self._check_open()
        check_claim_limit(limit)
        moment = as_utc(self._clock())
        expires_at = lease_expiry(moment, ttl)
        claims: list[Claim] = []
        alive = functools.cache(process_alive)  # a daemon holds many: one look per process
        for summary in self._claimable(now, interrupted):
            if len(claims) >= limit:
                break
            key = summary.key
            current = self._leases.get(key)
            if current is not None and not lease_gone(
                current.holder, current.expires_at, moment, this_host=self._host, alive=alive
            ):
                continue
            epoch = self._epochs[key] = self._epochs.get(key, 0) + 1
            lease = self._leases[key] = Lease(key, holder, expires_at, self._seq, epoch)
            claims.append(Claim(attrs.evolve(summary, holder=str(holder)), lease))
        return claims

    def _claimable(self, now: datetime, interrupted: bool) -> list[SessionSummary]:
        """The sessions a claim at ``now`` may take, leases aside, in claim order: the due
        ones by wake time, then (``interrupted``) the crashed ones by when they last wrote."""
        summaries = self._current_summaries()
        found = [s for s in summaries if is_due(s, now) and not s.paused]
        found.sort(key=lambda s: (s.next_wake_at, s.checkpoint_seq))
        if interrupted:
            crashed = [s for s in summaries if is_interrupted(s)]
            crashed.sort(key=lambda s: (s.updated_at, s.checkpoint_seq))
            found += crashed
        return found

    async def renew_leases(self, leases: Sequence[Lease], ttl: float) -> list[Lease]:
        """Renew many leases in one step (no ``await`` in it): the renewed ones, in the order
        given; one no longer its holder's at its epoch is left out."""
        self._check_open()
        expires_at = lease_expiry(self._clock(), ttl)
        renewed: list[Lease] = []
        for lease in leases:
            current = self._leases.get(lease.key)
            if (
                current is not None
                and current.holder.token == lease.holder.token
                and current.epoch == lease.epoch
            ):
                self._leases[lease.key] = attrs.evolve(lease, expires_at=expires_at)
                renewed.append(self._leases[lease.key])
        return renewed

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend our lease (same epoch) or raise :class:`LeaseLost` when it is no longer ours."""
        self._check_open()
        expires_at = lease_expiry(self._clock(), ttl)
        self._check_fence(lease)
        renewed = attrs.evolve(lease, expires_at=expires_at)
        self._leases[lease.key] = renewed
        return renewed

    async def append_and_release(self, events: Sequence[Event], lease: Lease) -> list[int]:
        """Append ``events`` fenced by ``lease`` and drop it, as one step: both or neither.

        A lease lost meanwhile raises :class:`~eventlog.LeaseLost`: nothing is written and the
        new holder keeps the session.
        """
        if events:
            seqs = await self.append(events, lease=lease)
        else:
            check_fenced_batch(events, lease)
            seqs = []
        await self.release_lease(lease)
        return seqs

    async def release_lease(self, lease: Lease) -> None:
        """Drop our lease (never another holder's, nor ours of another epoch); releasing twice
        is harmless."""
        self._check_open()
        current = self._leases.get(lease.key)
        if (
            current is not None
            and current.holder.token == lease.holder.token
            and current.epoch == lease.epoch
        ):
            del self._leases[lease.key]

    def _check_fence(self, lease: Lease) -> None:
        """Raise :class:`LeaseLost` unless ``lease`` is the session's: its holder, its epoch."""
        current = self._leases.get(lease.key)
        if current is None:
            raise LeaseLost(str(lease.key), "released")
        if current.holder.token != lease.holder.token or current.epoch != lease.epoch:
            raise LeaseLost(str(lease.key), f"now held by {current.holder} (epoch {current.epoch})")

    # -- tokens ----------------------------------------------------------------------------

    async def create_token(self, record: TokenRecord) -> None:
        """Keep the token ``record``; a name (or digest) the log has raises
        :class:`~eventlog.TokenExists`."""
        self._check_open()
        if record.name in self._tokens:
            raise TokenExists(record.name)
        if record.digest in self._token_names:
            raise TokenExists(record.name, SECRET_REUSED)
        self._tokens[record.name] = record
        self._token_names[record.digest] = record.name

    async def tokens(self) -> list[TokenRecord]:
        """Every token, revoked and expired ones too, oldest first."""
        self._check_open()
        return sorted(self._tokens.values(), key=lambda token: token.created_at)

    async def revoke_token(self, name: str) -> TokenRecord:
        """Revoke the token ``name`` as of the log's clock (a revoked one stays as it was);
        an unknown name raises :class:`~eventlog.UnknownToken`."""
        self._check_open()
        token = self._tokens.get(name)
        if token is None:
            raise UnknownToken(name)
        if token.revoked_at is None:
            token = attrs.evolve(token, revoked_at=as_utc(self._clock()))
            self._tokens[name] = token
        return token

    async def token_by_digest(self, digest: str) -> TokenRecord | None:
        """The token whose secret has this digest, or None."""
        self._check_open()
        name = self._token_names.get(digest)
        return None if name is None else self._tokens[name]
