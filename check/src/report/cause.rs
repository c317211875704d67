//! The causes a report names for an incident, and the scenarios' labels are written in.

use serde::Serialize;

/// Why a backlog grew: more work arrived, fewer workers could take it, or the dependency made
/// every attempt slower or wasted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// `arrivals`: the arrival rate rose past what the fleet serves.
    Arrivals,
    /// `workers`: workers crashed, stalled or were cut off, or their grants were wasted.
    Workers,
    /// `dependency`: the dependency slowed down, or failed calls wasted attempts.
    Dependency,
}

impl Cause {
    /// Every cause, in the order reports list them.
    pub const ALL: [Cause; 3] = [Cause::Arrivals, Cause::Workers, Cause::Dependency];

    /// The cause as reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Arrivals => "arrivals",
            Cause::Workers => "workers",
            Cause::Dependency => "dependency",
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
