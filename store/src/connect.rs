//! How the PostgreSQL store connects: TLS as libpq's `sslmode` and `sslrootcert` say.
//!
//! The connection string is libpq's, as a URL (`postgres://user@host/db?sslmode=verify-full&…`)
//! or as `key=value` words (`host=db sslmode=require`). `tokio-postgres` knows only `disable`,
//! `prefer` and `require`, and no root certificate; this module reads the TLS settings itself and
//! hands the rest on.
//!
//! | `sslmode` | encrypted | server certificate checked | without the `tls` feature |
//! |---|---|---|---|
//! | `disable` | no | – | plaintext |
//! | `prefer` (the default) | when the server offers it | no | plaintext |
//! | `require` | yes | no; as `verify-ca` when `sslrootcert` is given (libpq's rule) | refused |
//! | `verify-ca` | yes | signed by a root of `sslrootcert` | refused |
//! | `verify-full` | yes | signed by a root, and issued to the host connected to | refused |
//!
//! `sslrootcert` is a PEM file of one or more root certificates, or `system` for the operating
//! system's roots. `allow` (plaintext first) and client certificates (`sslcert`, `sslkey`) are
//! refused with a clear error rather than quietly ignored. Only `verify-full` defends against a
//! server that is not the one named: use it across any network you do not own.

use crate::StoreError;
use std::future::Future;
use std::pin::Pin;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, Config};

/// A connection's driver: polled on the handle's runtime until the client is dropped.
pub(crate) type Driver = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// What the connection string asks of TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Plaintext.
    Disable,
    /// Encrypted when the server offers it, the certificate unchecked.
    Prefer,
    /// Encrypted, the certificate unchecked.
    Require,
    /// Encrypted, the certificate chained to a trusted root.
    VerifyCa,
    /// Encrypted, the certificate chained to a trusted root and issued to the host.
    VerifyFull,
}

impl Mode {
    fn parse(text: &str) -> Result<Mode, StoreError> {
        Ok(match text {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            "allow" => {
                return Err(StoreError::Tls(
                    "sslmode=allow (plaintext first, TLS only when refused) is not supported: \
                     use disable, prefer, require, verify-ca or verify-full"
                        .into(),
                ))
            }
            other => {
                return Err(StoreError::Tls(format!(
                    "sslmode={other:?} is not a mode: disable, prefer, require, verify-ca or verify-full"
                )))
            }
        })
    }
}

/// A connection string read: `tokio-postgres`'s configuration, and what TLS must do.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) config: Config,
    pub(crate) mode: Mode,
    /// `sslrootcert`: a PEM file, or `system`.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))] // Read by the TLS connector only.
    pub(crate) roots: Option<String>,
}

/// Reads `url`, libpq's connection string, as a URL or as `key=value` words.
pub(crate) fn target(url: &str) -> Result<Target, StoreError> {
    let (rest, ours) = take_tls_settings(url);
    let mut mode = Mode::Prefer;
    let mut roots = None;
    for (key, value) in ours {
        match key.as_str() {
            "sslmode" => mode = Mode::parse(&value)?,
            "sslrootcert" => roots = Some(value),
            _ => {
                return Err(StoreError::Tls(format!(
                    "{key} (a client certificate) is not supported: the store authenticates by password or trust"
                )))
            }
        }
    }
    let mut config: Config = rest.parse()?;
    if matches!(mode, Mode::VerifyCa | Mode::VerifyFull) && roots.is_none() {
        return Err(StoreError::Tls(format!(
            "sslmode={} needs sslrootcert: a PEM file of the roots to trust, or `system`",
            mode.name()
        )));
    }
    if mode == Mode::Require && roots.is_some() {
        mode = Mode::VerifyCa;
    }
    if !cfg!(feature = "tls") && mode != Mode::Disable && mode != Mode::Prefer {
        return Err(StoreError::Tls(format!(
            "sslmode={} needs TLS, and this build of lease-store has none: enable its `tls` feature \
             (or lease-runtime's)",
            mode.name()
        )));
    }
    config.ssl_mode(match mode {
        Mode::Disable => SslMode::Disable,
        Mode::Prefer => SslMode::Prefer,
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
    });
    Ok(Target { config, mode, roots })
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }
}

