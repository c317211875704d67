//! Proves that a world with parameters that cannot work is refused, not run: a lease table with
//! no capacity, a worker whose grants could never be used, a reclaimer that would scan without
//! pause. A harness that ran such a world would "prove" a protocol under conditions the core
//! promises to reject. How: each unworkable setting on an otherwise valid scenario, and the run's
//! verdict, which must be a crash naming the broken limit (the core's `ConfigError`, raised when
//! the node is built), never a held run.

#[cfg(test)]
mod tests {
    use lease_core::Span;
    use lease_sim::scenarios::Scenario;
    use lease_sim::world::Params;
    use lease_sim::world::{self, Verdict};

    fn refused(name: &str, break_it: impl Fn(&mut Params), needle: &str) {
        let mut params = Scenario::CALM.params(3, None);
        params.jobs = 3;
        break_it(&mut params);
        let report = world::run(params);
        match &report.verdict {
            Verdict::Crash(crash) => assert!(crash.message.contains(needle), "{name}: {crash}"),
            other => panic!("{name}: an unworkable world was run to {other:?}"),
        }
    }

    fn held(name: &str, set: impl Fn(&mut Params)) {
        let mut params = Scenario::CALM.params(3, None);
        params.jobs = 3;
        set(&mut params);
        let report = world::run(params);
        assert!(matches!(report.verdict, Verdict::Held), "{name}: {:?}", report.verdict);
    }

    // The worker runtime's own limits: the simulated worker nodes hand the world's options to
    // lease-runtime as a service would, and the runtime refuses what cannot work (its
    // `OptionsError`, raised when a worker process starts), the simulator checking nothing of its
    // own on this path. Each limit's edge itself runs.
    #[test]
    fn the_runtimes_own_limits_are_refused_and_their_edges_run() {
        let four = |p: &mut Params| {
            p.slots = 4;
            p.batch = 4;
            p.table.batch_max = 4;
        };
        refused(
            "more handlers than slots",
            |p| {
                four(p);
                p.handlers = 5;
            },
            "handlers at once",
        );
        held("as many handlers as slots", |p| {
            four(p);
            p.handlers = 4;
        });
        refused("a batch of nothing", |p| p.batch = 0, "batches 1 to");
        refused("a batch past the most slots", |p| p.batch = lease_runtime::SLOTS_MAX + 1, "batches 1 to");
        held("a batch of the most slots", |p| p.batch = lease_runtime::SLOTS_MAX);
        refused("more slots than a runtime drives", |p| p.slots = lease_runtime::SLOTS_MAX as u32 + 1, "slots, not");
        let half = |p: &Params| Span(p.worker.request_timeout.0 / 2);
        refused(
            "a linger past half a request's timeout",
            |p| {
                four(p);
                p.linger = half(p) + Span(1);
            },
            "half a request's timeout",
        );
        held("a linger of half a request's timeout", |p| {
            four(p);
            p.linger = half(p);
        });
    }

    #[test]
    fn every_unworkable_limit_is_refused() {
        refused("no capacity", |p| p.table.capacity = 0, "capacity");
        refused("no batch", |p| p.table.batch_max = 0, "batch_max");
        refused("no attempts", |p| p.table.attempts_max = 0, "attempts_max");
        refused("a margin as long as the lease", |p| p.worker.drift_margin = p.worker.lease_ttl, "drift_margin");
        refused(
            "a heartbeat too late to keep the lease",
            |p| p.worker.heartbeat_every = Span(p.worker.lease_ttl.0 - p.worker.drift_margin.0),
            "heartbeat_every",
        );
        refused("a hold no grant survives", |p| p.worker.acquire_wait = p.worker.lease_ttl, "acquire_wait");
        refused("a reclaimer that never waits", |p| p.reclaimer.scan_every = Span::ZERO, "scan_every");
        refused("a reclaimer that never times out", |p| p.reclaimer.request_timeout = Span::ZERO, "request_timeout");
    }
}
