//! The dependency stub: a small loopback service that performs the mock effect, idempotent by
//! operation id, and records its output in the effect ledger, as the simulator's ledger node does.
//!
//! A call is one line over TCP on 127.0.0.1, `exec WORKER JOB STEP EPOCH`, answered by one line:
//! `failed` (nothing happened), or `done OUTPUT ANSWER [N]`: the output produced and the ledger's
//! answer to it (`applied`, `already_applied`, `fenced FENCE`, `conflict RECORDED`).
//!
//! **Idempotent by operation id**: the first call for an operation performs the effect and
//! produces its output (an identity drawn from the seed, the operation and the caller's epoch);
//! every later call for that operation performs nothing and answers the same output. The stub
//! counts, per operation, the effects it performed and the calls it took: the ground truth that
//! the history must agree with ([`super::truth`]).
//!
//! Its latency and failures follow the plan: a few milliseconds normally, `slow_factor` times that
//! in a slow window, and a share of calls failed before any effect in a failing window, each
//! failure on the history as `dependency_failed`.

use super::db::{host_now, Handle, Lines};
use super::plan::LivePlan;
use lease_core::{Apply, Bugs, Epoch, Execution, JobId, OpId, OutputId, Owner, WorkerId};
use lease_history::{Event, Node};
use lease_store::Caller;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The most calls served at once; a call past it is dropped (the worker asks again).
const CALLS_IN_FLIGHT_MAX: usize = 256;
/// How long a worker waits for the stub's answer before giving the call up.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What the stub did for one operation: the ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCount {
    /// The job.
    pub job: u64,
    /// The operation's step.
    pub step: u32,
    /// The output the effect produced, once performed.
    pub output: Option<u64>,
    /// Effects performed (at most 1: the stub is idempotent by operation id).
    pub effects: u32,
    /// Calls taken for the operation, failed ones included.
    pub calls: u32,
    /// Calls failed before any effect.
    pub failed: u32,
}

/// Everything the stub performed, per operation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truth {
    /// One count per operation called.
    pub ops: Vec<OpCount>,
}

/// What the stub knows, under one lock: the counts, and the draws of latency and failure.
struct Counts {
    ops: BTreeMap<(u64, u32), OpCount>,
    rng: Xoshiro256PlusPlus,
}

/// The most store connections the stub holds: calls past it wait for one (a call holds one only
/// for its ledger write, after its latency).
const HANDLES_MAX: usize = 16;

/// The stub's store connections, each used by one call at a time: calls of different workers
/// write the ledger side by side, as the workers' own operations do.
struct Handles {
    db: lease_store::Place,
    config: lease_core::TableConfig,
    bugs: Bugs,
    free: Mutex<(Vec<Handle>, usize)>,
    returned: Condvar,
}

impl Handles {
    /// A free connection, opened if none is and fewer than [`HANDLES_MAX`] are.
    fn take(&self) -> Result<Handle, String> {
        let mut free = self.free.lock().map_err(|_| "poisoned")?;
        loop {
            if let Some(handle) = free.0.pop() {
                return Ok(handle);
            }
            if free.1 < HANDLES_MAX {
                free.1 += 1;
                drop(free);
                let opened = super::db::open(&self.db, self.config, self.bugs)
                    .map_err(|error| format!("the stub's store: {error}"));
                if opened.is_err() {
                    self.free.lock().map_err(|_| "poisoned")?.1 -= 1;
                }
                return opened;
            }
            free = self.returned.wait(free).map_err(|_| "poisoned")?;
        }
    }

    fn give(&self, handle: Handle) {
        if let Ok(mut free) = self.free.lock() {
            free.0.push(handle);
            self.returned.notify_one();
        }
    }
}

