//! The schema, its versioned migrations, and every statement, written once for both databases.
//!
//! Statements use PostgreSQL's numbered parameters (`$1`); SQLite reads them as `?1` (see
//! [`for_sqlite`]). Both dialects share the text, so a reader audits one set of guards. Nothing
//! here reads a clock or draws randomness: no `CURRENT_TIMESTAMP`, no `random()`, no
//! `AUTOINCREMENT`; every time is a parameter (`t_us`, `now`), except PostgreSQL's
//! `clock_timestamp()` when the caller asks for the database's clock.

/// The schema versions this build knows, in order: `(version, for both databases, for
/// PostgreSQL only, for SQLite only)`. Each migration moves the database from the version before
/// it to its own. A database at a later version than the last is refused.
pub const MIGRATIONS: &[(i64, &str, &str, &str)] = &[
    (1, V1, "", ""),
    (2, "", V2_POSTGRES, ""),
    (3, V3, "", ""),
    (4, V4, "", ""),
    (5, V5, "", ""),
    (6, "", "", V6_SQLITE),
    (7, "", "", V7_SQLITE),
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = 7;

/// The rows the backlog is counted in (schema version 5): a transaction adds what it changed to
/// one of them ([`ADD_BACKLOG`]), so that operations of different connections seldom wait on one
/// row.
pub const BACKLOG_SHARDS: i64 = 16;

/// Version 1: jobs, the ledger, the per-worker last grants and the event log.
const V1: &str = "
CREATE TABLE lease_jobs (
    job BIGINT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'terminal')),
    epoch BIGINT NOT NULL,
    attempts BIGINT NOT NULL,
    -- Position in the queue, while queued: the queue's head has the lowest.
    queue_seq BIGINT,
    -- The live lease, while leased.
    owner TEXT,
    lease_epoch BIGINT,
    expires_at_us BIGINT,
    -- The terminal outcome, once ended.
    outcome TEXT CHECK (outcome IN ('completed', 'dead_lettered', 'quarantined')),
    output BIGINT,
    rival BIGINT,
    ended_epoch BIGINT,
    ended_attempts BIGINT
);
CREATE INDEX lease_jobs_queue ON lease_jobs (queue_seq, job) WHERE state = 'queued';
CREATE INDEX lease_jobs_expiry ON lease_jobs (expires_at_us, job) WHERE expires_at_us IS NOT NULL;
-- The backlog (jobs not yet terminal) was counted over this index, until version 5 kept a count.
CREATE INDEX lease_jobs_live ON lease_jobs (job) WHERE state <> 'terminal';
CREATE TABLE lease_grants (
    worker BIGINT PRIMARY KEY,
    request BIGINT NOT NULL,
    job BIGINT NOT NULL,
    epoch BIGINT NOT NULL
);
CREATE TABLE lease_ledger (
    job BIGINT NOT NULL,
    step BIGINT NOT NULL,
    fence BIGINT NOT NULL,
    output BIGINT,
    rival BIGINT,
    PRIMARY KEY (job, step)
);
CREATE TABLE lease_events (
    seq BIGINT PRIMARY KEY,
    t_us BIGINT NOT NULL,
    node TEXT NOT NULL,
    line TEXT NOT NULL
);
-- The log's head: one row, locked by each transaction as its last statement, so sequence
-- numbers are handed out in commit order.
CREATE TABLE lease_log_head (seq BIGINT NOT NULL);
INSERT INTO lease_log_head (seq) VALUES (0);
";

/// Version 2, PostgreSQL only: the log's numbers come from a sequence, taken without a lock held
/// to commit, so that operations over different rows commit side by side (see [`LOCK_LOG_SHARED`]).
/// The head row stays SQLite's counter (its writers are serial anyway).
const V2_POSTGRES: &str = "
CREATE SEQUENCE lease_log_seq;
SELECT setval('lease_log_seq', (SELECT seq FROM lease_log_head) + 1, false);
";

/// Version 3: each job's payload, the bytes its handler receives, written with the job's row by
/// the enqueue that accepted it (a job enqueued without one has no row here). `BYTEA` is
/// PostgreSQL's bytes; SQLite keeps a blob as it is in a column of any declared type.
const V3: &str = "
CREATE TABLE lease_payloads (
    job BIGINT PRIMARY KEY,
    payload BYTEA NOT NULL
);
";
/// Version 4, for a dashboard and for retention. `queued_at_us`: when each queued job entered
/// the queue, by the table's clock, for the longest wait (`lease_oldest_waiting_seconds`): set
/// when the job is accepted and when it is requeued to the back; a grant released undone puts the
/// job back at the head with the time it had, since its wait never ended (a job queued before
/// this version has none, and counts in that figure only once it is queued again). `ended_at_us`:
/// when a job ended, for pruning by age (a job ended before this version counts as ended at 0).
/// `lease_events.job`: the one job a line is about (`NULL`: none, or several, as a listing), so
/// that a prune removes a job's lines and no other's; the lines written before this version are
/// given theirs as the migration runs ([`crate::sql::line_job`]).
const V4: &str = "
ALTER TABLE lease_jobs ADD COLUMN queued_at_us BIGINT;
ALTER TABLE lease_jobs ADD COLUMN ended_at_us BIGINT;
ALTER TABLE lease_events ADD COLUMN job BIGINT;
CREATE INDEX lease_events_job ON lease_events (job);
CREATE INDEX lease_jobs_ended ON lease_jobs (ended_at_us, job) WHERE state = 'terminal';
ALTER TABLE lease_schema ADD COLUMN pruned_before_us BIGINT;
";

