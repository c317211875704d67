//! `lease-sim report`: an operator's view of any history. Windows of queue figures, incidents
//! (stretches where the backlog grows or the oldest job ages), their cause, the customers' delay
//! and the recovery, read from the history alone.

mod cause;

pub use cause::Cause;