/// Serves calls until stdin closes, then prints `truth JSON` on stdout. Prints `ready PORT` once
/// listening.
pub fn serve(plan: &LivePlan, bugs: Bugs, store: Handle) -> Result<(), String> {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .map_err(|error| format!("the stub cannot listen on loopback: {error}"))?;
    let port = listener.local_addr().map_err(|error| error.to_string())?.port();
    let rng = Xoshiro256PlusPlus::seed_from_u64(plan.seed ^ 0x005e_ed0f_57ab);
    let counts = Arc::new(Mutex::new(Counts { ops: BTreeMap::new(), rng }));
    let handles = Arc::new(Handles {
        db: plan.db.clone(),
        config: plan.table(),
        bugs,
        free: Mutex::new((vec![store], 1)),
        returned: Condvar::new(),
    });
    let plan = Arc::new(plan.clone());
    let in_flight = Arc::new(AtomicUsize::new(0));
    {
        let (counts, handles, plan, in_flight) = (counts.clone(), handles.clone(), plan.clone(), in_flight.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if in_flight.fetch_add(1, Ordering::SeqCst) >= CALLS_IN_FLIGHT_MAX {
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                let (counts, handles, plan, in_flight) =
                    (counts.clone(), handles.clone(), plan.clone(), in_flight.clone());
                std::thread::spawn(move || {
                    if let Err(error) = answer(&plan, &counts, &handles, stream) {
                        eprintln!("stub: a call failed: {error}");
                    }
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
    }
    println!("ready {port}");
    let _ = std::io::stdout().flush();
    // The orchestrator closes stdin to end the stub (and the stub dies with it in any case).
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink).is_ok_and(|read| read > 0) {
        sink.clear();
    }
    let counts = counts.lock().map_err(|_| "a call panicked holding the stub's counts".to_string())?;
    let truth = Truth { ops: counts.ops.values().copied().collect() };
    println!("truth {}", serde_json::to_string(&truth).expect("the truth serialises"));
    let _ = std::io::stdout().flush();
    Ok(())
}

fn answer(plan: &LivePlan, counts: &Mutex<Counts>, handles: &Handles, stream: TcpStream) -> Result<(), String> {
    stream.set_read_timeout(Some(CALL_TIMEOUT)).map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).map_err(|e| e.to_string())?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).filter_map(|field| field.parse().ok()).collect();
    let [worker, job, step, epoch] = fields[..] else { return Err(format!("a bad call {line:?}")) };
    let (worker, op, epoch) = (WorkerId(worker as u32), OpId { job: JobId(job), step: step as u32 }, Epoch(epoch));
    let since_us = host_now().0.saturating_sub(plan.t0_us);
    let window = plan.dependency_at(since_us);
    let (latency_us, fails) = {
        let mut counts = counts.lock().map_err(|_| "poisoned")?;
        let dependency = plan.dependency;
        let latency = counts.rng.gen_range(dependency.latency_min_us..=dependency.latency_max_us);
        let fail_rate = window.map_or(dependency.fail_rate, |window| window.fail_rate);
        (latency * window.map_or(1, |window| window.slow_factor), counts.rng.gen_bool(fail_rate))
    };
    std::thread::sleep(Duration::from_micros(latency_us));
    let performed = {
        let mut counts = counts.lock().map_err(|_| "poisoned")?;
        perform(plan, &mut counts, op, epoch, fails)
    };
    let mut store = handles.take()?;
    let reply = record(&mut store, worker, op, epoch, performed).map_err(|e| e.to_string());
    handles.give(store);
    (&stream).write_all(reply?.as_bytes()).map_err(|e| e.to_string())
}

/// One call, under the stub's lock: counted, then failed (`None`), or the effect performed (once
/// per operation) and its output.
fn perform(plan: &LivePlan, counts: &mut Counts, op: OpId, epoch: Epoch, fails: bool) -> Option<OutputId> {
    let count = counts.ops.entry((op.job.0, op.step)).or_insert(OpCount {
        job: op.job.0,
        step: op.step,
        output: None,
        effects: 0,
        calls: 0,
        failed: 0,
    });
    count.calls += 1;
    if fails {
        count.failed += 1;
        return None;
    }
    Some(match count.output {
        Some(output) => OutputId(output),
        None => {
            let output = output_of(plan.seed, op, epoch);
            count.output = Some(output.0);
            count.effects += 1;
            output
        }
    })
}

/// Puts the call on the history: its failure, or its output applied to the ledger under the
/// caller's epoch. Returns the answer line.
fn record(
    store: &mut Handle,
    worker: WorkerId,
    op: OpId,
    epoch: Epoch,
    performed: Option<OutputId>,
) -> Result<String, lease_store::StoreError> {
    let from = Node::Worker(worker.0);
    let Some(output) = performed else {
        store.line(
            Node::Ledger,
            Event::DependencyFailed { from, job: op.job, op, epoch, after_effect: false, permanent: false },
        )?;
        return Ok("failed\n".to_string());
    };
    store.set_caller(Caller { from: Some(Owner::Worker(worker)), batch: None });
    let apply = store.apply(host_now(), op, epoch, output)?;
    Ok(match apply {
        Apply::Applied => format!("done {} applied\n", output.0),
        Apply::AlreadyApplied => format!("done {} already_applied\n", output.0),
        Apply::Fenced { fence } => format!("done {} fenced {}\n", output.0, fence.0),
        Apply::Conflict { recorded } => format!("done {} conflict {}\n", output.0, recorded.0),
    })
}

/// The output the effect produces: an identity from the seed, the operation and the epoch of the
/// call that performed it (splitmix64's finaliser), all 64 bits (a store keeps every bit).
fn output_of(seed: u64, op: OpId, epoch: Epoch) -> OutputId {
    let mut x = seed ^ op.job.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (op.step as u64) << 48;
    x ^= epoch.0.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    OutputId(x ^ (x >> 31))
}

/// Calls the stub on `port` for `worker`; `None` when no answer came (the worker asks again).
pub fn call(port: u16, worker: WorkerId, op: OpId, epoch: Epoch) -> Option<Execution> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(CALL_TIMEOUT)).ok()?;
    let request = format!("exec {} {} {} {}\n", worker.0, op.job.0, op.step, epoch.0);
    (&stream).write_all(request.as_bytes()).ok()?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).ok()?;
    parse_answer(&line)
}

