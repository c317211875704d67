//! The worker and reclaimer runtimes on the in-memory client and the manual clock: each test is a
//! deterministic discrete-event run (the clock jumps to the next timer when nothing can run).

mod common;

use common::{drive, reclaimer_config, runtime, worker_config, ManualClock, MemoryClient};
use futures::channel::oneshot;
use futures::future::{self, BoxFuture, FutureExt};
use lease_core::{Epoch, JobId, JobState, OpId, Outcome, OutputId, ReclaimerId, Span, Time, WorkerId, WorkerRequest};
use lease_history::{Event, Node};
use lease_runtime::{
    output_id, Cancel, Clock, Handler, Hook, Job, OptionsError, Output, Point, ReclaimerOptions, WorkerOptions,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn slots(count: u32) -> Vec<WorkerId> {
    (0..count).map(WorkerId).collect()
}

fn reclaimer() -> ReclaimerOptions {
    ReclaimerOptions::new(ReclaimerId(0), reclaimer_config())
}

/// Runs `run` with a recorder of the `metrics` facade installed on this thread, and returns
/// what the facade was told, by name: each counter's total, and each histogram's count.
fn told<T>(run: impl FnOnce() -> T) -> (T, std::collections::BTreeMap<String, u64>) {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let ran = metrics::with_local_recorder(&recorder, run);
    let mut told = std::collections::BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let count = match value {
            DebugValue::Counter(total) => total,
            DebugValue::Histogram(values) => values.len() as u64,
            DebugValue::Gauge(_) => continue,
        };
        *told.entry(key.key().name().to_string()).or_default() += count;
    }
    (ran, told)
}

/// The output a test handler produces for `job` on its `call`-th run.
fn output_bytes(job: JobId, call: u64) -> Vec<u8> {
    format!("document {job}, run {call}").into_bytes()
}

// Proves heartbeats carry a long handler: its one call sleeps five lease ttls (5 s on a 1 s
// lease) while the machine renews; the lease is never lost or reclaimed, the handler is called
// once, its output is recorded once under epoch 1, and the job completes with it. Fails if the
// runtime stops driving the machine while the handler runs (the lease expires and is reclaimed)
// or starts the handler again on the execute's retries.
#[test]
fn a_handler_five_ttls_long_keeps_its_lease_by_heartbeats_and_runs_once() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let calls = Arc::new(AtomicU64::new(0));
    let handler = {
        let (clock, calls) = (clock.clone(), Arc::clone(&calls));
        move |job: Job| {
            let (clock, calls) = (clock.clone(), Arc::clone(&calls));
            async move {
                let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
                clock.sleep_until(clock.now() + Span::from_secs(5)).await;
                Ok(output_bytes(job.id, call))
            }
        }
    };
    let runtime = runtime(&clock, &client);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, client.all_ended(1));
    let reclaim = runtime.reclaim(reclaimer(), client.all_ended(1));
    let (worked, reclaimed) = drive(&clock, future::join(work, reclaim));
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(worked.handled, 1);
    assert_eq!((worked.abandoned, worked.cancelled, reclaimed.fenced), (0, 0, 0), "{worked:?} {reclaimed:?}");
    let renewed = client.seen(|seen| seen.renewed);
    assert!(renewed >= 15, "5 s of heartbeats every 300 ms: {renewed} renewals");
    let output = output_id(&output_bytes(JobId(0), 1));
    let records = client.seen(|seen| seen.records.iter().map(|record| (record.1, record.2)).collect::<Vec<_>>());
    assert_eq!(records, vec![(Epoch(1), output)]);
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!((terminal.outcome, terminal.epoch), (Outcome::Completed { output }, Epoch(1)));
    assert!(clock.now() >= Time(5_000_000), "the handler's five seconds passed: {}", clock.now());
}

// Proves a request timing out never starts the handler again: the handler runs for three
// request timeouts (so the machine sends its execute again three times meanwhile), then the
// ledger records the output but its answer is lost, so the machine sends the execute once more:
// the runtime records the same output again rather than run the handler again. The handler runs
// once, the output goes to the ledger twice (applied, then already applied), the job completes.
#[test]
fn an_execute_sent_again_records_again_and_never_reruns_the_handler() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    client.plant(|faults| faults.lose_record_answers = 1);
    let calls = Arc::new(AtomicU64::new(0));
    let handler = {
        let (clock, calls) = (clock.clone(), Arc::clone(&calls));
        move |job: Job| {
            let (clock, calls) = (clock.clone(), Arc::clone(&calls));
            async move {
                let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
                clock.sleep_until(clock.now() + Span::from_ms(650)).await;
                Ok(output_bytes(job.id, call))
            }
        }
    };
    let runtime = runtime(&clock, &client);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, client.all_ended(1));
    let worked = drive(&clock, work).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!((worked.handled, worked.recorded, worked.completed), (1, 2, 1), "{worked:?}");
    let applies = client.seen(|seen| seen.records.iter().map(|record| record.3).collect::<Vec<_>>());
    assert_eq!(applies, vec![lease_core::Apply::Applied, lease_core::Apply::AlreadyApplied]);
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!(terminal.outcome, Outcome::Completed { output: output_id(&output_bytes(JobId(0), 1)) });
}

// Proves self-fencing cancels a hung handler and writes nothing under the lost lease: the table
// stops answering the first lease's renewals, the handler of that lease hangs; the machine
// self-fences before its estimate of expiry, the handler's cancellation fires and it is dropped;
// the reclaimer fences the expired lease, finds nothing recorded and requeues; a second run
// completes the job. Nothing is recorded under epoch 1, the job ends once.
#[test]
fn a_handler_hung_past_the_self_fence_is_cancelled_and_its_job_ends_once() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    client.plant(|faults| faults.lose_renewals_of = Some((JobId(0), Epoch(1))));
    let cancels: Arc<Mutex<Vec<(Epoch, Cancel, Time)>>> = Arc::default();
    let calls = Arc::new(AtomicU64::new(0));
    let handler = {
        let (cancels, calls) = (Arc::clone(&cancels), Arc::clone(&calls));
        move |job: Job| {
            let (cancels, calls) = (Arc::clone(&cancels), Arc::clone(&calls));
            async move {
                let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
                cancels.lock().unwrap().push((job.epoch, job.cancel.clone(), job.deadline()));
                if job.epoch == Epoch(1) {
                    future::pending::<()>().await;
                }
                Ok(output_bytes(job.id, call))
            }
        }
    };
    let runtime = runtime(&clock, &client);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, client.all_ended(1));
    let reclaim = runtime.reclaim(reclaimer(), client.all_ended(1));
    let ((worked, reclaimed), told) = told(|| drive(&clock, future::join(work, reclaim)));
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    // The figures a dashboard reads: two grants, one self-fence, one reclaim, and one effect
    // timed (the cancelled run never returned); the facade was told the same as the snapshot.
    let seen = runtime.metrics().snapshot();
    let figures = (seen.grants, seen.self_fences, seen.reclaims, seen.adoptions, seen.effect_seconds.count);
    assert_eq!(figures, (2, 1, 1, 0, 1), "{seen:?}");
    let expected = [
        ("lease_effect_seconds", 1),
        ("lease_grants_total", 2),
        ("lease_reclaims_total", 1),
        ("lease_self_fences_total", 1),
    ];
    assert_eq!(told, expected.map(|(name, n)| (name.to_string(), n)).into(), "the facade: {told:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "a second run after the reclaim");
    let cancels = cancels.lock().unwrap();
    assert_eq!(cancels.len(), 2);
    let (epoch, first, deadline) = &cancels[0];
    assert_eq!(*epoch, Epoch(1));
    assert!(first.is_cancelled(), "the hung handler's cancellation fired");
    assert_eq!(*deadline, Time(800_000), "acted on until the lease's ttl less the margin");
    assert!(!cancels[1].1.is_cancelled(), "the second run was not cancelled");
    assert_eq!((worked.cancelled, worked.abandoned, reclaimed.fenced), (1, 1, 1), "{worked:?} {reclaimed:?}");
    let abandoned = client.seen(|seen| {
        seen.lines.iter().any(|line| matches!(line, (Node::Worker(0), Event::Abandoned { epoch: Epoch(1), .. })))
    });
    assert!(abandoned, "the worker wrote its abandoned line");
    let epochs = client.seen(|seen| seen.records.iter().map(|record| record.1).collect::<Vec<_>>());
    assert!(!epochs.is_empty() && !epochs.contains(&Epoch(1)), "nothing recorded under the lost lease: {epochs:?}");
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!(terminal.outcome, Outcome::Completed { output: output_id(&output_bytes(JobId(0), 2)) });
}