/// Version 5: the backlog (accepted jobs not yet terminal) is kept as a count, not counted. An
/// enqueue adds one in the transaction that inserts the job, and every write that ends a job takes
/// one away in the transaction that writes it ([`ADD_BACKLOG`]), so the count always equals the
/// rows it stands for. Counting the rows instead ([`SELECT_BACKLOG`] before this version) cost an
/// enqueue a step per job in the backlog, under the log's exclusive lock, and so did every read of
/// the figures. The count is spread over [`BACKLOG_SHARDS`] rows, each transaction writing one,
/// so that completions of different connections seldom wait on each other for it; it starts as
/// the rows' own count, in row 0, and a row is made by the first change written to it. The index
/// the count was taken over goes: it only cost every write.
///
/// A handle of an earlier build that is still open as the database moves to this version does not
/// keep the count: move a fleet to this version with its workers stopped.
const V5: &str = "
CREATE TABLE lease_backlog (shard BIGINT PRIMARY KEY, n BIGINT NOT NULL);
INSERT INTO lease_backlog (shard, n) SELECT 0, COUNT(*) FROM lease_jobs WHERE state <> 'terminal';
DROP INDEX lease_jobs_live;
";

/// Version 6, SQLite only: the jobs, the log and the payloads keyed by the row's own id. On
/// SQLite only a column declared `INTEGER PRIMARY KEY` is the row's id; the `BIGINT PRIMARY KEY`
/// of the versions before made a second B-tree, a unique index beside the table, so that every
/// read of a job by its id was two searches, and every line of the log and every payload two
/// inserts (one process's CPU a job, in `pool_bench`: 47 to 48 µs before, 42 after). Each
/// table is rebuilt as SQLite rebuilds one (a new table, its rows copied, the old one dropped, the
/// new one renamed), with its indexes made again; the columns, their checks and every value stay
/// as they were. PostgreSQL's tables are left as they are: there a primary key is the index.
const V6_SQLITE: &str = "
CREATE TABLE lease_jobs_v6 (
    job INTEGER PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'terminal')),
    epoch BIGINT NOT NULL,
    attempts BIGINT NOT NULL,
    queue_seq BIGINT,
    owner TEXT,
    lease_epoch BIGINT,
    expires_at_us BIGINT,
    outcome TEXT CHECK (outcome IN ('completed', 'dead_lettered', 'quarantined')),
    output BIGINT,
    rival BIGINT,
    ended_epoch BIGINT,
    ended_attempts BIGINT,
    queued_at_us BIGINT,
    ended_at_us BIGINT
);
INSERT INTO lease_jobs_v6 (job, state, epoch, attempts, queue_seq, owner, lease_epoch, expires_at_us,
    outcome, output, rival, ended_epoch, ended_attempts, queued_at_us, ended_at_us)
SELECT job, state, epoch, attempts, queue_seq, owner, lease_epoch, expires_at_us, outcome, output,
    rival, ended_epoch, ended_attempts, queued_at_us, ended_at_us FROM lease_jobs;
DROP TABLE lease_jobs;
ALTER TABLE lease_jobs_v6 RENAME TO lease_jobs;
CREATE INDEX lease_jobs_queue ON lease_jobs (queue_seq, job) WHERE state = 'queued';
CREATE INDEX lease_jobs_expiry ON lease_jobs (expires_at_us, job) WHERE expires_at_us IS NOT NULL;
CREATE INDEX lease_jobs_ended ON lease_jobs (ended_at_us, job) WHERE state = 'terminal';
CREATE TABLE lease_events_v6 (
    seq INTEGER PRIMARY KEY,
    t_us BIGINT NOT NULL,
    node TEXT NOT NULL,
    line TEXT NOT NULL,
    job BIGINT
);
INSERT INTO lease_events_v6 (seq, t_us, node, line, job) SELECT seq, t_us, node, line, job FROM lease_events;
DROP TABLE lease_events;
ALTER TABLE lease_events_v6 RENAME TO lease_events;
CREATE INDEX lease_events_job ON lease_events (job);
CREATE TABLE lease_payloads_v6 (
    job INTEGER PRIMARY KEY,
    payload BYTEA NOT NULL
);
INSERT INTO lease_payloads_v6 (job, payload) SELECT job, payload FROM lease_payloads;
DROP TABLE lease_payloads;
ALTER TABLE lease_payloads_v6 RENAME TO lease_payloads;
";

