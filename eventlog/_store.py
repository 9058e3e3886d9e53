"""The EventLog protocol every store implements, and the values it trades in."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

import anyio
import attrs

from ._events import MAX_KEY_LENGTH, Checkpoint, Event, EventKind, SessionKey, check_key
from ._process import process_start

#: A function giving the current UTC time; stores take one so tests can drive lease expiry
#: (``scheduler.Clock`` is another thing: an object that also sleeps and times out).
Now = Callable[[], datetime]


@attrs.frozen
class LeaseHolder:
    """Who holds (or asks for) a session lease: host, process id, and a random token.

    ``started`` is the process's start time as its host's process table gives it (clock ticks
    since boot, as text; empty when it cannot be told): a holder of this host whose pid now
    names a process with another start time is gone, its pid reused.
    """

    host: str
    pid: int
    token: str
    started: str = ""

    @classmethod
    def this_process(cls) -> LeaseHolder:
        """A fresh holder for the calling process (a new token on every call)."""
        pid = os.getpid()
        return cls(
            host=socket.gethostname(),
            pid=pid,
            token=secrets.token_hex(8),
            started=process_start(pid),
        )

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.token}"


@attrs.frozen
class Lease:
    """A held session lease; ``expires_at`` moves forward on every renewal.

    ``log_seq`` is the newest seq in the whole log when the lease was taken (``None`` when the
    store does not say): every event appended after that has a larger seq, so a run can watch
    for what arrives while it holds the lease without a read of its own first.

    ``epoch`` numbers the holders of the session: every acquisition by a holder that does not
    hold the lease already gives a larger one (never reused, not even after a release), and a
    renewal keeps it. An append fenced by this lease lands only while the session's lease is
    still this holder's, at this epoch.
    """

    key: SessionKey
    holder: LeaseHolder
    expires_at: datetime
    log_seq: int | None = None
    epoch: int = 0


@attrs.frozen
class SessionSummary:
    """One session as the latest checkpoint left it (what ``autonomous ls`` shows).

    A session without a checkpoint yet (listed by :meth:`EventLog.sessions` from its first
    event) has ``checkpoint_seq`` 0, no turns, no cost and no stop reason, and ``updated_at``
    is the time of its newest event.

    ``next_wake_at``: the wake time of a deferred session, its latest checkpoint's, or the
    time of a wake request appended after that checkpoint when it is earlier (a wake makes the
    session due at once; the checkpoint keeps its own time; a stopped session is not woken).
    ``paused``: the run was parked by a pause, or a pause request came after the latest
    checkpoint (a ``resume`` request clears it). ``stopped``: the session was stopped on
    purpose, by its checkpoint or a stop request after it (never due; resuming needs force).
    ``unpriced``: the latest checkpoint's run had no prices for its model (``cost_usd`` is 0).
    ``input_tokens`` and ``cached_input_tokens``: the run's input tokens so far and the part of
    them read from the provider's prompt cache, as that checkpoint counted them.

    ``checkpoint`` is the latest checkpoint itself (output tokens, outcome, done detail, error,
    budgets), as :meth:`EventLog.sessions` lists it: None for a session without one, and for one
    whose latest checkpoint cannot be read back (:meth:`EventLog.latest_checkpoint` raises
    :class:`~eventlog.CorruptEvent` for it; the listing goes on, that session as its summary
    says). :meth:`EventLog.due_sessions` and :meth:`EventLog.claim_due` leave it None.
    """

    key: SessionKey
    turns: int
    cost_usd: float
    stop_reason: str | None
    next_wake_at: datetime | None
    updated_at: datetime
    checkpoint_seq: int
    holder: str | None = None
    paused: bool = False
    stopped: bool = False
    unpriced: bool = False
    input_tokens: int = 0
    cached_input_tokens: int = 0
    checkpoint: Checkpoint | None = None


@attrs.frozen
class Claim:
    """A due session taken by :meth:`EventLog.claim_due`: the session as it was claimed, and
    the claimer's lease on it (a new, larger epoch)."""

    summary: SessionSummary
    lease: Lease