/// Reads the stub's answer line.
fn parse_answer(line: &str) -> Option<Execution> {
    let mut words = line.split_whitespace();
    match words.next()? {
        "failed" => Some(Execution::Failed),
        "done" => {
            let output = OutputId(words.next()?.parse().ok()?);
            let apply = match (words.next()?, words.next().map(str::parse::<u64>)) {
                ("applied", None) => Apply::Applied,
                ("already_applied", None) => Apply::AlreadyApplied,
                ("fenced", Some(Ok(fence))) => Apply::Fenced { fence: Epoch(fence) },
                ("conflict", Some(Ok(recorded))) => Apply::Conflict { recorded: OutputId(recorded) },
                _ => return None,
            };
            Some(Execution::Done { output, apply })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves every answer the stub writes reads back as the execution it stands for, and that a
    // garbled line reads as no answer (the worker then asks again), never as a wrong one.
    #[test]
    fn answers_read_back() {
        let o = OutputId(42);
        let cases = [
            ("failed\n", Execution::Failed),
            ("done 42 applied\n", Execution::Done { output: o, apply: Apply::Applied }),
            ("done 42 already_applied\n", Execution::Done { output: o, apply: Apply::AlreadyApplied }),
            ("done 42 fenced 3\n", Execution::Done { output: o, apply: Apply::Fenced { fence: Epoch(3) } }),
            ("done 42 conflict 7\n", Execution::Done { output: o, apply: Apply::Conflict { recorded: OutputId(7) } }),
        ];
        for (line, execution) in cases {
            assert_eq!(parse_answer(line), Some(execution), "{line}");
        }
        for bad in ["", "done", "done x applied", "done 42 fenced", "done 42 applied 3", "maybe"] {
            assert_eq!(parse_answer(bad), None, "{bad:?}");
        }
    }
}
