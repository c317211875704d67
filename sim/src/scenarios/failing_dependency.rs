//! `failing-dependency`: the dependency fails, sometimes after the effect happened; attempts are
//! counted and a job out of attempts is dead-lettered.

use super::{Definition, Params};
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The definition.
pub(super) const DEFINITION: Definition = Definition {
    name: "failing-dependency",
    about: "failing calls: attempts counted, dead-letter after attempts_max, no duplicate",
    situations: &["dependency_failed", "dead_lettered", "adopted_by_worker"],
    label: None,
    draw,
};

/// One to three attempts; a fifth to three fifths of calls fail, and some answer "failed" after
/// the effect happened.
fn draw(params: &mut Params, rng: &mut Xoshiro256PlusPlus) {
    params.table.attempts_max = rng.gen_range(1..=3);
    params.dependency.fail_rate = rng.gen_range(0.2..0.6);
    params.dependency.lost_reply_rate = rng.gen_range(0.05..0.3);
}