/// Version 7, SQLite only: the job table's checks written as comparisons joined by `OR`, not as
/// `IN` lists. SQLite checks a list of three or more values by building a temporary B-tree of
/// them, and it builds it again at each statement it runs: every write of a job (each grant, each
/// completion, each enqueue) opened, filled and dropped two of them, one for the state and one for
/// the outcome. In `pool_bench`'s profile, making them was about a third of the store thread's
/// time in `UPDATE lease_jobs`; one update of a job row took 9.5 to 9.9 µs with the lists and 5.9
/// to 6.0 without. The checks accept and refuse exactly the rows they did (a `NULL` outcome
/// passes both ways). The table is rebuilt as version 6 rebuilt it; its indexes are made again.
/// PostgreSQL checks a list without a table, and keeps its own.
const V7_SQLITE: &str = "
CREATE TABLE lease_jobs_v7 (
    job INTEGER PRIMARY KEY,
    state TEXT NOT NULL CHECK (state = 'queued' OR state = 'leased' OR state = 'terminal'),
    epoch BIGINT NOT NULL,
    attempts BIGINT NOT NULL,
    queue_seq BIGINT,
    owner TEXT,
    lease_epoch BIGINT,
    expires_at_us BIGINT,
    outcome TEXT CHECK (outcome = 'completed' OR outcome = 'dead_lettered' OR outcome = 'quarantined'),
    output BIGINT,
    rival BIGINT,
    ended_epoch BIGINT,
    ended_attempts BIGINT,
    queued_at_us BIGINT,
    ended_at_us BIGINT
);
INSERT INTO lease_jobs_v7 (job, state, epoch, attempts, queue_seq, owner, lease_epoch, expires_at_us,
    outcome, output, rival, ended_epoch, ended_attempts, queued_at_us, ended_at_us)
SELECT job, state, epoch, attempts, queue_seq, owner, lease_epoch, expires_at_us, outcome, output,
    rival, ended_epoch, ended_attempts, queued_at_us, ended_at_us FROM lease_jobs;
DROP TABLE lease_jobs;
ALTER TABLE lease_jobs_v7 RENAME TO lease_jobs;
CREATE INDEX lease_jobs_queue ON lease_jobs (queue_seq, job) WHERE state = 'queued';
CREATE INDEX lease_jobs_expiry ON lease_jobs (expires_at_us, job) WHERE expires_at_us IS NOT NULL;
CREATE INDEX lease_jobs_ended ON lease_jobs (ended_at_us, job) WHERE state = 'terminal';
";

/// Notes that jobs ended before `$1` may have been pruned (the latest such time is kept): the
/// history's `run` line says so (`pruned_before_us`), for `lease-check` to judge counts over all
/// jobs as bounds.
pub const MARK_PRUNED: &str = "UPDATE lease_schema SET pruned_before_us = CASE \
     WHEN pruned_before_us IS NULL OR pruned_before_us < $1 THEN $1 ELSE pruned_before_us END";
/// The latest time before which ended jobs may have been pruned, if any prune removed anything.
pub const SELECT_PRUNED: &str = "SELECT pruned_before_us FROM lease_schema";

/// The lines of version 3 and earlier, to give each its job as version 4 migrates.
pub const SELECT_UNNAMED_LINES: &str = "SELECT seq, line FROM lease_events WHERE job IS NULL";
/// A line's job, as version 4 migrates.
pub const NAME_LINE: &str = "UPDATE lease_events SET job = $2 WHERE seq = $1";
/// Terminal jobs that ended before `$1`, the longest ended first, at most `$2`: a prune's batch.
pub const SELECT_PRUNABLE: &str = "SELECT job FROM lease_jobs WHERE state = 'terminal' \
     AND COALESCE(ended_at_us, 0) < $1 ORDER BY COALESCE(ended_at_us, 0), job LIMIT $2";
/// A pruned job's lines.
pub const DELETE_JOB_LINES: &str = "DELETE FROM lease_events WHERE job = $1";
/// A pruned job's row (terminal only: a prune never touches a job that has not ended).
pub const DELETE_JOB: &str = "DELETE FROM lease_jobs WHERE job = $1 AND state = 'terminal'";
/// A pruned job's payload.
pub const DELETE_PAYLOAD: &str = "DELETE FROM lease_payloads WHERE job = $1";
/// A pruned job's ledger rows.
pub const DELETE_OPS: &str = "DELETE FROM lease_ledger WHERE job = $1";
/// The workers' last grants of a pruned job (a retried acquire of one is then granted afresh).
pub const DELETE_GRANTS: &str = "DELETE FROM lease_grants WHERE job = $1";
/// The earliest line of a job the table still holds (after a prune's deletes: every job kept).
/// A line of no one job older than it (a listing) names only pruned jobs, since a job's lines
/// all follow its own first, so a prune may remove it.
pub const SELECT_EARLIEST_KEPT_LINE: &str = "SELECT MIN(e.t_us) FROM lease_events e JOIN lease_jobs j \
     ON j.job = e.job";