// Proves concurrency: four slots and eight jobs whose handlers each take a second: four handlers
// run at once (counted as they enter and leave), never more, and every job completes once.
#[test]
fn four_slots_run_four_handlers_at_once() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(8);
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handler = {
        let (clock, running, most) = (clock.clone(), Arc::clone(&running), Arc::clone(&most));
        move |job: Job| {
            let (clock, running, most) = (clock.clone(), Arc::clone(&running), Arc::clone(&most));
            async move {
                let now_running = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now_running, Ordering::SeqCst);
                clock.sleep_until(clock.now() + Span::from_secs(1)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(output_bytes(job.id, 1))
            }
        }
    };
    let runtime = runtime(&clock, &client);
    let work = runtime.work(WorkerOptions::new(slots(4), worker_config()), handler, client.all_ended(8));
    let worked = drive(&clock, work).unwrap();
    assert_eq!(most.load(Ordering::SeqCst), 4, "four handlers ran at once");
    assert_eq!((worked.handled, worked.completed), (8, 8), "{worked:?}");
    assert!(clock.now() < Time(2_500_000), "two rounds of four, not eight in turn: {}", clock.now());
}

// Proves graceful shutdown loses nothing: two slots, four jobs; job 1's handler hangs, the others
// take 200 ms. The signal comes at 300 ms, while job 2 runs: job 2 finishes within the grace
// (500 ms), no slot acquires again, and at the grace's end job 1's handler is cancelled. Its
// handler had started, so its lease is left to expire, not released (see the worker module's
// doc); a reclaimer then requeues it, its attempt counted. Every job ends completed or queued:
// none leased, none lost.
#[test]
fn graceful_shutdown_finishes_or_hands_back_every_job() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(4);
    let cancels: Arc<Mutex<Vec<(JobId, Cancel)>>> = Arc::default();
    let handler = {
        let (clock, cancels) = (clock.clone(), Arc::clone(&cancels));
        move |job: Job| {
            let (clock, cancels) = (clock.clone(), Arc::clone(&cancels));
            async move {
                cancels.lock().unwrap().push((job.id, job.cancel.clone()));
                if job.id == JobId(1) {
                    job.cancel.cancelled().await;
                    panic!("a cancelled handler is dropped, never polled again");
                }
                clock.sleep_until(clock.now() + Span::from_ms(200)).await;
                Ok(output_bytes(job.id, 1))
            }
        }
    };
    let runtime = runtime(&clock, &client);
    let shutdown = clock.sleep_until(Time(300_000));
    let options = WorkerOptions { grace: Span::from_ms(500), ..WorkerOptions::new(slots(2), worker_config()) };
    let worked = drive(&clock, runtime.work(options, handler, shutdown)).unwrap();
    assert_eq!((worked.completed, worked.released, worked.cancelled, worked.left), (2, 0, 1, 1), "{worked:?}");
    assert!(clock.now() >= Time(800_000), "the grace was waited out: {}", clock.now());
    {
        let cancels = cancels.lock().unwrap();
        let started: Vec<JobId> = cancels.iter().map(|(job, _)| *job).collect();
        assert_eq!(started, vec![JobId(0), JobId(1), JobId(2)], "nothing started after the signal");
        assert!(cancels[1].1.is_cancelled() && !cancels[0].1.is_cancelled() && !cancels[2].1.is_cancelled());
    }
    let reclaim = runtime.reclaim(reclaimer(), client.until(|table| table.lease(JobId(1)).is_none()));
    let reclaimed = drive(&clock, reclaim).unwrap();
    assert_eq!(reclaimed.fenced, 1, "the left lease expired and was reclaimed: {reclaimed:?}");
    let states = client.states(4);
    let completed = |state: &JobState| matches!(state, JobState::Terminal(_));
    assert!(completed(&states[0]) && completed(&states[2]), "jobs 0 and 2 finished: {states:?}");
    assert_eq!((states[1], states[3]), (JobState::Queued, JobState::Queued), "jobs 1 and 3 are queued");
    assert_eq!(client.table(|table| table.attempts(JobId(1))), Some(1), "job 1's attempt was one, and counts");
}

// Proves a grant that answers an acquire sent before the shutdown signal goes straight back: the
// slot asks at 0 ms, the answer arrives at 150 ms, the signal came at 100 ms. The runtime
// releases the grant (no handler runs), so the job is queued again with no attempt counted.
#[test]
fn a_grant_arriving_after_the_signal_is_released_not_run() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    client.plant(|faults| faults.delay_acquire_answers = Some(Span::from_ms(150)));
    let handler = |_job: Job| -> future::Ready<lease_runtime::Outcome> { panic!("no handler runs after the signal") };
    let runtime = runtime(&clock, &client);
    let shutdown = clock.sleep_until(Time(100_000));
    let options = WorkerOptions::new(slots(1), worker_config());
    let worked = drive(&clock, runtime.work(options, handler, shutdown)).unwrap();
    assert_eq!((worked.handled, worked.released), (0, 1), "{worked:?}");
    let (epoch, attempts) = client.table(|table| (table.epoch(JobId(0)), table.attempts(JobId(0))));
    assert_eq!((epoch, attempts), (Some(Epoch(1)), Some(0)), "granted once, no attempt counted");
    assert_eq!(client.states(1), vec![JobState::Queued]);
}

/// A hook that crashes the node at one point: its future never resolves, and the test drops the
/// node when `crashed` fires, as the simulator kills it.
struct CrashAt {
    point: Point,
    crashed: Mutex<Option<oneshot::Sender<()>>>,
}

impl Hook for CrashAt {
    fn at(&self, _node: Node, point: Point, _job: Option<JobId>) -> BoxFuture<'static, ()> {
        if point != self.point {
            return Box::pin(future::ready(()));
        }
        if let Some(crashed) = self.crashed.lock().unwrap().take() {
            let _ = crashed.send(());
        }
        Box::pin(future::pending())
    }
}

// Proves a crash after the effect is adopted, not repeated: the worker's node crashes at
// after_effect (the ledger holds its output, the job is not completed) and is dropped; the
// reclaimer fences the expired lease, finds the output and completes the job with it. The
// handler ran once; the job completed with the first run's output under the reclaimer's epoch.
#[test]
fn a_crash_after_the_effect_is_adopted_by_the_reclaimer_not_repeated() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let (crashed, dead) = oneshot::channel();
    let hook = Arc::new(CrashAt { point: Point::AfterEffect, crashed: Mutex::new(Some(crashed)) });
    let calls = Arc::new(AtomicU64::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        move |job: Job| {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Ok(output_bytes(job.id, call)) }
        }
    };
    let runtime = runtime(&clock, &client);
    let crashing = runtime.clone().with_hook(hook);
    let work = crashing.work(WorkerOptions::new(slots(1), worker_config()), handler, future::pending());
    let node = future::select(work.boxed(), dead);
    let reclaim = runtime.reclaim(reclaimer(), client.all_ended(1));
    let (ended, reclaimed) = drive(&clock, future::join(node, reclaim));
    assert!(matches!(ended, future::Either::Right(_)), "the worker's node crashed");
    let reclaimed = reclaimed.unwrap();
    assert_eq!((reclaimed.fenced, reclaimed.adopted), (1, 1), "{reclaimed:?}");
    // One process's figures: its crashing worker's clone and its reclaimer count into one.
    let seen = runtime.metrics().snapshot();
    let figures = (seen.grants, seen.reclaims, seen.adoptions, seen.effect_seconds.count, seen.self_fences);
    assert_eq!(figures, (1, 1, 1, 1, 0), "{seen:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the effect ran once");
    let output = output_id(&output_bytes(JobId(0), 1));
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!((terminal.outcome, terminal.epoch), (Outcome::Completed { output }, Epoch(2)));
    assert_eq!(client.ledger(|ledger| ledger.recorded(OpId::for_job(JobId(0)))), Some(output));
}

