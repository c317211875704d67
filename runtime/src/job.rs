//! What a handler sees and returns: the [`Job`] context, its [`Cancel`] signal, the [`Output`]
//! of its effect (or a [`HandlerError`]), and an output's identity ([`output_id`]).

use futures::channel::oneshot;
use futures::future::{BoxFuture, FutureExt, Shared};
use lease_core::{Apply, Epoch, JobId, OpId, OutputId, Time, WorkerId};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One job as the handler runs it, under one lease.
#[derive(Debug, Clone)]
pub struct Job {
    /// The job.
    pub id: JobId,
    /// The slot's worker id: the lease's owner, as the table knows it.
    pub worker: WorkerId,
    /// The operation: the idempotency key to hand to the dependency. The same for every attempt.
    pub op: OpId,
    /// The lease's epoch: the fencing token to hand to the dependency.
    pub epoch: Epoch,
    /// The job's payload, as it was enqueued (read with its `executing` line,
    /// [`crate::Client::started`]; empty when it had none).
    pub payload: Vec<u8>,
    /// Fires when the runtime stops acting on the lease (self-fenced, lease lost, shut down).
    pub cancel: Cancel,
    deadline: Arc<AtomicU64>,
}

impl Job {
    pub(crate) fn new(
        worker: WorkerId,
        op: OpId,
        epoch: Epoch,
        payload: Vec<u8>,
        cancel: Cancel,
        deadline: Arc<AtomicU64>,
    ) -> Job {
        Job { id: op.job, worker, op, epoch, payload, cancel, deadline }
    }

    /// The local time until which the runtime acts on the lease: its estimate of expiry less the
    /// drift margin. Heartbeats move it later while the handler runs; past it, [`Job::cancel`]
    /// fires.
    pub fn deadline(&self) -> Time {
        Time(self.deadline.load(Ordering::Relaxed))
    }
}

/// A cancellation signal: a future that resolves once the runtime gives the lease up. The
/// runtime fires it, then drops the handler's future.
#[derive(Debug, Clone)]
pub struct Cancel {
    fired: Shared<oneshot::Receiver<()>>,
    flag: Arc<AtomicBool>,
}

/// The runtime's end of a [`Cancel`].
#[derive(Debug)]
pub(crate) struct Trigger {
    sender: oneshot::Sender<()>,
    flag: Arc<AtomicBool>,
}

impl Cancel {
    pub(crate) fn new() -> (Trigger, Cancel) {
        let (sender, receiver) = oneshot::channel();
        let flag = Arc::new(AtomicBool::new(false));
        (Trigger { sender, flag: Arc::clone(&flag) }, Cancel { fired: receiver.shared(), flag })
    }

    /// Whether the signal has fired.
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Resolves once the signal fires (never, if the handler finishes first and the runtime
    /// drops the signal unfired).
    pub fn cancelled(&self) -> BoxFuture<'static, ()> {
        let fired = self.fired.clone();
        Box::pin(async move {
            if fired.await.is_err() {
                futures::future::pending::<()>().await;
            }
        })
    }
}

impl Trigger {
    /// Fires the signal.
    pub(crate) fn fire(self) {
        self.flag.store(true, Ordering::SeqCst);
        let _receiver_gone = self.sender.send(());
    }
}

/// Why a handler produced no output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerError {
    /// Try again: the job is requeued, its attempt counted (dead-lettered after `attempts_max`).
    /// The runtime puts the failure on the history (the dependency's `dependency_failed`, before
    /// any effect), so that the requeue has its reason.
    Retryable(String),
    /// Try again, as [`HandlerError::Retryable`]; the dependency has put its failure on the
    /// history itself (a fenced dependency that writes its own lines, as the simulator's and
    /// lease-live's stub do, or one whose answer was lost after its effect), so the runtime writes
    /// none.
    Reported(String),
    /// Never worth trying again (a malformed payload, a document that no longer exists): the job
    /// is dead-lettered at once, its remaining attempts unspent. The runtime puts the refusal on
    /// the history (the dependency's `dependency_failed`, `permanent`), so that the dead-letter has
    /// its reason.
    Permanent(String),
    /// Never worth trying again, as [`HandlerError::Permanent`]; the dependency has put its
    /// refusal on the history itself, so the runtime writes none.
    ReportedPermanent(String),
}

impl HandlerError {
    /// Whether the job is dead-lettered now, rather than requeued.
    pub fn is_permanent(&self) -> bool {
        matches!(self, HandlerError::Permanent(_) | HandlerError::ReportedPermanent(_))
    }

    /// Whether the dependency wrote the failure's line itself.
    pub fn is_reported(&self) -> bool {
        matches!(self, HandlerError::Reported(_) | HandlerError::ReportedPermanent(_))
    }
}

/// What a handler's effect produced, and who records it in the ledger.
///
/// Most handlers return the output's bytes (`Ok(bytes)`, through `From<Vec<u8>>`), and the
/// runtime records their identity under the epoch. A *fenced dependency* takes the operation id
/// (idempotency key) and the epoch (fencing token) and records its own output in the ledger,
/// atomically with the effect, so the storage itself checks the token: its handler returns what
/// the ledger answered ([`Output::Recorded`]) and the runtime records nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The output's bytes: the runtime names them ([`output_id`]) and records that name under the
    /// epoch ([`crate::Client::record`]).
    Bytes(Vec<u8>),
    /// An output the dependency named itself (a receipt id): the runtime records it under the
    /// epoch ([`crate::Client::record`]).
    Named(OutputId),
    /// The dependency recorded `output` under the job's epoch itself, with the effect, and the
    /// ledger answered `apply`: the runtime records nothing and hands the answer to the machine,
    /// which completes (`applied`, `already_applied`) or abandons the lease (`fenced`,
    /// `conflict`, the conflict left to a reclaimer's quarantine).
    Recorded {
        /// The output the dependency recorded.
        output: OutputId,
        /// The ledger's answer to it.
        apply: Apply,
    },
}

impl From<Vec<u8>> for Output {
    fn from(bytes: Vec<u8>) -> Output {
        Output::Bytes(bytes)
    }
}

impl From<OutputId> for Output {
    fn from(output: OutputId) -> Output {
        Output::Named(output)
    }
}

/// What a handler returns: its effect's output (the output's bytes unless said otherwise, any
/// [`Output`] in general), or why there is none.
pub type Outcome<O = Vec<u8>> = Result<O, HandlerError>;

/// The user's code: what the runtime runs for a job it holds and whose output the ledger does not
/// hold. Any `Fn(Job) -> impl Future<Output = Outcome<O>>` is one, for an `O` that
/// is an [`Output`]: the output's bytes (`Vec<u8>`), an [`OutputId`] the dependency named, or an
/// [`Output`] itself.
pub trait Handler: Send + Sync + 'static {
    /// Runs the job.
    fn call(&self, job: Job) -> BoxFuture<'static, Outcome<Output>>;
}

impl<F, Fut, O> Handler for F
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome<O>> + Send + 'static,
    O: Into<Output>,
{
    fn call(&self, job: Job) -> BoxFuture<'static, Outcome<Output>> {
        Box::pin(self(job).map(|outcome| outcome.map(Into::into)))
    }
}

/// An output's identity, as the ledger records it: the xxh3 64-bit hash of its bytes, stable
/// across processes, builds and platforms. The same bytes always name the same output, so an
/// effect repeated with the same result is `already_applied`, and a different result a conflict.
pub fn output_id(bytes: &[u8]) -> OutputId {
    OutputId(xxhash_rust::xxh3::xxh3_64(bytes))
}