/// Lines of no one job (a listing) stamped before `$1`, at most `$2`, the oldest first.
pub const DELETE_JOBLESS_LINES: &str = "DELETE FROM lease_events WHERE seq IN (SELECT seq FROM lease_events \
     WHERE job IS NULL AND t_us < $1 ORDER BY seq LIMIT $2)";
/// The jobs by state and outcome, and the earliest time a queued one entered the queue: the
/// queue's figures (a read outside any decision).
pub const SELECT_FIGURES: &str = "SELECT state, outcome, COUNT(*), MIN(queued_at_us) FROM lease_jobs \
     GROUP BY state, outcome ORDER BY state, outcome";

/// The table holding the schema version.
pub const CREATE_VERSION: &str = "CREATE TABLE IF NOT EXISTS lease_schema (version BIGINT NOT NULL)";
/// The schema version, if set.
pub const READ_VERSION: &str = "SELECT version FROM lease_schema";
/// Set the first version.
pub const INSERT_VERSION: &str = "INSERT INTO lease_schema (version) VALUES ($1)";
/// Move to a later version.
pub const UPDATE_VERSION: &str = "UPDATE lease_schema SET version = $1";

/// Every column of a job row, in [`crate::sql::Row`]'s order.
macro_rules! job_columns {
    () => {
        "job, state, epoch, attempts, queue_seq, owner, lease_epoch, expires_at_us, outcome, output, rival, \
         ended_epoch, ended_attempts"
    };
}

/// One job's row. PostgreSQL appends `FOR UPDATE`: the row stays locked until the decision over it
/// is written back, so no other transaction decides over the same record meanwhile.
pub const SELECT_JOB: &str = concat!("SELECT ", job_columns!(), " FROM lease_jobs WHERE job = $1");

/// Whether a job is known. Job rows are never deleted, so no lock is needed.
pub const SELECT_KNOWN: &str = "SELECT 1 FROM lease_jobs WHERE job = $1";

/// PostgreSQL, which of an enqueue's jobs are known (`Scope::Enqueue`: one job, or a batch).
pub const SELECT_KNOWN_ANY: &str = "SELECT job FROM lease_jobs WHERE job = ANY($1)";

/// PostgreSQL, an operation that reads rows it does not lock (an enqueue's backlog and the
/// queue's back, a requeue's or release's queue ends, a reclaim listing's expired leases, a
/// fence's turn after its listing), every operation under the caller's clock, and every operation
/// of a store with a planted bug: one at a time. Taken first, with the clock read after it, so that
/// no transaction commits between its reads and its line, and its line's time is after every line
/// before it. (SQLite's `BEGIN IMMEDIATE` serialises everything.)
pub const LOCK_LOG: &str = "LOCK TABLE lease_log_head IN EXCLUSIVE MODE";

/// PostgreSQL, under the database's clock, an acquire: one at a time, and never beside an
/// operation that holds [`LOCK_LOG`], but side by side with those that hold [`LOCK_LOG_SHARED`]:
/// none of them adds a job to the queue or takes one out of it (a stale request for a queued job
/// is refused without a write), so the queue an acquire reads stays as it read it until it
/// commits. It locks its rows in job order ([`SELECT_ACQUIRE_ROWS`]).
pub const LOCK_QUEUE: &str = "LOCK TABLE lease_log_head IN SHARE ROW EXCLUSIVE MODE";

/// PostgreSQL, sent with the `BEGIN` of an acquire under [`LOCK_QUEUE`]: its statements run on
/// their generic plans, planned once per connection (and again when the table's statistics
/// change), not for each call's values. Acquires take turns, so what one spends holding the lock
/// every other waits for: at 32 jobs a call, planning the rows' read and the grants' write for
/// their arrays took about a fifth of it. Their generic plans are the same index scans (the
/// queue's partial index, the primary keys) at any array length. PostgreSQL 12 or later.
pub const GENERIC_PLANS: &str = "SET LOCAL plan_cache_mode = force_generic_plan";

