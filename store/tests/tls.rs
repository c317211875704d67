//! TLS to PostgreSQL, as libpq's `sslmode` and `sslrootcert` say, against the local server.
//!
//! The server's own certificate (`ssl_cert_file`: Debian's self-signed "snakeoil", issued to
//! `localhost`) serves as the root to trust. Each test asks the server, through
//! `pg_stat_ssl`, whether the store's own connection (found by a unique `application_name`) is
//! encrypted. A server with `ssl = off` cannot test this: the tests say so plainly and pass.

mod common;

use common::pg;
use common::say;
use lease_core::{Acquired, Enqueued, JobId, Span, TableConfig, Time, WorkerId};
use lease_store::{Clock, PostgresStore, StoreError, TableStore};

/// The local server's TLS, as the tests need it: the admin connection and its certificate file.
struct Server {
    scratch: pg::Scratch,
    cert: String,
    config: lease_store::tokio_postgres::Config,
}

fn server(test: &str) -> Option<Server> {
    let mut scratch = pg::scratch(test)?;
    let ssl = scratch.query_one("SHOW ssl");
    if ssl != "on" {
        say(&format!("{test}: NOT RUN: the server has ssl = {ssl}, so TLS cannot be tried"));
        return None;
    }
    let cert = scratch.query_one("SHOW ssl_cert_file");
    if std::fs::metadata(&cert).is_err() {
        say(&format!("{test}: NOT RUN: the server's certificate {cert} cannot be read here"));
        return None;
    }
    let config = pg::url().parse().expect("LEASE_PG_URL parses");
    Some(Server { scratch, cert, config })
}

impl Server {
    /// A connection string in `key=value` words, to `host`, with `tls` appended, named `name`.
    fn words(&self, host: &str, name: &str, tls: &str) -> String {
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let user = self.config.get_user().unwrap_or("postgres");
        let db = self.config.get_dbname().unwrap_or("postgres");
        format!("host={host} port={port} user={user} dbname={db} application_name={name} {tls}")
    }

    fn open(&self, url: &str) -> Result<PostgresStore, StoreError> {
        let config = TableConfig { capacity: 16, lease_ttl: Span::from_ms(1_000), batch_max: 4, attempts_max: 3 };
        PostgresStore::open(url, Some(&self.scratch.name), config, Clock::Caller)
    }

    /// Whether the connection named `name` is encrypted, as the server sees it.
    fn encrypted(&mut self, name: &str) -> bool {
        let answer = self.scratch.query_one(&format!(
            "SELECT s.ssl::text FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid \
             WHERE a.application_name = '{name}'"
        ));
        answer == "true"
    }
}

/// The store serves: a job goes in and is granted.
fn serves(store: &mut PostgresStore, job: u64) {
    assert!(matches!(store.enqueue(Time(1), JobId(job)).expect("enqueue"), Enqueued::Accepted { .. }));
    assert!(matches!(store.acquire(Time(2), WorkerId(1)).expect("acquire"), Acquired::Granted(_)));
}

#[test]
fn each_sslmode_encrypts_and_checks_as_libpq_says() {
    let Some(mut server) = server("tls_modes") else { return };
    let cert = server.cert.clone();
    let cases = [
        ("disable", "127.0.0.1", "sslmode=disable".to_string(), false),
        ("default", "127.0.0.1", String::new(), true),
        ("require", "127.0.0.1", "sslmode=require".to_string(), true),
        ("verify_ca", "127.0.0.1", format!("sslmode=verify-ca sslrootcert={cert}"), true),
        ("verify_full", "localhost", format!("sslmode=verify-full sslrootcert={cert}"), true),
    ];
    for (job, (case, host, tls, encrypted)) in cases.into_iter().enumerate() {
        let name = format!("{}_{case}", server.scratch.name);
        let url = server.words(host, &name, &tls);
        let mut store = server.open(&url).unwrap_or_else(|error| panic!("{case}: {url}: {error}"));
        serves(&mut store, job as u64 + 1);
        assert_eq!(server.encrypted(&name), encrypted, "{case}: the server's view of {url}");
    }
    // The URL form too, its root percent-encoded.
    let name = format!("{}_url", server.scratch.name);
    let url = format!(
        "postgres://{}@localhost:{}/{}?application_name={name}&sslmode=verify-full&sslrootcert={}",
        server.config.get_user().unwrap_or("postgres"),
        server.config.get_ports().first().copied().unwrap_or(5432),
        server.config.get_dbname().unwrap_or("postgres"),
        cert.replace('/', "%2F"),
    );
    let mut store = server.open(&url).unwrap_or_else(|error| panic!("{url}: {error}"));
    serves(&mut store, 10);
    assert!(server.encrypted(&name), "{url}");
}