/// Connects as `target` says, on the runtime this is polled on.
pub(crate) async fn connect(target: &Target) -> Result<(Client, Driver), StoreError> {
    if target.mode == Mode::Disable || !cfg!(feature = "tls") {
        let (client, connection) = target.config.connect(tokio_postgres::NoTls).await?;
        return Ok((client, Box::pin(connection)));
    }
    #[cfg(feature = "tls")]
    {
        let tls = tls::connector(target)?;
        let (client, connection) = target.config.connect(tls).await?;
        Ok((client, Box::pin(connection)))
    }
    #[cfg(not(feature = "tls"))]
    unreachable!("a build without TLS connects in plaintext above")
}

/// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of a connection string: the rest,
/// and the settings taken (values decoded), in their order.
fn take_tls_settings(url: &str) -> (String, Vec<(String, String)>) {
    const OURS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];
    let mut taken = Vec::new();
    if let Some(after) = url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://")) {
        let scheme = &url[..url.len() - after.len()];
        let Some((head, query)) = after.split_once('?') else { return (url.to_string(), taken) };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if OURS.contains(&key) {
                taken.push((key.to_string(), percent_decoded(value)));
            } else {
                kept.push(pair);
            }
        }
        let rest =
            if kept.is_empty() { format!("{scheme}{head}") } else { format!("{scheme}{head}?{}", kept.join("&")) };
        return (rest, taken);
    }
    // `key=value` words; a value may be quoted ('…'), with `\` escaping the next character.
    let Some(words) = words(url) else { return (url.to_string(), taken) };
    let mut rest = String::new();
    let mut from = 0;
    for (key, value, span) in words {
        if OURS.contains(&key.as_str()) {
            rest.push_str(&url[from..span.start]);
            from = span.end;
            taken.push((key, value));
        }
    }
    rest.push_str(&url[from..]);
    (rest, taken)
}

/// The `key=value` words of a connection string, each with its byte span; `None` when it is not
/// well formed (left for `tokio-postgres` to report).
fn words(text: &str) -> Option<Vec<(String, String, std::ops::Range<usize>)>> {
    let bytes = text.as_bytes();
    let mut at = 0;
    let mut found = Vec::new();
    let skip_space = |at: &mut usize| {
        while *at < bytes.len() && bytes[*at].is_ascii_whitespace() {
            *at += 1;
        }
    };
    loop {
        skip_space(&mut at);
        if at == bytes.len() {
            return Some(found);
        }
        let start = at;
        while at < bytes.len() && bytes[at] != b'=' && !bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        let key = text[start..at].to_string();
        skip_space(&mut at);
        if bytes.get(at) != Some(&b'=') {
            return None;
        }
        at += 1;
        skip_space(&mut at);
        let quoted = bytes.get(at) == Some(&b'\'');
        if quoted {
            at += 1;
        }
        let mut value = Vec::new();
        loop {
            match bytes.get(at) {
                None if quoted => return None,
                None => break,
                Some(b'\'') if quoted => {
                    at += 1;
                    break;
                }
                Some(byte) if !quoted && byte.is_ascii_whitespace() => break,
                Some(b'\\') => {
                    value.push(*bytes.get(at + 1)?);
                    at += 2;
                }
                Some(byte) => {
                    value.push(*byte);
                    at += 1;
                }
            }
        }
        found.push((key, String::from_utf8(value).ok()?, start..at));
    }
}

/// `%XX` escapes decoded (a URL's query value); a malformed escape is kept as written.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes.get(at + 1..at + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[at], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(feature = "tls")]
mod tls {
    //! rustls, with the `ring` provider, and the three checks of a server's certificate.

    use super::{Mode, Target};
    use crate::StoreError;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
    use std::sync::Arc;
    use tokio_postgres_rustls::MakeRustlsConnect;

    pub(super) fn connector(target: &Target) -> Result<MakeRustlsConnect, StoreError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match target.mode {
            Mode::Disable | Mode::Prefer | Mode::Require => Arc::new(Unchecked(provider.clone())),
            Mode::VerifyCa | Mode::VerifyFull => {
                let roots = roots(target.roots.as_deref().unwrap_or("system"))?;
                let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| StoreError::Tls(format!("cannot check certificates against sslrootcert: {e}")))?;
                match target.mode {
                    Mode::VerifyFull => webpki,
                    _ => Arc::new(ChainOnly(webpki)),
                }
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }

    /// The roots `sslrootcert` names: a PEM file, or `system`.
    fn roots(place: &str) -> Result<RootCertStore, StoreError> {
        let mut roots = RootCertStore::empty();
        if place == "system" {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(StoreError::Tls(format!(
                    "sslrootcert=system: the operating system offers no root certificate ({} errors)",
                    found.errors.len()
                )));
            }
            return Ok(roots);
        }
        use rustls::pki_types::pem::PemObject;
        let certs = CertificateDer::pem_file_iter(place)
            .map_err(|e| StoreError::Tls(format!("sslrootcert {place}: {e}")))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Tls(format!("sslrootcert {place}: {e}")))?;
        for cert in certs {
            roots.add(cert).map_err(|e| StoreError::Tls(format!("sslrootcert {place}: {e}")))?;
        }
        if roots.is_empty() {
            return Err(StoreError::Tls(format!("sslrootcert {place}: no certificate in the file")));
        }
        Ok(roots)
    }

    /// `prefer` and `require`: any certificate, libpq's rule (encrypted against an eavesdropper,
    /// not against a server that is not the one named). The handshake's signatures are still
    /// checked: the server holds the key of the certificate it sent.
    #[derive(Debug)]
    struct Unchecked(Arc<CryptoProvider>);

    impl ServerCertVerifier for Unchecked {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    /// `verify-ca`: the chain to a trusted root is checked, the name is not. webpki checks the
    /// chain before the name, so a name refusal means the chain held.
    #[derive(Debug)]
    struct ChainOnly(Arc<WebPkiServerVerifier>);

    impl ServerCertVerifier for ChainOnly {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(url: &str) -> (String, Vec<(String, String)>) {
        take_tls_settings(url)
    }

    #[test]
    fn a_url_gives_up_its_tls_settings_and_keeps_the_rest() {
        let (rest, ours) =
            taken("postgres://u@h:5432/db?application_name=a&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem");
        assert_eq!(rest, "postgres://u@h:5432/db?application_name=a");
        assert_eq!(ours, vec![("sslmode".into(), "verify-full".into()), ("sslrootcert".into(), "/etc/ca.pem".into())]);
        let (rest, ours) = taken("postgresql://u@h/db?sslmode=require");
        assert_eq!((rest.as_str(), ours.len()), ("postgresql://u@h/db", 1));
        let (rest, ours) = taken("postgres://u@h/db");
        assert_eq!((rest.as_str(), ours.len()), ("postgres://u@h/db", 0));
    }

    #[test]
    fn key_value_words_give_up_their_tls_settings_quotes_and_all() {
        let (rest, ours) = taken(r"host=h sslmode = require  sslrootcert='/a b/c\'s.pem' user=u");
        assert_eq!(rest, "host=h    user=u");
        assert_eq!(ours, vec![("sslmode".into(), "require".into()), ("sslrootcert".into(), "/a b/c's.pem".into())]);
        // Not well formed: left whole for tokio-postgres to refuse.
        assert_eq!(taken("host=h sslmode").0, "host=h sslmode");
        assert!(target("host=h sslmode").is_err());
    }

    #[test]
    fn modes_are_read_as_libpq_reads_them() {
        assert_eq!(target("host=h").unwrap().mode, Mode::Prefer);
        assert_eq!(target("host=h sslmode=disable").unwrap().config.get_ssl_mode(), SslMode::Disable);
        for refused in ["allow", "verify_full", ""] {
            let error = target(&format!("host=h sslmode='{refused}'")).unwrap_err();
            assert!(matches!(error, StoreError::Tls(_)), "{refused}: {error}");
        }
        let error = target("host=h sslmode=verify-full").unwrap_err().to_string();
        assert!(error.contains("needs sslrootcert"), "{error}");
        let error = target("postgres://h/db?sslcert=c.pem").unwrap_err().to_string();
        assert!(error.contains("client certificate"), "{error}");
        if cfg!(feature = "tls") {
            let require = target("host=h sslmode=require").unwrap();
            assert_eq!((require.mode, require.config.get_ssl_mode()), (Mode::Require, SslMode::Require));
            // libpq's rule: require with a root given checks the chain.
            assert_eq!(target("host=h sslmode=require sslrootcert=r.pem").unwrap().mode, Mode::VerifyCa);
        } else {
            let error = target("host=h sslmode=require").unwrap_err().to_string();
            assert!(error.contains("`tls` feature"), "{error}");
        }
    }

    #[test]
    fn escapes_decode_and_a_broken_one_is_kept() {
        assert_eq!(percent_decoded("a%2Fb%zz%4"), "a/b%zz%4");
    }
}