/// A hook that writes down every point passed, and stalls the node at one point of one epoch.
struct Recording {
    clock: ManualClock,
    points: Mutex<Vec<(Node, Point)>>,
    stall: Option<(Point, Span)>,
}

impl Hook for Recording {
    fn at(&self, node: Node, point: Point, _job: Option<JobId>) -> BoxFuture<'static, ()> {
        let mut points = self.points.lock().unwrap();
        points.push((node, point));
        let first = points.iter().filter(|(_, seen)| *seen == point).count() == 1;
        match self.stall.filter(|(at, _)| *at == point && first) {
            Some((_, len)) => self.clock.sleep_until(self.clock.now() + len),
            None => Box::pin(future::ready(())),
        }
    }
}

// Proves the hook is passed at the protocol points, in the protocol's order, for one job that a
// worker runs for a second (so it heartbeats) while a reclaimer scans: the worker passes
// before_effect, then before_renew and before_renew_reply per heartbeat, then after_effect and
// during_ack; the reclaimer passes before_listing on every scan, and no point of a reclaim.
#[test]
fn the_hook_is_passed_at_each_protocol_point_in_order() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let hook = Arc::new(Recording { clock: clock.clone(), points: Mutex::default(), stall: None });
    let handler = {
        let clock = clock.clone();
        move |job: Job| {
            let clock = clock.clone();
            async move {
                clock.sleep_until(clock.now() + Span::from_secs(1)).await;
                Ok(output_bytes(job.id, 1))
            }
        }
    };
    let runtime = runtime(&clock, &client).with_hook(hook.clone());
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, client.all_ended(1));
    let reclaim = runtime.reclaim(reclaimer(), client.all_ended(1));
    let (worked, reclaimed) = drive(&clock, future::join(work, reclaim));
    assert_eq!(worked.unwrap().completed, 1);
    assert!(reclaimed.unwrap().scans >= 4, "a scan every 250 ms for a second");
    let points = hook.points.lock().unwrap();
    let worker: Vec<Point> = points.iter().filter(|(node, _)| *node == Node::Worker(0)).map(|(_, p)| *p).collect();
    use Point::{AfterEffect, BeforeEffect, BeforeLine, BeforeRenew, BeforeRenewReply, DuringAck};
    let beats = [BeforeRenew, BeforeRenewReply].repeat(3);
    let expected: Vec<Point> = [vec![BeforeLine, BeforeEffect], beats, vec![AfterEffect, DuringAck]].concat();
    assert_eq!(worker, expected, "the worker's points");
    let reclaimer: Vec<Point> =
        points.iter().filter(|(node, _)| *node == Node::Reclaimer(0)).map(|(_, p)| *p).collect();
    assert!(reclaimer.iter().all(|point| *point == Point::BeforeListing), "{reclaimer:?}");
}

// Proves a stall between the decision and the effect that outlives the lease records nothing
// under the lost lease: the machine takes the time, writes `executing` under epoch 1 and passes
// before_effect, where the node stalls for 2 s on a 1 s lease (a process paused between its last
// check and the dependency call). The handler then starts late, under epoch 1 (an effect that only
// a fenced dependency could refuse), and returns at once; the machine, taking the time before it
// takes the output, has self-fenced, so the output is not recorded. The reclaimer requeues the
// expired lease and the grant after it (epoch 3) runs the job and records the one output.
#[test]
fn a_stall_after_the_decision_past_the_lease_records_nothing_under_it() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let stall = Some((Point::BeforeEffect, Span::from_secs(2)));
    let hook = Arc::new(Recording { clock: clock.clone(), points: Mutex::default(), stall });
    let epochs: Arc<Mutex<Vec<Epoch>>> = Arc::default();
    let handler = {
        let epochs = Arc::clone(&epochs);
        move |job: Job| {
            epochs.lock().unwrap().push(job.epoch);
            async move { Ok(output_bytes(job.id, 1)) }
        }
    };
    let work = runtime(&clock, &client).with_hook(hook).work(
        WorkerOptions::new(slots(1), worker_config()),
        handler,
        client.all_ended(1),
    );
    let reclaim = runtime(&clock, &client).reclaim(reclaimer(), client.all_ended(1));
    let (worked, reclaimed) = drive(&clock, future::join(work, reclaim));
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    assert_eq!(*epochs.lock().unwrap(), vec![Epoch(1), Epoch(3)], "the stalled handler started late, under epoch 1");
    assert_eq!((worked.handled, worked.abandoned, reclaimed.fenced), (2, 1, 1), "{worked:?} {reclaimed:?}");
    let executing: Vec<Epoch> = client.seen(|seen| {
        seen.lines
            .iter()
            .filter_map(|(_, event)| if let Event::Executing { epoch, .. } = event { Some(*epoch) } else { None })
            .collect()
    });
    assert_eq!(executing, vec![Epoch(1), Epoch(3)], "each effect decided under a live lease");
    let recorded: Vec<Epoch> = client.seen(|seen| seen.records.iter().map(|(_, epoch, _, _)| *epoch).collect());
    assert_eq!(recorded, vec![Epoch(3)], "nothing recorded under the lost lease");
    assert!(client.table(|table| table.terminal(JobId(0)).is_some()));
}

// Proves a handler timeout bounds a hung handler that heartbeats would otherwise carry forever:
// with a 2 s limit, the first run hangs (its lease renewed all along), is cancelled at the limit
// and the job requeued by the worker itself, its attempt counted; the second run completes it.
// No reclaim was needed: the lease was never lost.
#[test]
fn a_handler_past_its_timeout_is_cancelled_and_its_job_requeued() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let cancels: Arc<Mutex<Vec<Cancel>>> = Arc::default();
    let handler = {
        let cancels = Arc::clone(&cancels);
        move |job: Job| {
            cancels.lock().unwrap().push(job.cancel.clone());
            async move {
                if job.epoch == Epoch(1) {
                    future::pending::<()>().await;
                }
                Ok(output_bytes(job.id, 2))
            }
        }
    };
    let runtime = runtime(&clock, &client);
    let options =
        WorkerOptions { handler_timeout: Some(Span::from_secs(2)), ..WorkerOptions::new(slots(1), worker_config()) };
    let work = runtime.work(options, handler, client.all_ended(1));
    let reclaim = runtime.reclaim(reclaimer(), client.all_ended(1));
    let (worked, reclaimed) = drive(&clock, future::join(work, reclaim));
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    let cancels = cancels.lock().unwrap();
    assert_eq!(cancels.len(), 2, "a second run");
    assert!(cancels[0].is_cancelled() && !cancels[1].is_cancelled());
    assert_eq!((worked.cancelled, worked.abandoned, reclaimed.fenced), (1, 0, 0), "{worked:?} {reclaimed:?}");
    assert!(client.seen(|seen| seen.renewed) >= 6, "the hung run's lease was renewed until the limit");
    assert_eq!(client.table(|table| table.attempts(JobId(0))), Some(2));
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!(
        (terminal.outcome, terminal.epoch),
        (Outcome::Completed { output: output_id(&output_bytes(JobId(0), 2)) }, Epoch(2))
    );
}