/// PostgreSQL, under the database's clock, an operation over one row it locks (a renewal, a
/// completion, a quarantine, a ledger lookup or apply, a line of a caller's own), a batch of
/// renewals or completions (job rows, locked in job order), or a batch of ledger lookups or
/// records (ledger rows, locked in key order): side by side with any other such operation and
/// with an acquire ([`LOCK_QUEUE`]), but never beside one that holds [`LOCK_LOG`].
///
/// **No cycle.** Every transaction that locks several rows of a table locks them in key order:
/// a batch's job rows ([`SELECT_JOBS`]) and an acquire's heads and granted jobs, in one statement
/// ([`SELECT_ACQUIRE_ROWS`]); a batch's ledger rows ([`SELECT_OPS`]); no transaction locks both a
/// ledger row and a job row. So no two of them wait on each other in a cycle, even when a stale
/// batch holds a queued job an acquire wants. (Until the acquire locked in job order, it held its
/// last granted job while it waited for the head, and a stale batch could hold the head while it
/// waited for that job: batches were kept apart from acquires, and waited behind them.)
///
/// **Time order.** Its row is locked before the clock is read, so of two operations over one row
/// the later reads a later time: the log, in time order, is an order the decisions could have been
/// made in one at a time ([`SELECT_EVENTS_BY_TIME`]). The lock queue is fair: a waiting
/// [`LOCK_LOG`] holds back any operation that comes after it.
pub const LOCK_LOG_SHARED: &str = "LOCK TABLE lease_log_head IN ROW SHARE MODE";

/// The queue's head, for SQLite's acquire (SQLite serialises writers: `BEGIN IMMEDIATE`).
/// PostgreSQL appends `FOR UPDATE`; its acquires read the head with the granted jobs, in job
/// order ([`SELECT_ACQUIRE_ROWS`]). Either way acquires take turns, and the head is the oldest
/// queued job, never one skipped because a stale request held its row for a moment.
pub const SELECT_HEAD: &str =
    concat!("SELECT ", job_columns!(), " FROM lease_jobs WHERE state = 'queued' ORDER BY queue_seq, job LIMIT 1");

/// The reclaim listing: leases expired by the table's clock (`$1`, the latest expiry that counts
/// as expired), earliest first, at most `batch_max` (`$2`). A lease is listed only once its
/// `expires_at_us` has passed on the table's clock, never by a reclaimer's own: the guard
/// against Oban's Lifeline, which rescues jobs that may still be executing and so runs them twice.
/// The listing locks nothing: each fence re-checks at write time.
pub const SELECT_EXPIRED: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM lease_jobs WHERE expires_at_us IS NOT NULL AND expires_at_us <= $1 ORDER BY expires_at_us, job LIMIT $2"
);

/// Accepted jobs not yet terminal: the sum of the backlog's rows (schema version 5), not a count
/// of jobs.
pub const SELECT_BACKLOG: &str = "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM lease_backlog";

/// Adds `$1` to the backlog's row `$2` (of [`BACKLOG_SHARDS`]), made if missing: one for each job
/// an enqueue accepted, minus one for each job a transaction ended, written in that same
/// transaction.
pub const ADD_BACKLOG: &str = "INSERT INTO lease_backlog (shard, n) VALUES ($2, $1) \
     ON CONFLICT (shard) DO UPDATE SET n = lease_backlog.n + excluded.n";

/// The earliest live expiry.
pub const SELECT_EARLIEST: &str = "SELECT MIN(expires_at_us) FROM lease_jobs WHERE expires_at_us IS NOT NULL";

/// The next place at the back of the queue, and at its head. Each end is its own subquery, so that
/// each is one step down the queue's index (`lease_jobs_queue`) from its end: a `MIN` and a `MAX`
/// in one query make SQLite scan the whole queue (it takes the shortcut only for a lone `MIN` or
/// `MAX`), an enqueue then costs a step per queued job, and a preloaded backlog costs its square.
pub const SELECT_QUEUE_ENDS: &str = "SELECT \
     COALESCE((SELECT queue_seq FROM lease_jobs WHERE state = 'queued' ORDER BY queue_seq DESC LIMIT 1), 0) + 1, \
     COALESCE((SELECT queue_seq FROM lease_jobs WHERE state = 'queued' ORDER BY queue_seq LIMIT 1), 0) - 1";

/// A new job.
pub const INSERT_JOB: &str = concat!(
    "INSERT INTO lease_jobs (",
    job_columns!(),
    ", queued_at_us) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
);

/// A new job's payload.
pub const INSERT_PAYLOAD: &str = "INSERT INTO lease_payloads (job, payload) VALUES ($1, $2)";

/// A job's payload, if it has one.
pub const SELECT_PAYLOAD: &str = "SELECT payload FROM lease_payloads WHERE job = $1";

/// PostgreSQL, the payloads of the jobs `$1` (any order), those that have one.
pub const SELECT_PAYLOADS: &str = "SELECT job, payload FROM lease_payloads WHERE job = ANY($1)";