@attrs.frozen
class PrunedSession:
    """One session :meth:`EventLog.prune` removed events of (or would, in a dry run).

    ``events`` is how many went; ``stop_reason`` and ``updated_at`` are its latest
    checkpoint's (a session without one: None, and the time of its newest event).
    """

    key: SessionKey
    events: int
    stop_reason: str | None
    updated_at: datetime


@attrs.frozen
class PruneResult:
    """What :meth:`EventLog.prune` removed (or would have: ``dry_run``).

    ``pruned`` lists the sessions that lost events, oldest first (by their latest checkpoint's
    seq, else their newest event's); ``held`` the sessions the prune would have taken but left
    alone because a live process held their lease.
    """

    before: datetime
    pruned: tuple[PrunedSession, ...] = ()
    held: tuple[SessionKey, ...] = ()
    dry_run: bool = False

    @property
    def sessions(self) -> int:
        """How many sessions lost events."""
        return len(self.pruned)

    @property
    def events(self) -> int:
        """How many events went, over all sessions."""
        return sum(pruned.events for pruned in self.pruned)


_HEX_DIGEST = re.compile("[0-9a-f]{64}")
#: What :class:`~eventlog.TokenExists` says of a new token whose digest another token has.
SECRET_REUSED = "its secret is another token's (a secret is never reused)"