// Proves the machine takes the time before anything is recorded: the first lease's renewals are
// lost, and its handler ends exactly at its deadline (the local estimate of expiry less the
// margin, 800 ms), when the lease has not yet expired by the table's clock (1 s). The runtime
// self-fences first and records nothing under epoch 1, though the ledger and the table would
// still have taken it; a reclaim and a second run complete the job. Fails if the output of a
// handler that ended at its deadline is recorded.
#[test]
fn a_handler_ending_at_its_deadline_records_nothing() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    client.plant(|faults| faults.lose_renewals_of = Some((JobId(0), Epoch(1))));
    let handler = {
        let clock = clock.clone();
        move |job: Job| {
            let clock = clock.clone();
            async move {
                if job.epoch == Epoch(1) {
                    assert_eq!(job.deadline(), Time(800_000));
                    clock.sleep_until(job.deadline()).await;
                }
                Ok(output_bytes(job.id, job.epoch.0))
            }
        }
    };
    let runtime = runtime(&clock, &client);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, client.all_ended(1));
    let reclaim = runtime.reclaim(reclaimer(), client.all_ended(1));
    let (worked, reclaimed) = drive(&clock, future::join(work, reclaim));
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    assert_eq!((worked.handled, worked.abandoned, reclaimed.fenced), (2, 1, 1), "{worked:?} {reclaimed:?}");
    let epochs = client.seen(|seen| seen.records.iter().map(|record| record.1).collect::<Vec<_>>());
    assert_eq!(epochs, vec![Epoch(3)], "nothing recorded under the first lease");
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!(terminal.outcome, Outcome::Completed { output: output_id(&output_bytes(JobId(0), 3)) });
}

/// A fenced dependency on the in-memory ledger: it performs the effect and records its output
/// (`7000 + epoch`) under the caller's epoch itself, as one write, and answers the ledger's verdict.
/// Under `rival`'s epoch, a newer epoch has raised the operation's fence first (as a reclaimer's
/// lookup does).
fn fenced_dependency(
    client: &MemoryClient,
    rival: Option<Epoch>,
    calls: &Arc<AtomicU64>,
) -> impl lease_runtime::Handler {
    let (client, calls) = (client.clone(), Arc::clone(calls));
    move |job: Job| {
        calls.fetch_add(1, Ordering::SeqCst);
        let output = OutputId(7_000 + job.epoch.0);
        let apply = client.ledger_mut(|ledger| {
            if rival == Some(job.epoch) {
                let _looked = ledger.lookup(job.op, Epoch(job.epoch.0 + 1));
            }
            ledger.apply(job.op, job.epoch, output)
        });
        async move { Ok(Output::Recorded { output, apply }) }
    }
}

// Proves a fenced dependency's applied output completes the job without a record call: the
// handler's dependency records its output under epoch 1 itself and answers `applied`; the runtime
// sends nothing to the ledger, passes after_effect (the ledger accepted the effect), and the
// machine completes with that output under epoch 1. Fails if the runtime records the output again
// or ignores the dependency's answer.
#[test]
fn a_fenced_dependencys_applied_output_completes_without_a_record_call() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let calls = Arc::new(AtomicU64::new(0));
    let hook = Arc::new(Recording { clock: clock.clone(), points: Mutex::default(), stall: None });
    let runtime = runtime(&clock, &client).with_hook(hook.clone());
    let handler = fenced_dependency(&client, None, &calls);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, client.all_ended(1));
    let worked = drive(&clock, work).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the dependency was called once");
    assert_eq!((worked.handled, worked.recorded, worked.completed), (1, 0, 1), "{worked:?}");
    assert!(client.seen(|seen| seen.records.is_empty()), "no record call");
    assert!(hook.points.lock().unwrap().contains(&(Node::Worker(0), Point::AfterEffect)), "after_effect passed");
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!((terminal.outcome, terminal.epoch), (Outcome::Completed { output: OutputId(7_001) }, Epoch(1)));
}

// Proves a fenced dependency's `fenced` answer makes the worker abandon, and nothing completes
// under that epoch: under epoch 1 a newer epoch has raised the operation's fence before the
// dependency's write, which the ledger refuses (`fenced`); the worker abandons the lease
// (effect_fenced) without completing or recording, no after_effect is passed, the lease expires,
// a reclaimer requeues it (nothing recorded), and the dependency's write under epoch 3 completes
// the job. Fails if the runtime completes on a fenced answer.
#[test]
fn a_fenced_dependencys_fenced_answer_abandons_and_nothing_completes_under_its_epoch() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let calls = Arc::new(AtomicU64::new(0));
    let hook = Arc::new(Recording { clock: clock.clone(), points: Mutex::default(), stall: None });
    let runtime = runtime(&clock, &client).with_hook(hook.clone());
    let handler = fenced_dependency(&client, Some(Epoch(1)), &calls);
    let work = runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, client.all_ended(1));
    let reclaim = runtime.reclaim(reclaimer(), client.all_ended(1));
    let (worked, reclaimed) = drive(&clock, future::join(work, reclaim));
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    assert_eq!(calls.load(Ordering::SeqCst), 2, "a second run after the reclaim");
    assert_eq!((worked.handled, worked.recorded, worked.abandoned), (2, 0, 1), "{worked:?}");
    assert_eq!((reclaimed.fenced, reclaimed.adopted), (1, 0), "{reclaimed:?}");
    let abandoned = client.seen(|seen| {
        seen.lines.iter().any(|line| matches!(line, (Node::Worker(0), Event::Abandoned { epoch: Epoch(1), .. })))
    });
    assert!(abandoned, "the worker abandoned the fenced lease");
    let after_effect = hook.points.lock().unwrap().iter().filter(|(_, point)| *point == Point::AfterEffect).count();
    assert_eq!(after_effect, 1, "after_effect only for the applied effect, under epoch 3");
    assert_eq!(client.ledger(|ledger| ledger.recorded(OpId::for_job(JobId(0)))), Some(OutputId(7_003)));
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!((terminal.outcome, terminal.epoch), (Outcome::Completed { output: OutputId(7_003) }, Epoch(3)));
    assert_eq!(client.table(|table| table.attempts(JobId(0))), Some(2));
}

// Proves during_ack holds the acknowledgement before the table has it: the worker stalls there
// for 2 s on a 1 s lease, its effect applied and its completion unsent; the lease expires, a
// reclaimer fences it and adopts the recorded output under epoch 2, and the worker's completion,
// sent when it wakes, is refused by its stale epoch. The job ends once, under epoch 2, with the
// worker's one output. Fails if the point is passed after the completion was answered (the job
// would end under epoch 1, and the stall would hold nothing).
#[test]
fn a_stall_during_the_ack_holds_the_completion_past_the_lease_for_the_table_to_refuse() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let stall = Some((Point::DuringAck, Span::from_secs(2)));
    let hook = Arc::new(Recording { clock: clock.clone(), points: Mutex::default(), stall });
    let handler = |job: Job| async move { Ok(output_bytes(job.id, 1)) };
    let work = runtime(&clock, &client).with_hook(hook).work(
        WorkerOptions::new(slots(1), worker_config()),
        handler,
        client.all_ended(1),
    );
    let reclaim = runtime(&clock, &client).reclaim(reclaimer(), client.all_ended(1));
    let (worked, reclaimed) = drive(&clock, future::join(work, reclaim));
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    assert_eq!((worked.handled, worked.completed), (1, 0), "{worked:?}");
    assert_eq!((reclaimed.fenced, reclaimed.adopted), (1, 1), "{reclaimed:?}");
    let output = output_id(&output_bytes(JobId(0), 1));
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!((terminal.outcome, terminal.epoch), (Outcome::Completed { output }, Epoch(2)));
}

