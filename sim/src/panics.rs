//! Panics inside a simulated world are findings, not the end of a sweep.
//!
//! [`catching`] runs a closure and turns a panic into its message, with the place it was raised.
//! While it runs, the process's panic hook records the message instead of printing it (the
//! runner reports it with the seed and the reproduce line); on every other thread, and outside
//! [`catching`], the previous hook runs as before, so test failures still print as usual.
//!
//! The hook alone does not keep a world's panic off stderr. madsim polls each task inside its
//! own `catch_unwind` (`Executor::run_all_ready`, madsim 0.2.34 `src/sim/task/mod.rs`), and when
//! a poll panics it `eprintln!`s a `context: node=… task=… (spawned at …)` line before resuming
//! the unwind; no hook or setting turns that off. So no panic may leave a task's poll: every
//! task the world spawns runs [`contained`], which catches the panic inside the poll, keeps it
//! for the world and leaves the task pending; the world's root future runs [`world`], which
//! then ends `block_on` with the panic as its value, and the caller resumes it outside madsim.
//! Once a task has panicked no contained task is polled again, so the world stops where the
//! panic struck, as it did when the panic unwound through madsim.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Once;
use std::task::{Context, Poll, Waker};

thread_local! {
    /// Whether this thread is inside [`catching`].
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// The last panic caught on this thread: message and location.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// What a panic unwinds with.
pub type Payload = Box<dyn Any + Send>;

thread_local! {
    /// The world running on this thread, between [`world`]'s first poll and its drop.
    static WORLD: RefCell<Option<Running>> = const { RefCell::new(None) };
}

/// The world running on this thread: its root task's waker, and the panic that ended it.
struct Running {
    root: Waker,
    panic: Option<Payload>,
}

/// Runs a world's task with its panics kept inside the poll (see the module doc): a panic is
/// handed to the world's root ([`world`]), which ends the world with it; the task stays pending
/// and, like every contained task of that world, is never polled again. Outside a [`world`] a
/// panic unwinds as it would without this wrapper.
pub fn contained<F: Future>(future: F) -> Contained<F> {
    Contained { future: Box::pin(future) }
}

/// A task whose panics end its world instead of unwinding through madsim; see [`contained`].
#[must_use = "a future does nothing unless polled"]
pub struct Contained<F> {
    future: Pin<Box<F>>,
}

impl<F: Future> Future for Contained<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if ended() {
            return Poll::Pending;
        }
        let future = self.future.as_mut();
        match panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => {
                end_world(payload);
                Poll::Pending
            }
        }
    }
}

/// Runs a world's root future: it ends with `Ok` of the future's output, or with `Err` of the
/// first panic of the root or of any [`contained`] task, without that panic passing through
/// madsim. Resume it (`std::panic::resume_unwind`) outside `block_on`.
pub fn world<F: Future>(future: F) -> Root<F> {
    Root { future: Box::pin(future), started: false }
}

/// A world's root future; see [`world`].
#[must_use = "a future does nothing unless polled"]
pub struct Root<F> {
    future: Pin<Box<F>>,
    /// Whether this root registered the running world (so that its drop unregisters it).
    started: bool,
}

