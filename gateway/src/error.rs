//! Errors, both ways out of the gateway: how an internal failure reaches an S3 client (a
//! keys error as an S3 error, a 416 as S3 words it, the per-key errors of a DeleteObjects
//! answer), and the typed errors of the public constructors that read configuration
//! ([`LocalDirError`], [`CredentialsError`], [`SecretError`]).
//!
//! Each typed error's `Display` is the message the CLI has always printed, and none of them
//! chains a `source`: the cause is already in the message, and `anyhow`'s `{:#}` would
//! print it twice.

use std::path::PathBuf;

use s3s::{S3Error, S3Result, s3_error};

/// A keys error as the S3 error a client gets: a key the key file lacks, a format this
/// gateway cannot read, a range past the end; anything else means the stored bytes failed
/// authentication.
#[allow(
    clippy::needless_pass_by_value,
    reason = "by value, so that callers can write `.map_err(keys_error)`"
)]
pub(crate) fn keys_error(e: kura_keys::Error) -> S3Error {
    use kura_keys::Error as E;
    let e = match e {
        E::UnknownKeyId(id) => s3_error!(
            InternalError,
            "the object is encrypted under key {id}, which is not in the gateway's key file"
        ),
        E::WrongKey(id) => s3_error!(
            InternalError,
            "the key file holds a different key {id} than the object was written with"
        ),
        E::UnsupportedVersion(_) | E::UnsupportedCipher(_) => s3_error!(
            InternalError,
            "the stored object uses a format this gateway cannot read: {e}"
        ),
        E::RangeNotSatisfiable { size, .. } => return range_not_satisfiable(size),
        _ => s3_error!(
            InternalError,
            "the stored object failed authentication: {e}"
        ),
    };
    permanent(e)
}

/// The header that marks an error answer as one that repeats however often the request
/// is retried. Each of these is an S3 `InternalError` (500), which S3 clients retry; kura's
/// repository reads this header and stops at once instead of for its whole retry bound.
pub const PERMANENT_ERROR_HEADER: &str = "x-kura-error";

/// `e`, marked with [`PERMANENT_ERROR_HEADER`].
fn permanent(mut e: S3Error) -> S3Error {
    let mut h = http::HeaderMap::new();
    h.insert(
        PERMANENT_ERROR_HEADER,
        http::HeaderValue::from_static("permanent"),
    );
    e.set_headers(h);
    e
}

/// 416 with `Content-Range: bytes */size`, as S3 answers.
pub(crate) fn range_not_satisfiable(size: u64) -> S3Error {
    let mut e = s3_error!(InvalidRange, "the requested range is not satisfiable");
    let mut h = http::HeaderMap::new();
    if let Ok(v) = format!("bytes */{size}").parse() {
        h.insert(http::header::CONTENT_RANGE, v);
    }
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    e.set_headers(h);
    e
}

/// Takes the objects of a DeleteObjects batch that `check` refuses out of it, and returns
/// them as the per-key errors of the answer, as S3 reports a key it cannot delete.
pub(crate) fn refuse_keys(
    objects: &mut Vec<s3s::dto::ObjectIdentifier>,
    check: impl Fn(&str) -> S3Result<()>,
) -> Vec<s3s::dto::Error> {
    let mut refused = Vec::new();
    objects.retain(|o| match check(&o.key) {
        Ok(()) => true,
        Err(e) => {
            refused.push(key_error(o, &e));
            false
        }
    });
    refused
}

/// The per-key error of a DeleteObjects answer for `object`, refused with `e`.
pub(crate) fn key_error(object: &s3s::dto::ObjectIdentifier, e: &S3Error) -> s3s::dto::Error {
    s3s::dto::Error {
        code: Some(e.code().as_str().to_string()),
        key: Some(object.key.clone()),
        message: e.message().map(str::to_string),
        version_id: object.version_id.clone(),
    }
}

/// Why [`LocalDir::new`](crate::upstream::LocalDir::new) cannot serve a directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalDirError {
    /// s3s-fs refused the directory; the message is its error as its `Debug` writes it,
    /// the text `LocalDir::new` has always given.
    #[error("{0}")]
    Open(String),
    /// The directory's canonical path could not be found.
    #[error("{0}")]
    Canonicalize(std::io::Error),
}

/// Why [`Credentials::new`](crate::credentials::Credentials::new) refuses a list of client
/// credentials. Messages name the access key, never a secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialsError {
    /// A credential has an empty access key ID.
    #[error("a client credential has an empty access key ID")]
    EmptyAccessKey,
    /// A credential has an empty secret: anyone who knows the ID could sign.
    #[error("client credential {access_key} has an empty secret")]
    EmptySecret {
        /// The credential's access key ID.
        access_key: String,
    },
    /// An access key ID is given twice: one entry would silently widen or narrow the
    /// other's buckets.
    #[error("client access key ID {access_key} is given more than once")]
    Repeated {
        /// The repeated access key ID.
        access_key: String,
    },
}

/// Why [`SecretSource::resolve`](crate::config::SecretSource::resolve) has no secret. Each
/// message starts with `what`, the caller's name for the secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The secret file could not be read.
    #[error("{what}: reading {}: {error}", path.display())]
    Read {
        /// The caller's name for the secret.
        what: String,
        /// The file.
        path: PathBuf,
        /// Why it could not be read (in the message, not chained: see the module doc).
        error: std::io::Error,
    },
    /// The environment variable that should hold the secret is not set.
    #[error("{what}: environment variable {var} is not set")]
    Unset {
        /// The caller's name for the secret.
        what: String,
        /// The variable.
        var: String,
    },
    /// None of the three places is given.
    #[error("{what}: no secret (give secret_access_key, _file or _env)")]
    Missing {
        /// The caller's name for the secret.
        what: String,
    },
    /// More than one of the three places is given.
    #[error("{what}: give only one of secret_access_key, _file and _env")]
    Several {
        /// The caller's name for the secret.
        what: String,
    },
    /// The secret found is empty.
    #[error("{what}: the secret is empty")]
    Empty {
        /// The caller's name for the secret.
        what: String,
    },
}