// Proves the worker runtime refuses slots it cannot drive, with the error that says why, and
// asks the table nothing first: no slot, more than SLOTS_MAX, or one worker id for two slots
// (the table would take their acquires for one worker's). SLOTS_MAX distinct slots, and one, run.
#[test]
fn unworkable_slots_are_refused_before_anything_is_asked() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let runtime = runtime(&clock, &client);
    let handler = |job: Job| future::ready(Ok(output_bytes(job.id, 1)));
    let refused = |slots: Vec<WorkerId>| {
        let options = WorkerOptions::new(slots, worker_config());
        drive(&clock, runtime.work(options, handler, future::ready(()))).expect_err("refused")
    };
    let max = lease_runtime::SLOTS_MAX;
    assert!(matches!(refused(Vec::new()), OptionsError::Slots { count: 0 }));
    let too_many = (0..=max as u32).map(WorkerId).collect();
    assert!(matches!(refused(too_many), OptionsError::Slots { count } if count == max + 1));
    let twice = vec![WorkerId(3), WorkerId(1), WorkerId(3)];
    assert_eq!(refused(twice), OptionsError::SlotTwice(WorkerId(3)));
    assert_eq!(client.states(1), [JobState::Queued], "nothing was acquired");
    for count in [1, max as u32] {
        let options = WorkerOptions::new(slots(count), worker_config());
        let ran = drive(&clock, runtime.work(options, handler, future::ready(())));
        assert!(ran.is_ok(), "{count} slots run: {ran:?}");
    }
}

// Proves a grant that answers an acquire the machine gave up on is declined, not left to expire:
// the first acquire's answers arrive 700 ms after the table granted (a slow store, a queue behind
// the connection). The machine sends the acquire again under its id at 200 and 400 ms, gives it
// up at 600 ms (a grant answering a copy sent then would leave no renewal's round trip before the
// self-fence) and asks afresh; the first answer, G1, arrives at 700 ms, and the runtime hands it
// to the machine, which releases it: no reclaim, no attempt spent on a grant nobody ran. A runtime
// that dropped the late answer with its call (bounded by the request's timeout) would leave G1
// leased until it expired, a reclaimer would fence and requeue it, and the job's attempt would be
// wasted.
#[test]
fn a_late_grant_to_an_acquire_given_up_is_declined_not_left_to_expire() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    client.plant(|faults| {
        faults.delay_acquire_answers = Some(Span::from_ms(700));
        faults.delayed_acquires = Some(3); // The acquire at 0 ms and its copies at 200 and 400 ms.
    });
    let handler = |job: Job| future::ready(Ok(output_bytes(job.id, 1)));
    let runtime = runtime(&clock, &client);
    let options = WorkerOptions::new(slots(1), worker_config());
    let work = runtime.work(options, handler, client.all_ended(1));
    let reclaim = runtime.reclaim(reclaimer(), client.all_ended(1));
    let (worked, reclaimed) = drive(&clock, future::join(work, reclaim));
    let (worked, reclaimed) = (worked.unwrap(), reclaimed.unwrap());
    assert_eq!(reclaimed.fenced, 0, "the late grant was handed back, not reclaimed: {reclaimed:?}");
    assert!(worked.released >= 1, "the late grant was released: {worked:?}");
    let declined = client
        .seen(|seen| seen.lines.iter().any(|(_, event)| matches!(event, Event::Abandoned { epoch: Epoch(1), .. })));
    assert!(declined, "the worker said it declined the grant under epoch 1");
    assert_eq!(client.table(|table| table.attempts(JobId(0))), Some(1), "one attempt, the one that ran");
    assert!(matches!(client.states(1)[0], JobState::Terminal(_)), "{:?}", client.states(1));
}

/// A `tracing` writer that keeps what it is given, for a test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// Proves a quarantine is the alert an operator sees: a worker leased job 0 and died, and two
// different outputs were recorded for its operation (a dependency that is not idempotent). The
// reclaimer fences the expired lease, finds the conflict and quarantines the job; the runtime logs
// it once at `error`, naming the job and both output identities. Fails if the log is dropped,
// written at a lower level, or names one identity only.
#[test]
fn a_quarantine_is_logged_at_error_with_both_identities() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let lease = client.table_mut(|table, now| match table.acquire(now, WorkerId(9)).unwrap() {
        lease_core::Acquired::Granted(grant) => grant.lease,
        other => panic!("job 0 is granted: {other:?}"),
    });
    let (recorded, rival) = (OutputId(0xa11ce), OutputId(0xb0b));
    client.ledger_mut(|ledger| {
        let op = OpId::for_job(JobId(0));
        let _ = ledger.apply(op, lease.epoch, recorded);
        let _ = ledger.apply(op, lease.epoch, rival);
    });
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let runtime = runtime(&clock, &client);
    let tally = tracing::subscriber::with_default(subscriber, || {
        drive(&clock, runtime.reclaim(reclaimer(), client.all_ended(1))).unwrap()
    });
    assert_eq!(tally.stopped, 1, "{tally:?}");
    assert_eq!(runtime.metrics().snapshot().quarantines, 1, "counted for the dashboard too");
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert!(matches!(terminal.outcome, Outcome::Quarantined { .. }), "{terminal:?}");
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let alerts: Vec<&str> = logs.lines().filter(|line| line.contains("quarantined")).collect();
    assert_eq!(alerts.len(), 1, "one alert: {logs}");
    let alert = alerts[0];
    assert!(alert.contains("ERROR"), "at error: {alert}");
    for needle in ["job j0", "0x00000000000a11ce", "0x0000000000000b0b", "recorded=659918", "rival=2827"] {
        assert!(alert.contains(needle), "names {needle}: {alert}");
    }
}

// Proves a wave's adoptions are written as one batch of lines: four workers leased jobs 0 to 3,
// recorded each one's output and died. The reclaimer (waves of four) fences the four expired
// leases together, finds the four outputs and adopts them: its four `adopted` lines go to the
// store in one call, before the completions, where each alone waited its turn at a busy store
// (32 adoptions took 375 ms on PostgreSQL). Fails if any `adopted` line is written alone.
#[test]
fn a_wave_writes_its_adoptions_in_one_batch_of_lines() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(4);
    for worker in 0..4 {
        let lease = client.table_mut(|table, now| match table.acquire(now, WorkerId(worker)).unwrap() {
            lease_core::Acquired::Granted(grant) => grant.lease,
            other => panic!("a job is granted: {other:?}"),
        });
        client.ledger_mut(|ledger| ledger.apply(OpId::for_job(lease.job), lease.epoch, OutputId(100 + lease.job.0)));
    }
    let runtime = runtime(&clock, &client);
    let tally = drive(&clock, runtime.reclaim(reclaimer(), client.all_ended(4))).unwrap();
    assert_eq!((tally.fenced, tally.adopted), (4, 4), "{tally:?}");
    let batches = client.seen(|seen| seen.line_batches.clone());
    let adopted = |event: &Event| matches!(event, Event::Adopted { .. });
    let adoptions: Vec<usize> =
        batches.iter().map(|batch| batch.iter().filter(|event| adopted(event)).count()).filter(|&n| n > 0).collect();
    assert_eq!(adoptions, vec![4], "one batch of four adoptions: {batches:?}");
    let alone = client.seen(|seen| seen.lines.iter().filter(|(_, event)| adopted(event)).count());
    assert_eq!(alone, 4, "and no adopted line besides them");
    for job in 0..4 {
        let terminal = client.table(|table| *table.terminal(JobId(job)).unwrap());
        assert_eq!(terminal.outcome, Outcome::Completed { output: OutputId(100 + job) }, "{terminal:?}");
    }
}