impl<F: Future> Future for Root<F> {
    type Output = Result<F::Output, Payload>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let panicked = WORLD.with(|world| {
            let mut world = world.borrow_mut();
            let running = world.get_or_insert_with(|| Running { root: cx.waker().clone(), panic: None });
            running.root.clone_from(cx.waker());
            running.panic.take()
        });
        self.started = true;
        if let Some(payload) = panicked {
            return Poll::Ready(Err(payload));
        }
        let future = self.future.as_mut();
        match panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

impl<F> Drop for Root<F> {
    fn drop(&mut self) {
        if self.started {
            WORLD.with(|world| world.borrow_mut().take());
        }
    }
}

/// Whether the world running on this thread has panicked.
fn ended() -> bool {
    WORLD.with(|world| world.borrow().as_ref().is_some_and(|running| running.panic.is_some()))
}

/// Hands `payload` to the running world's root and wakes it; with no world running, unwinds.
/// The first panic is the cause: a later one (a lock poisoned by it) is dropped.
fn end_world(payload: Payload) {
    let unhandled = WORLD.with(|world| {
        let mut world = world.borrow_mut();
        let Some(running) = world.as_mut() else { return Some(payload) };
        if running.panic.is_none() {
            running.panic = Some(payload);
            running.root.wake_by_ref();
        }
        None
    });
    if let Some(payload) = unhandled {
        panic::resume_unwind(payload);
    }
}

/// Runs `body`; a panic inside it is returned as `Err(message at file:line:column)`.
pub fn catching<T>(body: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    // A panic kept by an earlier body that ended well (one [`contained`] caught) is not this one's.
    CAUGHT.with(|caught| caught.borrow_mut().take());
    let outer = CATCHING.with(|catching| catching.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(body));
    CATCHING.with(|catching| catching.set(outer));
    result.map_err(|payload| {
        let recorded = CAUGHT.with(|caught| caught.borrow_mut().take());
        recorded.unwrap_or_else(|| message_of(payload.as_ref()))
    })
}

fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(Cell::get) {
                return previous(info);
            }
            let message = message_of(info.payload());
            let place = info.location().map(|at| format!(" at {}:{}:{}", at.file(), at.line(), at.column()));
            // The first panic is the cause; a later one (a lock poisoned by it) is a consequence.
            CAUGHT.with(|caught| {
                caught.borrow_mut().get_or_insert(format!("{message}{}", place.unwrap_or_default())).clone()
            });
        }));
    });
}

fn message_of(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        return (*message).to_string();
    }
    if let Some(message) = payload.downcast_ref::<String>() {
        return message.clone();
    }
    "a panic without a message".to_string()
}

#[cfg(test)]
mod tests {
    use super::{catching, contained, world};
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    // Proves a panic becomes its message and place, and that the next call starts clean.
    #[test]
    fn a_panic_becomes_its_message_and_place() {
        let caught = catching(|| -> u32 { panic!("impossible state {}", 7) }).unwrap_err();
        assert!(caught.starts_with("impossible state 7 at "), "{caught}");
        assert!(caught.contains("panics.rs:"), "{caught}");
        assert_eq!(catching(|| 3), Ok(3));
        let again = catching(|| -> () { panic!("second") }).unwrap_err();
        assert!(again.starts_with("second at "), "{again}");
    }

    // Proves a contained task's panic reaches the world's root as a value, not as an unwind
    // (which is what madsim would print a context line for), and that no contained task is
    // polled after it: the world stops where the panic struck. Polled by hand, without madsim.
    #[test]
    fn a_contained_panic_ends_the_world_without_unwinding() {
        let mut cx = Context::from_waker(Waker::noop());
        let mut root = pin!(world(std::future::pending::<()>()));
        assert!(root.as_mut().poll(&mut cx).is_pending());
        let polls = std::cell::Cell::new(0);
        let mut healthy = pin!(contained(std::future::poll_fn(|_| {
            polls.set(polls.get() + 1);
            Poll::<()>::Pending
        })));
        assert!(healthy.as_mut().poll(&mut cx).is_pending());
        let mut failing = pin!(contained(async { panic!("impossible state") }));
        let polled = catching(|| failing.as_mut().poll(&mut cx));
        assert!(matches!(polled, Ok(Poll::Pending)), "the panic stayed inside the poll");
        assert!(healthy.as_mut().poll(&mut cx).is_pending());
        let Poll::Ready(Err(payload)) = root.as_mut().poll(&mut cx) else { panic!("the root ends with the panic") };
        assert_eq!(super::message_of(payload.as_ref()), "impossible state");
        assert_eq!(polls.get(), 1, "no contained task runs after the panic");
    }

    // Proves a contained task outside any world unwinds as it would unwrapped, so a panic is
    // never swallowed by a task that has no root to hand it to.
    #[test]
    fn a_contained_panic_outside_a_world_unwinds() {
        let mut cx = Context::from_waker(Waker::noop());
        let mut failing = pin!(contained(async { panic!("no world") }));
        let caught = catching(|| failing.as_mut().poll(&mut cx)).unwrap_err();
        assert!(caught.starts_with("no world at "), "{caught}");
    }
}