/// Writes a decision back: the new record (`$2`..`$13`) over the row read in this transaction
/// (`$14`..`$18`), with the times it entered the queue and ended (`$19`, `$20`: a NULL keeps the
/// column), as a compare-and-set that re-checks, at write time, the state, epoch, attempts,
/// lease epoch and expiry the decision was made over. Zero rows written means the row moved
/// under the decision: the transaction is rolled back. Each guard prevents a production bug:
/// - `state` and `epoch`: a completion is accepted only for the job's current epoch while it is
///   leased, never by state alone (River's completion checks only `state = 'running'`, not the
///   attempt, so a stale worker completes a job its rescuer handed on).
/// - `lease_epoch` and `expires_at_us`: a fence takes a lease only if it is still the expired
///   lease it listed: a job completed, requeued or renewed since the listing is not overwritten
///   (River's rescuer overwrote jobs completed meanwhile: its issue 1302, fixed in PR 1373).
/// - `expires_at_us` again: a renewal extends only the lease it found unexpired, so a renewal and
///   a reclaim at the boundary cannot both win (Graphile Worker's duplicate results when a job
///   outlived its lock).
pub const UPDATE_JOB: &str = "UPDATE lease_jobs SET state = $2, epoch = $3, attempts = $4, queue_seq = $5, \
     owner = $6, lease_epoch = $7, expires_at_us = $8, outcome = $9, output = $10, rival = $11, \
     ended_epoch = $12, ended_attempts = $13, queued_at_us = COALESCE($19, queued_at_us), \
     ended_at_us = COALESCE($20, ended_at_us) \
     WHERE job = $1 AND state = $14 AND epoch = $15 AND attempts = $16 \
     AND lease_epoch IS NOT DISTINCT FROM $17 AND expires_at_us IS NOT DISTINCT FROM $18";

/// Planted bug `complete-by-state-only` (feature `planted-bugs`): River's completion, one
/// statement guarded by the state alone. `$2` is the caller's epoch, written as the ending
/// epoch; nothing compares it with the job's. Never run unless that bug is planted.
pub const PLANTED_COMPLETE_BY_STATE: &str = "UPDATE lease_jobs SET state = 'terminal', queue_seq = NULL, \
     owner = NULL, lease_epoch = NULL, expires_at_us = NULL, outcome = 'completed', output = $3, \
     ended_epoch = $2 WHERE job = $1 AND state = 'leased'";

/// Planted bug `renew-by-epoch-only` (feature `planted-bugs`): a heartbeat guarded by job and
/// lease epoch, with no `expires_at_us > now`, so an expired lease nobody fenced yet is revived.
/// Never run unless that bug is planted.
pub const PLANTED_RENEW_BY_EPOCH: &str = "UPDATE lease_jobs SET expires_at_us = $3 \
     WHERE job = $1 AND state = 'leased' AND lease_epoch = $2";

/// A worker's last grant by request.
pub const SELECT_GRANT: &str = "SELECT request, job, epoch FROM lease_grants WHERE worker = $1";
/// Remembers a worker's last grant by request.
pub const UPSERT_GRANT: &str = "INSERT INTO lease_grants (worker, request, job, epoch) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (worker) DO UPDATE SET request = excluded.request, job = excluded.job, epoch = excluded.epoch";

/// PostgreSQL, makes sure an operation has a ledger row (fence 0, nothing recorded), to lock it
/// (SQLite reads a missing row as that empty record, and makes it with its first write:
/// [`INSERT_OP`]).
pub const ENSURE_OP: &str = "INSERT INTO lease_ledger (job, step, fence) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING";
/// SQLite, the first write of an operation's ledger row, where the transaction found none (see
/// `SqliteTx::op`): the row made with its decision, in one statement.
pub const INSERT_OP: &str = "INSERT INTO lease_ledger (job, step, fence, output, rival) VALUES ($1, $2, $3, $4, $5)";
/// An operation's ledger row. PostgreSQL appends `FOR UPDATE`.
pub const SELECT_OP: &str = "SELECT fence, output, rival FROM lease_ledger WHERE job = $1 AND step = $2";
/// Writes a ledger decision back. The guard `output IS NOT DISTINCT FROM $6` with the new output
/// equal to the old whenever one was recorded: the ledger never overwrites a recorded output,
/// a different one is kept aside as the rival (Graphile Worker's duplicate results: a second
/// writer's output replaced the first). `rival` is compared too, so a rival is set once.
pub const UPDATE_OP: &str = "UPDATE lease_ledger SET fence = $3, output = $4, rival = $5 \
     WHERE job = $1 AND step = $2 AND output IS NOT DISTINCT FROM $6 AND rival IS NOT DISTINCT FROM $7 \
     AND (output IS NULL OR output = $4)";