// Proves an effect starts only once its `executing` line is known written: the store fails the
// first two `executing` lines of job 0. The handler is not called for them; the machine sends
// its execute again, the third line is written, and only then does the handler run, once. The
// written `executing` line comes before the output's record, and the job completes with it.
// Fails if the runtime runs the handler although its line was lost (the history would show an
// effect it never announced).
#[test]
fn an_effect_starts_only_once_its_executing_line_is_written() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    client.plant(|faults| faults.fail_executing_lines = 2);
    let calls = Arc::new(AtomicU64::new(0));
    let lines_at_call = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let (calls, lines_at_call, client) = (Arc::clone(&calls), Arc::clone(&lines_at_call), client.clone());
        move |job: Job| {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            let executing = client
                .seen(|seen| seen.lines.iter().filter(|(_, event)| matches!(event, Event::Executing { .. })).count());
            lines_at_call.lock().unwrap().push(executing);
            async move { Ok(output_bytes(job.id, call)) }
        }
    };
    let runtime = runtime(&clock, &client);
    let worked =
        drive(&clock, runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, client.all_ended(1)));
    assert_eq!(worked.unwrap().handled, 1, "one handler call");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(*lines_at_call.lock().unwrap(), [1], "after its one written executing line");
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!(terminal.outcome, Outcome::Completed { output: output_id(&output_bytes(JobId(0), 1)) });
}

/// The requests of each batch the client saw, by kind: (acquires, renewals, completions), the
/// largest batch of each.
fn largest_batches(client: &MemoryClient) -> (usize, usize, usize) {
    client.seen(|seen| {
        let mut largest = (0, 0, 0);
        for batch in &seen.batches {
            let kind = std::mem::discriminant(&batch[0]);
            assert!(batch.iter().all(|r| std::mem::discriminant(r) == kind), "one kind per batch: {batch:?}");
            assert!(batch.len() >= 2 && batch.len() <= 8, "a batch is 2 to `batch` requests: {batch:?}");
            let slot = match batch[0] {
                WorkerRequest::Acquire => &mut largest.0,
                WorkerRequest::Renew { .. } => &mut largest.1,
                WorkerRequest::Complete { .. } => &mut largest.2,
                _ => continue,
            };
            *slot = (*slot).max(batch.len());
        }
        largest
    })
}

// Proves the batched loop: eight slots, batches of eight, sixteen jobs whose handlers each take
// three lease ttls. The slots' acquires at one turn go out as one call, the heartbeats of the
// leases granted together as one call, their completions as one call; every job is handled and
// completed once, its output recorded once under epoch 1, and nothing is abandoned. Fails if the
// runtime sends batched requests one by one, mixes kinds in a batch, or hands a batch's answers
// to the wrong machines (a grant to a slot that did not ask, a renewal answer to another lease).
#[test]
fn batched_slots_acquire_renew_and_complete_in_one_call_each() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(16);
    let handler = {
        let clock = clock.clone();
        move |job: Job| {
            let clock = clock.clone();
            async move {
                clock.sleep_until(clock.now() + Span::from_secs(3)).await;
                Ok(output_bytes(job.id, 1))
            }
        }
    };
    let runtime = runtime(&clock, &client);
    let options = WorkerOptions { batch: 8, ..WorkerOptions::new(slots(8), worker_config()) };
    let worked = drive(&clock, runtime.work(options, handler, client.all_ended(16))).unwrap();
    assert_eq!((worked.handled, worked.completed, worked.abandoned), (16, 16, 0), "{worked:?}");
    assert_eq!(largest_batches(&client), (8, 8, 8), "acquires, renewals and completions of eight at once");
    let records = client.seen(|seen| seen.records.clone());
    assert_eq!(records.len(), 16, "one record per job: {records:?}");
    for job in 0..16 {
        let output = output_id(&output_bytes(JobId(job), 1));
        let terminal = client.table(|table| *table.terminal(JobId(job)).unwrap());
        assert_eq!((terminal.outcome, terminal.epoch), (Outcome::Completed { output }, Epoch(1)), "job {job}");
    }
    assert!(clock.now() < Time(7_000_000), "two rounds of eight, not sixteen in turn: {}", clock.now());
}

// Proves each lease of a batched renewal is judged alone: four slots, batches of four, four
// jobs whose handlers take three ttls. At 500 ms another process requeues job 0's lease (epoch
// 1) beside the runtime, so the next batched renewal names one lease the slot no longer holds:
// that renewal alone is refused, its slot abandons the lease and cancels its handler (nothing is
// recorded under epoch 1), and the three other leases are renewed in the same call and complete
// under epoch 1. Job 0 is granted again (epoch 2) and completes once. Fails if a refusal in a
// batch is applied to its neighbours, or if the stale slot goes on under the lost lease.
#[test]
fn a_renewal_batch_refuses_a_lease_taken_meanwhile_alone() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(4);
    let handler = {
        let clock = clock.clone();
        move |job: Job| {
            let clock = clock.clone();
            async move {
                clock.sleep_until(clock.now() + Span::from_secs(3)).await;
                Ok(output_bytes(job.id, job.epoch.0))
            }
        }
    };
    let runtime = runtime(&clock, &client);
    let options = WorkerOptions { batch: 4, ..WorkerOptions::new(slots(4), worker_config()) };
    let taken = {
        let (clock, client) = (clock.clone(), client.clone());
        async move {
            clock.sleep_until(Time(500_000)).await;
            let requeued = client.table_mut(|table, now| table.requeue(now, JobId(0), Epoch(1)).unwrap());
            assert!(matches!(requeued, lease_core::Requeue::Requeued { .. }), "{requeued:?}");
        }
    };
    let (worked, ()) = drive(&clock, future::join(runtime.work(options, handler, client.all_ended(4)), taken));
    let worked = worked.unwrap();
    assert_eq!((worked.abandoned, worked.cancelled), (1, 1), "job 0's first lease alone: {worked:?}");
    assert_eq!((worked.handled, worked.completed), (5, 4), "{worked:?}");
    let stale = WorkerRequest::Renew { job: JobId(0), epoch: Epoch(1) };
    let mixed = client.seen(|seen| seen.batches.iter().any(|batch| batch.len() == 4 && batch.contains(&stale)));
    assert!(mixed, "a renewal batch named the lease taken meanwhile beside three held ones");
    let records = client.seen(|seen| seen.records.iter().map(|r| (r.0.job, r.1)).collect::<Vec<_>>());
    assert!(!records.contains(&(JobId(0), Epoch(1))), "nothing recorded under the lost lease: {records:?}");
    for job in 0..4 {
        let epoch = if job == 0 { Epoch(2) } else { Epoch(1) };
        let output = output_id(&output_bytes(JobId(job), epoch.0));
        let terminal = client.table(|table| *table.terminal(JobId(job)).unwrap());
        assert_eq!((terminal.outcome, terminal.epoch), (Outcome::Completed { output }, epoch), "job {job}");
    }
}

// Proves the batched start keeps the same promise: two slots, batches of two, two jobs; the
// store fails the first `executing` line of the two written together. Neither effect starts on
// that call (the line not known written could be either's); both executes are sent again, their
// lines written, and each handler runs once, after its own job's line. Fails if a batch's
// effects start although one of its lines was lost.
#[test]
fn batched_effects_start_only_once_their_executing_lines_are_written() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(2);
    client.plant(|faults| faults.fail_executing_lines = 1);
    let announced: Arc<Mutex<Vec<(JobId, usize)>>> = Arc::default();
    let handler = {
        let (announced, client) = (Arc::clone(&announced), client.clone());
        move |job: Job| {
            let lines = client.seen(|seen| {
                seen.lines
                    .iter()
                    .filter(|(_, event)| matches!(event, Event::Executing { job: j, .. } if *j == job.id))
                    .count()
            });
            announced.lock().unwrap().push((job.id, lines));
            async move { Ok(output_bytes(job.id, 1)) }
        }
    };
    let runtime = runtime(&clock, &client);
    let options = WorkerOptions { batch: 2, ..WorkerOptions::new(slots(2), worker_config()) };
    let worked = drive(&clock, runtime.work(options, handler, client.all_ended(2))).unwrap();
    assert_eq!((worked.handled, worked.completed), (2, 2), "{worked:?}");
    let mut announced = announced.lock().unwrap().clone();
    announced.sort();
    assert_eq!(announced.len(), 2, "one handler call per job: {announced:?}");
    assert!(announced.iter().all(|&(_, lines)| lines >= 1), "each after its own line: {announced:?}");
    let written = client.seen(|seen| seen.lines.iter().filter(|(_, e)| matches!(e, Event::Executing { .. })).count());
    assert_eq!(written, 3, "one line lost, one written in vain, then both again");
}

