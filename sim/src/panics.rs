//! Panics inside a simulated world are findings, not the end of a sweep.
//!
//! [`catching`] runs a closure and turns a panic into its message, with the place it was raised.
//! While it runs, the process's panic hook records the message instead of printing it (the
//! runner reports it with the seed and the reproduce line); on every other thread, and outside
//! [`catching`], the previous hook runs as before, so test failures still print as usual.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Whether this thread is inside [`catching`].
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// The last panic caught on this thread: message and location.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Runs `body`; a panic inside it is returned as `Err(message at file:line:column)`.
pub fn catching<T>(body: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
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
    use super::catching;

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
}