/// PostgreSQL, a batch's decisions over job rows written back in one statement: each row's new
/// record (`$1`..`$13`, arrays in the job columns' order) over the row read (`$14`..`$18`), with
/// its stamps (`$19`, `$20`), each guarded as [`UPDATE_JOB`] guards one row; the jobs written are
/// returned, and one missing rolls the transaction back. A batch never writes one job twice in it.
pub const UPDATE_JOBS: &str = "UPDATE lease_jobs AS j SET state = v.state, epoch = v.epoch, \
     attempts = v.attempts, queue_seq = v.queue_seq, owner = v.owner, lease_epoch = v.lease_epoch, \
     expires_at_us = v.expires_at_us, outcome = v.outcome, output = v.output, rival = v.rival, \
     ended_epoch = v.ended_epoch, ended_attempts = v.ended_attempts, \
     queued_at_us = COALESCE(v.queued_at_us, j.queued_at_us), \
     ended_at_us = COALESCE(v.ended_at_us, j.ended_at_us) \
     FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::bigint[], \
     $8::bigint[], $9::text[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], \
     $15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[], $19::bigint[], $20::bigint[]) \
     AS v(job, state, epoch, attempts, queue_seq, owner, lease_epoch, expires_at_us, outcome, output, rival, \
     ended_epoch, ended_attempts, old_state, old_epoch, old_attempts, old_lease_epoch, old_expires_at_us, \
     queued_at_us, ended_at_us) \
     WHERE j.job = v.job AND j.state = v.old_state AND j.epoch = v.old_epoch AND j.attempts = v.old_attempts \
     AND j.lease_epoch IS NOT DISTINCT FROM v.old_lease_epoch \
     AND j.expires_at_us IS NOT DISTINCT FROM v.old_expires_at_us RETURNING j.job";

/// PostgreSQL, a batch's ledger decisions in one statement, each guarded as [`UPDATE_OP`] guards
/// one; the jobs written are returned.
pub const UPDATE_OPS: &str = "UPDATE lease_ledger AS l SET fence = v.fence, output = v.output, rival = v.rival \
     FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], \
     $7::bigint[]) AS v(job, step, fence, output, rival, old_output, old_rival) \
     WHERE l.job = v.job AND l.step = v.step AND l.output IS NOT DISTINCT FROM v.old_output \
     AND l.rival IS NOT DISTINCT FROM v.old_rival AND (l.output IS NULL OR l.output = v.output) RETURNING l.job";

/// PostgreSQL, several workers' last grants in one statement (one row per worker).
pub const UPSERT_GRANTS: &str = "INSERT INTO lease_grants (worker, request, job, epoch) \
     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) \
     ON CONFLICT (worker) DO UPDATE SET request = excluded.request, job = excluded.job, epoch = excluded.epoch";

/// PostgreSQL, a batch's history lines in one statement, numbered from the log's sequence in
/// their order (a function scan yields the arrays' rows in order, and each takes its number as
/// it is inserted).
pub const INSERT_EVENTS_NEXT: &str = "INSERT INTO lease_events (seq, t_us, node, line, job) \
     SELECT nextval('lease_log_seq'), v.t_us, v.node, v.line, v.job \
     FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS v(t_us, node, line, job)";

/// PostgreSQL, a batch's job rows (`$1`, any order): PostgreSQL appends `FOR UPDATE`, and the
/// rows are locked in job order.
pub const SELECT_JOBS: &str =
    concat!("SELECT ", job_columns!(), " FROM lease_jobs WHERE job = ANY($1::bigint[]) ORDER BY job");

/// PostgreSQL, several workers' last grants by request.
pub const SELECT_GRANTS: &str =
    "SELECT worker, request, job, epoch FROM lease_grants WHERE worker = ANY($1::bigint[]) ORDER BY worker";

/// PostgreSQL, under the database's clock, before an acquire takes the queue's lock: whether it
/// would grant nothing, read in one statement (one snapshot): no job is queued, and no worker
/// `$1[i]` asks again under the request of its last grant, `$2[i]` (a copy, answered from that
/// grant). Then the acquire answers empty, as it would have at that snapshot, and takes no lock:
/// an idle worker's polls no longer wait in turn behind the acquires that grant, nor hold up the
/// calls behind them on their connection.
pub const SELECT_NOTHING_TO_GRANT: &str = "SELECT NOT EXISTS (SELECT 1 FROM lease_jobs WHERE state = 'queued') \
     AND NOT EXISTS (SELECT 1 FROM lease_grants g JOIN unnest($1::bigint[], $2::bigint[]) AS a(worker, request) \
     ON g.worker = a.worker AND g.request = a.request)";