// Proves a failure is requeued only once its line is written: the handler fails (retryable) on
// its first call, and the store fails that `dependency_failed` line (a connection cut, as the
// PostgreSQL cut test once met). The job is not requeued then, which the history could not
// explain: the machine sends its execute again, the handler runs again and succeeds, and the job
// completes under its first lease, its attempt never spent. Every requeue the table made comes
// after a written failure line.
#[test]
fn a_failure_whose_line_is_lost_is_not_requeued_unexplained() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    client.plant(|faults| faults.fail_failure_lines = 1);
    let calls = Arc::new(AtomicU64::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        move |job: Job| {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if call == 1 {
                    return Err(lease_runtime::HandlerError::Retryable("the first call fails".to_string()));
                }
                Ok(output_bytes(job.id, call))
            }
        }
    };
    let runtime = runtime(&clock, &client);
    let worked =
        drive(&clock, runtime.work(WorkerOptions::new(slots(1), worker_config()), handler, client.all_ended(1)));
    assert_eq!(worked.unwrap().handled, 2, "the handler ran again");
    let failures =
        client.seen(|seen| seen.lines.iter().filter(|(_, e)| matches!(e, Event::DependencyFailed { .. })).count());
    assert_eq!(failures, 0, "the one failure line was lost");
    let terminal = client.table(|table| *table.terminal(JobId(0)).unwrap());
    assert_eq!(
        (terminal.outcome, terminal.epoch),
        (Outcome::Completed { output: output_id(&output_bytes(JobId(0), 2)) }, Epoch(1))
    );
    assert_eq!(client.table(|table| table.attempts(JobId(0))), Some(1), "no attempt spent on a requeue");
}

// Proves the linger (River's completer: a batch that is not full waits a moment for more): eight
// slots, batches of eight, eight jobs granted together whose handlers end 10 ms apart (3 s, then
// 3.01 s, ... 3.07 s). With a linger of 100 ms (half the request timeout, the most allowed), the
// outputs wait for one another and the eight completions leave as one call; without it, each
// handler's end is a turn of its own, and no completion batch reaches eight (the control run, so
// the assertion can fail). Every job still completes once under epoch 1. A linger past half the
// request timeout is refused before anything is asked.
#[test]
fn a_linger_gathers_ends_that_come_apart_into_one_batch() {
    let run = |linger: Span| {
        let clock = ManualClock::default();
        let client = MemoryClient::new(&clock);
        client.enqueue(8);
        let handler = {
            let clock = clock.clone();
            move |job: Job| {
                let clock = clock.clone();
                async move {
                    clock.sleep_until(clock.now() + Span::from_ms(3_000 + 10 * job.id.0)).await;
                    Ok(output_bytes(job.id, 1))
                }
            }
        };
        let runtime = runtime(&clock, &client);
        let options = WorkerOptions { batch: 8, linger, ..WorkerOptions::new(slots(8), worker_config()) };
        let worked = drive(&clock, runtime.work(options, handler, client.all_ended(8))).unwrap();
        assert_eq!((worked.handled, worked.completed, worked.abandoned), (8, 8, 0), "{worked:?}");
        for job in 0..8 {
            let terminal = client.table(|table| *table.terminal(JobId(job)).unwrap());
            assert_eq!(terminal.epoch, Epoch(1), "job {job}");
        }
        largest_batches(&client).2
    };
    assert_eq!(run(Span::from_ms(100)), 8, "the eight completions leave together");
    assert!(run(Span::ZERO) < 8, "without a linger, ends 10 ms apart leave apart");
    let options =
        WorkerOptions { batch: 8, linger: Span::from_ms(101), ..WorkerOptions::new(slots(8), worker_config()) };
    let refused = refused_before_asking(options);
    assert!(matches!(refused, OptionsError::Linger { .. }), "{refused:?}");
}

// Proves that a batch that is not full leaves at once when nothing more of its kind can come:
// eight slots, batches of eight, a linger of 100 ms, and three jobs whose handlers all end at
// 3 s. The eight acquires leave together; the five slots granted nothing hold no job, so no effect,
// record or completion can join the three: their `executing` lines leave at once (the handlers
// start at 0 s), then at 3 s the records, then the completions, and the jobs end at 3 s.
// (Lingering at each step, the handlers started 100 ms late and the jobs ended 200 ms after them:
// the last jobs of every burst waited so.) That the linger still gathers ends while more can come
// is `a_linger_gathers_ends_that_come_apart_into_one_batch`.
#[test]
fn a_batch_that_nothing_more_can_join_leaves_without_lingering() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(3);
    let started_last = Arc::new(AtomicU64::new(0));
    let handler = {
        let (clock, started_last) = (clock.clone(), Arc::clone(&started_last));
        move |job: Job| {
            let clock = clock.clone();
            started_last.fetch_max(clock.now().0, Ordering::SeqCst);
            async move {
                clock.sleep_until(Time(3_000_000)).await;
                Ok(output_bytes(job.id, 1))
            }
        }
    };
    // Until the three have ended, looked at every millisecond: when they did.
    let ended_at = Arc::new(AtomicU64::new(0));
    let shutdown = {
        let (client, clock, ended_at) = (client.clone(), clock.clone(), Arc::clone(&ended_at));
        async move {
            while !client.table(|table| (0..3).all(|job| table.terminal(JobId(job)).is_some())) {
                clock.sleep_until(clock.now() + Span::from_ms(1)).await;
            }
            ended_at.store(clock.now().0, Ordering::SeqCst);
        }
    };
    let runtime = runtime(&clock, &client);
    let options =
        WorkerOptions { batch: 8, linger: Span::from_ms(100), ..WorkerOptions::new(slots(8), worker_config()) };
    let worked = drive(&clock, runtime.work(options, handler, shutdown)).unwrap();
    assert_eq!((worked.handled, worked.completed), (3, 3), "{worked:?}");
    let started_last = started_last.load(Ordering::SeqCst);
    assert!(started_last < 100_000, "the last handler started at {started_last} us, a linger after its grant");
    let ended_at = ended_at.load(Ordering::SeqCst);
    assert!(ended_at < 3_000_000 + 100_000, "the jobs ended at {ended_at} us, a linger after their handlers");
    let completions = client.seen(|seen| {
        seen.batches
            .iter()
            .filter(|batch| matches!(batch[0], WorkerRequest::Complete { .. }))
            .map(Vec::len)
            .collect::<Vec<_>>()
    });
    assert_eq!(completions, [3], "the three completions leave together");
}

