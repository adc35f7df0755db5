//! TLS for the S3 listener: the certificate and key files, read into a rustls acceptor
//! (at start by `server`, again on a reload by `reload`).

use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use crate::config::TlsFiles;

/// The acceptor for `files`; the error is the message of [`crate::server::ServerError::Tls`].
pub(crate) fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let read = |p: &std::path::Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let cert_pem = read(&files.cert)?;
    let key_pem = read(&files.key)?;
    let certs = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("certificate: {e}"))?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| format!("key: {e}"))?
        .ok_or_else(|| "no private key in the key file".to_string())?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| e.to_string())?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