/// PostgreSQL, an acquire's rows in one statement: the queue's first `$2` jobs and the jobs the
/// workers `$1` were last granted by request (for the check of a standing grant; a job may be
/// both). PostgreSQL appends `FOR UPDATE`, under [`LOCK_QUEUE`]: the rows are locked in job order,
/// as a batch locks its rows ([`SELECT_JOBS`]), so an acquire and a batch never wait on each other
/// in a cycle (see [`LOCK_LOG_SHARED`]). The caller tells the heads by their queue order: every
/// head is returned, and a granted job still queued but not a head comes after all of them.
pub const SELECT_ACQUIRE_ROWS: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM lease_jobs WHERE job IN (SELECT job FROM (SELECT job FROM lease_jobs WHERE state = 'queued' \
     ORDER BY queue_seq, job LIMIT $2) AS heads \
     UNION ALL SELECT job FROM lease_grants WHERE worker = ANY($1::bigint[])) ORDER BY job"
);

/// PostgreSQL, makes sure a batch's operations have ledger rows, in one statement.
pub const ENSURE_OPS: &str = "INSERT INTO lease_ledger (job, step, fence) \
     SELECT v.job, v.step, 0 FROM unnest($1::bigint[], $2::bigint[]) AS v(job, step) ON CONFLICT DO NOTHING";

/// PostgreSQL, a batch's ledger rows: PostgreSQL appends `FOR UPDATE` (in key order).
pub const SELECT_OPS: &str = "SELECT job, step, fence, output, rival FROM lease_ledger \
     WHERE (job, step) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[])) ORDER BY job, step";

/// SQLite: takes a transaction's `$1` log sequence numbers at once, as it is about to commit, in
/// its `BEGIN IMMEDIATE`: numbers are taken in commit order, and its lines are numbered in their
/// order, up to the one [`READ_SEQ`] then reads. (PostgreSQL numbers its lines from a sequence:
/// [`INSERT_EVENT_NEXT`].) Not `RETURNING`: SQLite keeps returned rows in a temporary table it
/// makes at each statement, which cost about as much again as the update.
pub const NEXT_SEQ: &str = "UPDATE lease_log_head SET seq = seq + $1";
/// SQLite: the last sequence number taken, read after [`NEXT_SEQ`] in the same transaction.
pub const READ_SEQ: &str = "SELECT seq FROM lease_log_head";
/// One history line.
pub const INSERT_EVENT: &str = "INSERT INTO lease_events (seq, t_us, node, line, job) VALUES ($1, $2, $3, $4, $5)";
/// One history line, PostgreSQL: numbered from the log's sequence.
pub const INSERT_EVENT_NEXT: &str =
    "INSERT INTO lease_events (seq, t_us, node, line, job) VALUES (nextval('lease_log_seq'), $1, $2, $3, $4)";
/// The log in commit order (the caller's clock: operations one at a time).
pub const SELECT_EVENTS: &str = "SELECT line FROM lease_events ORDER BY seq";
/// The log in time order, ties in commit order (the database's clock: see [`LOCK_LOG_SHARED`]).
pub const SELECT_EVENTS_BY_TIME: &str = "SELECT line FROM lease_events ORDER BY t_us, seq";

/// PostgreSQL's clock, in microseconds since the Unix epoch: read at the statement, not at the
/// transaction's start (`now()` would be the start).
pub const SELECT_CLOCK: &str = "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT";

/// A statement in SQLite's spelling of numbered parameters (`?1` for `$1`).
pub fn for_sqlite(sql: &str) -> String {
    sql.replace('$', "?")
}

/// Every statement an operation of the SQLite store runs (migrations and PostgreSQL's own
/// `FOR UPDATE` forms aside): what an SQLite handle prepares when it opens.
pub const STATEMENTS: [&str; 37] = [
    MARK_PRUNED,
    SELECT_PRUNED,
    SELECT_UNNAMED_LINES,
    NAME_LINE,
    SELECT_PRUNABLE,
    DELETE_JOB_LINES,
    DELETE_JOB,
    DELETE_PAYLOAD,
    DELETE_OPS,
    DELETE_GRANTS,
    SELECT_EARLIEST_KEPT_LINE,
    DELETE_JOBLESS_LINES,
    SELECT_FIGURES,
    SELECT_JOB,
    SELECT_KNOWN,
    SELECT_HEAD,
    SELECT_EXPIRED,
    SELECT_BACKLOG,
    ADD_BACKLOG,
    SELECT_EARLIEST,
    SELECT_QUEUE_ENDS,
    INSERT_JOB,
    INSERT_PAYLOAD,
    SELECT_PAYLOAD,
    UPDATE_JOB,
    PLANTED_COMPLETE_BY_STATE,
    PLANTED_RENEW_BY_EPOCH,
    SELECT_GRANT,
    UPSERT_GRANT,
    INSERT_OP,
    SELECT_OP,
    UPDATE_OP,
    NEXT_SEQ,
    READ_SEQ,
    INSERT_EVENT,
    SELECT_EVENTS,
    SELECT_EVENTS_BY_TIME,
];