def _check_token_text(what: str, text: object) -> None:
    """Refuse a token's name, scope or app that no store takes (``ValueError``): not text,
    blank, longer than :data:`~eventlog.MAX_KEY_LENGTH` characters, or not UTF-8."""
    if not isinstance(text, str):
        raise ValueError(f"a token's {what} must be text, not {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"a token's {what} must not be blank")
    if len(text) > MAX_KEY_LENGTH:
        raise ValueError(
            f"a token's {what} has {len(text):,} characters, more than {MAX_KEY_LENGTH}"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"a token's {what} is not text a store can hold: {exc.reason}") from None


@attrs.frozen
class TokenRecord:
    """An API token as the log keeps it: never its secret, only the secret's SHA-256 digest.

    ``name`` is unique in the log for good (a revoked token keeps it), and is the author of
    every event its holder appends. ``scope`` is the scope's name (``viewer``, ``operator``,
    ``admin``: the server's vocabulary; the log stores any text). ``app`` limits the token to
    that app's sessions (None: every app). ``expires_at`` None: it never expires;
    ``revoked_at`` None: not revoked. ``digest`` (64 lowercase hex digits) is left out of the
    repr. A name, scope or app that is blank, not text, or longer than
    :data:`~eventlog.MAX_KEY_LENGTH` characters, or a digest that is not 64 hex digits, is a
    ``ValueError`` when the record is made.
    """

    name: str
    scope: str
    digest: str = attrs.field(repr=False)
    created_at: datetime
    app: str | None = None
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    def __attrs_post_init__(self) -> None:
        _check_token_text("name", self.name)
        _check_token_text("scope", self.scope)
        if self.app is not None:
            _check_token_text("app", self.app)
        if not isinstance(self.digest, str) or _HEX_DIGEST.fullmatch(self.digest) is None:
            raise ValueError("a token's digest must be 64 lowercase hex digits (SHA-256)")

    def status(self, now: datetime) -> str:
        """``"revoked"``, ``"expired"`` (at or after ``expires_at``) or ``"active"``, at
        ``now``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"

    def active(self, now: datetime) -> bool:
        """Whether the token proves its holder at ``now``: neither revoked nor expired."""
        return self.status(now) == "active"


@runtime_checkable
class EventLog(Protocol):
    """An append-only event store with checkpoints, due-session lookup and session leases.

    Implementations: :class:`eventlog.MemoryEventLog`, :class:`eventlog.SqliteEventLog` and
    :class:`eventlog.PostgresEventLog`.

    Keys: each part of a session key (``app``, ``user``, ``session_id``) is any text of at
    most :data:`~eventlog.MAX_KEY_LENGTH` (200) characters, and every such key works on every
    store. :meth:`append` (every event's key) and :meth:`acquire_lease`, where a key first
    reaches a store, refuse a longer part, or text no store can hold (a lone surrogate), with
    :class:`~eventlog.InvalidSessionKey` before anything is written. Reads do not check the
    key: a log written before the limit may hold longer ones.

    Two members have the protocol's own behaviour, which a store that subclasses
    ``EventLog`` inherits: :meth:`append_and_release` (the two calls, one after the other)
    and :meth:`watch` (no notifications: a reader polls). The stores here subclass it; the
    durable ones do the first in one atomic step, PostgreSQL's notifies. The token members
    (:meth:`create_token`, :meth:`tokens`, :meth:`revoke_token`, :meth:`token_by_digest`,
    what the HTTP API's tokens are kept with) raise ``NotImplementedError`` in the protocol's
    own: a store of a user's that keeps no tokens works for everything else.
    """

    #: True when events outlive the process (a resumable store).
    durable: bool

    async def append(self, events: Sequence[Event], *, lease: Lease | None = None) -> list[int]:
        """Append ``events`` atomically, in order; returns the ``seq`` assigned to each, in order.

        The given events are not changed (an event not yet appended has ``seq == 0``); events
        read back from the log carry their ``seq``. Seqs are unique and increasing across the
        whole log. An empty batch appends nothing and returns ``[]``.

        With ``lease`` the append is fenced: in the same atomic step, the session's lease must
        still be ``lease``'s holder (its token) at ``lease``'s epoch, or :class:`LeaseLost` is
        raised and nothing is written. Every event of a fenced batch must be of ``lease.key``
        (:class:`ValueError` otherwise). Without ``lease`` anyone may append (an inject or a
        control request from a process that holds no lease).
        """
        ...

    async def read(
        self,
        key: SessionKey,
        *,
        after_seq: int = 0,
        kinds: Collection[EventKind] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Events of one session with ``seq > after_seq``, oldest first, optionally filtered."""
        ...

    async def read_last(
        self, key: SessionKey, kinds: Collection[EventKind], limit: int
    ) -> list[Event]:
        """The newest ``limit`` events of the given kinds of one session, oldest first."""
        ...

    async def latest_checkpoint(self, key: SessionKey) -> Event | None:
        """The session's newest checkpoint event (an indexed read), or ``None``."""
        ...

    async def sessions(self) -> list[SessionSummary]:
        """Every session that has an event, newest first: a session exists from its first
        event (an inject sent before any run, a spec note, a run that died before its first
        checkpoint), not from its first checkpoint.

        Newest first means by the seq of the session's latest checkpoint, or, for a session
        without one, the seq of its newest event (a later event of a session with a
        checkpoint does not move it). A session without a checkpoint is summarised as
        ``checkpoint_seq`` 0, ``turns`` 0, no cost, no stop reason, no wake time, and
        ``updated_at`` the time of its newest event. ``holder`` is a live lease's holder.
        ``paused`` and ``stopped`` also count the control requests appended after the latest
        checkpoint, or since the first event when there is none (a stop or pause of a session
        that is not running shows at once), and a wake request after a ``deferred`` checkpoint
        moves ``next_wake_at`` to its time when that is earlier (see :class:`SessionSummary`).
        ``checkpoint`` is the latest checkpoint's payload (None without one, or when it cannot
        be read back: the others are listed all the same).
        """
        ...

    async def due_sessions(self, now: datetime) -> list[SessionSummary]:
        """Sessions whose latest checkpoint is ``deferred`` with ``next_wake_at <= now``.

        ``next_wake_at`` is the summary's: a wake request after the checkpoint makes the session
        due from the request's time on (at once), not at the checkpoint's wake time.
        A session that was stopped on purpose (its latest checkpoint says so, or a stop request
        came after it) is never due. A paused one is (``summary.paused``): the caller decides.
        """
        ...

    async def acquire_lease(self, key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
        """Take the session's lease for ``ttl`` seconds or raise :class:`SessionLocked`.

        A holder that did not hold it already gets a new, larger epoch.
        """
        ...

    async def prune(
        self, before: datetime, *, dry_run: bool = False, interrupted: bool = False
    ) -> PruneResult:
        """Drop the events of sessions that finished before ``before``, but their final checkpoint.

        A session is pruned when its latest checkpoint is finished (see below), that checkpoint
        and every later event of the session are older than ``before``, and no live process
        holds its lease. All its events go except the latest checkpoint and its notes (what
        started it, such as the CLI's spec note: few and small), so its summary in
        :meth:`sessions` and :meth:`latest_checkpoint` stay as they were (a resume of a
        completed session still returns its result); its conversation is gone.

        Finished: the checkpoint's stop reason is ``completed``, a budget's
        (``max_turns_exceeded``, ``max_tokens_exceeded``, ``max_cost_exceeded``,
        ``wallclock_exceeded``), ``retry_policy_aborted`` or ``aborted``; or the session was
        stopped on purpose (``stopped``: by its checkpoint, or by a stop request after it or,
        without a checkpoint, since its first event). By default never pruned: a deferred
        session (due or not), one without a stop reason (running, or crashed), one whose
        caller cancelled it without a stop (``context_cancelled``, not ``stopped``), one whose
        lease another process took over (``lease_lost``), one without a checkpoint.

        ``interrupted=True``, on explicit request, also prunes the sessions whose run was cut
        off, under the same rules (quiet since before ``before``, no live holder): a latest
        checkpoint without a stop reason, ``context_cancelled`` or ``lease_lost``, and the
        sessions that never wrote a checkpoint, which keep only their notes (one with none is
        then listed no more). A paused session (an operator's hold) and a deferred one are
        never pruned. ``autonomous ls`` calls both ``retry_policy_aborted`` and ``lease_lost``
        failed: the first is finished, the second taken with ``interrupted``.

        The store holds each session's lease while it deletes, so that no run starts on it
        meanwhile; a session held by a live process is listed in ``held`` and left alone, and
        one that writes a new checkpoint meanwhile (a run started on it) is left alone too.
        ``dry_run`` reports what would go and removes nothing. Seqs handed out later stay
        larger than every seq handed out before. Space is not given back to the file system.
        """
        ...

    async def claim_due(
        self,
        now: datetime,
        holder: LeaseHolder,
        ttl: float,
        *,
        limit: int,
        interrupted: bool = False,
    ) -> list[Claim]:
        """Take the lease of up to ``limit`` due sessions nobody holds, in one atomic step.

        Due: the latest checkpoint is ``deferred`` with ``next_wake_at <= now`` (the summary's:
        a wake request after the checkpoint makes it the request's time, when earlier), and the
        session is neither stopped nor paused. Not held: no lease, an expired one, or one whose
        holder is gone by the takeover rules of :meth:`acquire_lease`. Earliest ``next_wake_at``
        first.
        With ``interrupted``, also sessions whose latest checkpoint has no stop reason (a run
        that crashed) and that nobody holds, after the due ones, oldest first. Two claimers
        never get the same session while a lease on it is live.
        """
        ...

    async def renew_leases(self, leases: Sequence[Lease], ttl: float) -> list[Lease]:
        """Renew many leases in one atomic step; the renewed ones (same epoch, later expiry).

        A lease that is no longer its holder's at its epoch is left out of the result: the
        caller treats its session as lost (:class:`LeaseLost`).
        """
        ...

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend our lease (same epoch) or raise :class:`LeaseLost` when it is no longer ours."""
        ...

    async def release_lease(self, lease: Lease) -> None:
        """Drop our lease (never another holder's, nor ours of another epoch)."""
        ...

    async def aclose(self) -> None:
        """Close the store; idempotent."""
        ...

    async def append_and_release(self, events: Sequence[Event], lease: Lease) -> list[int]:
        """:meth:`append` fenced by ``lease``, then :meth:`release_lease`: what a run's last
        write does (its final checkpoint, and the session free at once).

        A store does both in one atomic step when it can (SQLite and PostgreSQL do: one
        transaction less per run): a lost lease raises :class:`LeaseLost`, nothing written,
        nothing released. The protocol's own makes the two calls one after the other: when
        the release fails after the append, the lease is still held and this raises.
        """
        seqs = await self.append(events, lease=lease)
        await self.release_lease(lease)
        return seqs

    def watch(
        self, key: SessionKey | None = None
    ) -> contextlib.AbstractAsyncContextManager[StoreWatch]:
        """Wake-ups for one session (``key``), or for every session's due-ness (``None``), for
        as long as the block is open: its :meth:`StoreWatch.wait` returns after a change
        another process committed (a hint: the reader re-reads from its last seq).

        A run watches its session for remote control with it, a daemon the due sessions;
        both poll too, every ``control_poll`` (or ``poll``). The protocol's own never wakes (a
        store that does not notify: its readers poll); PostgresEventLog's wakes on LISTEN.
        """
        return _unnotified()

    async def create_token(self, record: TokenRecord) -> None:
        """Keep the token ``record`` (its secret's digest, never the secret).

        A name the log has already, revoked or not, raises :class:`~eventlog.TokenExists`
        with nothing written; so does a digest it has (a secret used twice).
        """
        raise NotImplementedError(_no_tokens(self))

    async def tokens(self) -> list[TokenRecord]:
        """Every token the log keeps, revoked and expired ones too, oldest first."""
        raise NotImplementedError(_no_tokens(self))

    async def revoke_token(self, name: str) -> TokenRecord:
        """Revoke the token ``name`` as of the store's clock; the token as it is now.

        Revoking a revoked token changes nothing (it keeps its first ``revoked_at``). An
        unknown name raises :class:`~eventlog.UnknownToken`.
        """
        raise NotImplementedError(_no_tokens(self))

    async def token_by_digest(self, digest: str) -> TokenRecord | None:
        """The token whose secret has this SHA-256 ``digest`` (hex), revoked or expired ones
        included (the caller judges them), or None (an indexed read)."""
        raise NotImplementedError(_no_tokens(self))


def _no_tokens(log: object) -> str:
    """Why a store without the token members cannot do what was asked."""
    return (
        f"{type(log).__name__} keeps no API tokens: use a store of eventlog's"
        " (MemoryEventLog, SqliteEventLog, PostgresEventLog), or implement create_token,"
        " tokens, revoke_token and token_by_digest"
    )


class StoreWatch(Protocol):
    """What :meth:`EventLog.watch` yields: ``wait()`` returns after a change (coalesced)."""

    def wait(self) -> Awaitable[None]:
        """Return when something changed since the watch began or the last wait returned."""
        ...


class _Silent:
    """The watch of a store that does not notify: it never wakes (its readers poll)."""

    async def wait(self) -> None:
        """Never return (until cancelled)."""
        await anyio.sleep_forever()


@contextlib.asynccontextmanager
async def _unnotified() -> AsyncIterator[StoreWatch]:
    """The protocol's own watch: one that never wakes."""
    yield _Silent()


@attrs.frozen
class SessionRef:
    """A session inside a log: what ``Agent(session=...)`` and ``resume_autonomous`` take.

    Its key is checked when it is made: a part longer than
    :data:`~eventlog.MAX_KEY_LENGTH` characters (or not text a store can hold) raises
    :class:`~eventlog.InvalidSessionKey`, so that a run fails before its first model call.
    """

    log: EventLog
    app: str
    user: str
    session_id: str

    def __attrs_post_init__(self) -> None:
        check_key(self.key)

    @property
    def key(self) -> SessionKey:
        """The (app, user, session_id) key of this session."""
        return SessionKey(self.app, self.user, self.session_id)