#[test]
fn a_certificate_that_does_not_check_out_is_refused_with_the_reason() {
    let Some(server) = server("tls_refused") else { return };
    let cert = server.cert.clone();
    // Issued to localhost, not to 127.0.0.1: verify-full refuses, verify-ca does not look.
    let url = server.words("127.0.0.1", "refused_name", &format!("sslmode=verify-full sslrootcert={cert}"));
    let error = server.open(&url).expect_err("a certificate for another name");
    assert!(error.to_string().contains("TLS handshake"), "{error}");
    assert!(error.to_string().to_lowercase().contains("name"), "the reason names the name: {error}");
    // A root that did not sign it: every checked mode refuses, require (unchecked) does not.
    let other = std::env::temp_dir().join(format!("{}_other_root.pem", server.scratch.name));
    std::fs::write(&other, OTHER_ROOT).expect("write the other root");
    for mode in ["verify-ca", "verify-full", "require"] {
        let url = server.words("localhost", "refused_root", &format!("sslmode={mode} sslrootcert={}", other.display()));
        let error = server.open(&url).expect_err("a root that did not sign the server's certificate");
        assert!(error.to_string().contains("TLS handshake"), "{mode}: {error}");
        assert!(error.to_string().contains("UnknownIssuer"), "{mode}: the reason is the issuer: {error}");
    }
    std::fs::remove_file(&other).ok();
    // A root file that is not there, or holds no certificate: refused before connecting.
    for (missing, why) in [("/nonexistent/root.pem", "sslrootcert /nonexistent"), ("/dev/null", "no certificate")] {
        let url = server.words("localhost", "refused_file", &format!("sslmode=verify-ca sslrootcert={missing}"));
        let error = server.open(&url).expect_err("no root to trust");
        assert!(matches!(error, StoreError::Tls(_)) && error.to_string().contains(why), "{missing}: {error}");
    }
}

/// A self-signed root of no server here (generated once with `openssl req -x509 -newkey ec
/// -pkeyopt ec_paramgen_curve:P-256 -subj /CN=other-root -days 36500 -nodes`; its key was thrown away).
const OTHER_ROOT: &str = "-----BEGIN CERTIFICATE-----
MIIBgjCCASegAwIBAgIUQiP0kkHBStqdj+u4d2T01gaABnowCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKb3RoZXItcm9vdDAgFw0yNjEyMDMxMzI0MjRaGA8yMTI2MTEw
OTEzMjQyNFowFTETMBEGA1UEAwwKb3RoZXItcm9vdDBZMBMGByqGSM49AgEGCCqG
SM49AwEHA0IABLkdDq0OYaPVbT0uBgGYN5oNJMFDg3vHnLFf3SDL8dDw8IB7Bz8d
QcwVggaNo2HOXlnHrlJYeNLpgUPMbX0IVTijUzBRMB0GA1UdDgQWBBREAVzzSTQz
ofkQf7+zGlQA21Hc6zAfBgNVHSMEGDAWgBREAVzzSTQzofkQf7+zGlQA21Hc6zAP
BgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQDDHcsa/Pbgaq/Khkxw
AkEvxv0vAvYATn0IOmrNk0ovMAIhAKSORbZOaR+7hPRS97ka3g/MD3U0XD0uKNGF
6OGlZwea
-----END CERTIFICATE-----
";