// Proves a lookup leaves at once when no acquire is out that could bring another, and the first
// attempts' effects beside it wait for it: job 0, requeued once by a worker outside the test, is
// granted again with jobs 1 and 2 (8 slots, batches of 8, a 100 ms linger). Its lookup leaves at
// once, and the three handlers start together at once. (Lookups lingered before: the lookup
// left 100 ms after the grant, and the effects beside it, which wait for it, with it.)
#[test]
fn a_lookup_that_nothing_more_can_join_leaves_without_lingering() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    client.table_mut(|table, now| {
        let Ok(lease_core::Acquired::Granted(grant)) = table.acquire(now, WorkerId(99)) else {
            panic!("job 0 is granted")
        };
        let requeued = table.requeue(now, JobId(0), grant.lease.epoch).expect("and requeued");
        assert!(matches!(requeued, lease_core::Requeue::Requeued { attempts: 1 }), "{requeued:?}");
        for job in 1..3 {
            let enqueued = table.enqueue(now, JobId(job)).expect("enqueued");
            assert!(matches!(enqueued, lease_core::Enqueued::Accepted { .. }), "{enqueued:?}");
        }
    });
    let started = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let (clock, started) = (clock.clone(), Arc::clone(&started));
        move |job: Job| {
            started.lock().unwrap().push((job.id, job.epoch, clock.now()));
            future::ready(Ok(output_bytes(job.id, 1)))
        }
    };
    let runtime = runtime(&clock, &client);
    let options =
        WorkerOptions { batch: 8, linger: Span::from_ms(100), ..WorkerOptions::new(slots(8), worker_config()) };
    let worked = drive(&clock, runtime.work(options, handler, client.all_ended(3))).unwrap();
    assert_eq!((worked.handled, worked.completed), (3, 3), "{worked:?}");
    let started = started.lock().unwrap().clone();
    assert!(
        started.iter().any(|&(job, epoch, _)| job == JobId(0) && epoch > Epoch(1)),
        "job 0 ran on its second grant, after a lookup: {started:?}"
    );
    assert!(started.iter().all(|&(.., at)| at == started[0].2), "the handlers started together: {started:?}");
    assert!(started[0].2 < Time(100_000), "the handlers started a linger after their grants: {started:?}");
}

// Proves a batch of no request, or of more than SLOTS_MAX, is refused before anything is asked,
// with the error that says so, and that SLOTS_MAX itself is a batch the runtime takes.
#[test]
fn a_batch_past_slots_max_or_of_nothing_is_refused() {
    let max = lease_runtime::SLOTS_MAX;
    for batch in [0, max + 1, 4 * max] {
        let refused = refused_before_asking(WorkerOptions { batch, ..WorkerOptions::new(slots(2), worker_config()) });
        assert_eq!(refused, OptionsError::Batch { batch }, "a batch of {batch}");
    }
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(2);
    let runtime = runtime(&clock, &client);
    let handler = |job: Job| future::ready(Ok(output_bytes(job.id, 1)));
    let options = WorkerOptions { batch: max, ..WorkerOptions::new(slots(2), worker_config()) };
    let worked = drive(&clock, runtime.work(options, handler, client.all_ended(2))).expect("a batch of SLOTS_MAX runs");
    assert_eq!(worked.completed, 2, "{worked:?}");
}

/// The error a runtime with `options` stops with, having asked nothing of a table holding one
/// queued job (it is still queued).
fn refused_before_asking(options: WorkerOptions) -> OptionsError {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(1);
    let runtime = runtime(&clock, &client);
    let handler = |job: Job| future::ready(Ok(output_bytes(job.id, 1)));
    let refused = drive(&clock, runtime.work(options, handler, future::ready(()))).expect_err("refused");
    assert_eq!(client.states(1), [JobState::Queued], "nothing was acquired");
    refused
}

/// A handler that sleeps `long` for job 0 and `short` for the others, counting its calls per job
/// and the most calls running at once.
fn counting_handler(
    clock: &ManualClock,
    long: Span,
    short: Span,
) -> (impl Handler, Arc<Mutex<Vec<u64>>>, Arc<AtomicUsize>) {
    let (calls, running, most) =
        (Arc::new(Mutex::new(vec![0u64; 16])), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handler = {
        let (clock, calls, most) = (clock.clone(), Arc::clone(&calls), Arc::clone(&most));
        move |job: Job| {
            let (clock, calls, running, most) =
                (clock.clone(), Arc::clone(&calls), Arc::clone(&running), Arc::clone(&most));
            async move {
                calls.lock().unwrap()[job.id.0 as usize] += 1;
                let now_running = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now_running, Ordering::SeqCst);
                let took = if job.id == JobId(0) { long } else { short };
                clock.sleep_until(clock.now() + took).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(output_bytes(job.id, 1))
            }
        }
    };
    (handler, calls, most)
}

// Proves the local buffer of granted jobs (`WorkerOptions::handlers` below the slots): six slots
// with two handlers run at most two handlers at once (and do reach two), while the four other
// slots hold their grants; the buffered leases are kept by heartbeats through handlers that run
// three lease ttls, so every job completes once, under its first epoch, its handler called once.
// The control run, every slot a handler, reaches six at once, so the bound can fail. More handlers
// than slots is refused before anything is asked.
#[test]
fn a_buffer_runs_at_most_its_handlers_and_keeps_the_leases_it_holds() {
    let run = |handlers: usize| {
        let clock = ManualClock::default();
        let client = MemoryClient::new(&clock);
        client.enqueue(12);
        let (handler, calls, most) = counting_handler(&clock, Span::from_secs(3), Span::from_secs(3));
        let runtime = runtime(&clock, &client);
        let options = WorkerOptions { handlers, ..WorkerOptions::new(slots(6), worker_config()) };
        let worked = drive(&clock, runtime.work(options, handler, client.all_ended(12))).unwrap();
        assert_eq!((worked.handled, worked.completed, worked.abandoned), (12, 12, 0), "{worked:?}");
        for job in 0..12 {
            let terminal = client.table(|table| *table.terminal(JobId(job)).unwrap());
            assert_eq!(terminal.epoch, Epoch(1), "job {job}: {terminal:?}");
            assert_eq!(calls.lock().unwrap()[job as usize], 1, "job {job}'s handler ran once");
        }
        most.load(Ordering::SeqCst)
    };
    assert_eq!(run(2), 2, "two handlers at once, no more");
    assert_eq!(run(0), 6, "without a buffer, every slot runs its handler");
    let refused = refused_before_asking(WorkerOptions { handlers: 7, ..WorkerOptions::new(slots(6), worker_config()) });
    assert!(matches!(refused, OptionsError::Handlers { handlers: 7, slots: 6 }), "{refused:?}");
}

// Proves a buffered job is fenced: three slots, one handler busy for three ttls with job 0, jobs 1
// and 2 buffered; job 1's renewals reach the table but their answers are lost, so its machine
// self-fences while it waits. Its job is released (back at the queue's head, its attempt undone),
// never run under that lease: no `executing` line under epoch 1, and the job later runs once under
// epoch 2, its attempts still one. Broken variant this catches: a buffer that starts a job whose
// machine gave its lease up (a line and a handler under epoch 1), or leaves it leased to expire (a
// second attempt counted for a job that never ran).
#[test]
fn a_buffered_job_whose_lease_was_given_up_is_released_not_run() {
    let clock = ManualClock::default();
    let client = MemoryClient::new(&clock);
    client.enqueue(3);
    client.plant(|faults| faults.lose_renewals_of = Some((JobId(1), Epoch(1))));
    let (handler, calls, most) = counting_handler(&clock, Span::from_secs(3), Span::from_ms(100));
    let runtime = runtime(&clock, &client);
    let options = WorkerOptions { handlers: 1, ..WorkerOptions::new(slots(3), worker_config()) };
    let worked = drive(&clock, runtime.work(options, handler, client.all_ended(3))).unwrap();
    assert_eq!(most.load(Ordering::SeqCst), 1);
    assert_eq!(worked.buffer_released, 1, "{worked:?}");
    assert_eq!(worked.released, 1, "the table took it back: {worked:?}");
    assert_eq!((worked.handled, worked.completed), (3, 3), "{worked:?}");
    assert_eq!(*calls.lock().unwrap(), [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let executing_under_first = client.seen(|seen| {
        seen.lines.iter().any(|(_, event)| matches!(event, Event::Executing { job: JobId(1), epoch: Epoch(1), .. }))
    });
    assert!(!executing_under_first, "job 1 never started under the lease its machine gave up");
    let terminal = client.table(|table| *table.terminal(JobId(1)).unwrap());
    assert_eq!(terminal.epoch, Epoch(2), "{terminal:?}");
    assert_eq!(client.table(|table| table.attempts(JobId(1))), Some(1), "the release undid the unrun attempt");
}
