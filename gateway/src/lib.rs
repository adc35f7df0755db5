//! kura's transparent, stateless, encrypting S3 gateway.
//!
//! Clients speak S3 to the gateway with their own credentials; the gateway verifies every
//! request (SigV4, presigned URLs, aws-chunked streaming, with s3s), encrypts bodies on the
//! way up with the format of `kura-keys`, decrypts them on the way down, and forwards each
//! call to an upstream that holds only ciphertext.
//!
//! - [`config`]: the checked configuration, and the TOML file it can come from.
//! - [`credentials`]: client access keys (s3s `S3Auth`) and which buckets each may use
//!   (`S3Access`).
//! - [`error`]: how internal failures reach S3 clients (`keys_error`, 416, DeleteObjects'
//!   per-key errors), and the typed errors of the public constructors.
//! - [`upstream`]: the store behind the gateway: an S3 service through aws-sdk-s3, or a local
//!   directory served in-process (the embedded default, `upstream/local/`), both behind
//!   s3s's `S3` trait.
//! - `s3`: `impl S3` for [`Gateway`], thin, with one file per operation family
//!   (`put`, `get`, `copy`, `delete`, `list`, `multipart`, `complete`, `bucket`) over the
//!   helpers they share (`upload`, `own_upload`, `object_lock`, `conditions`,
//!   `object_key`), none of which imports an operation file.
//! - `gateway`: the state every operation reads, with the cache of located objects;
//!   `object`: locating an object (its verified header and layout) through that cache;
//!   `meta`: sealed user metadata; `body`, `etag`, `upload_id`: the other pieces the
//!   operations share.
//! - [`metrics`]: Prometheus metrics, with the tally of the upstream client's retries.
//! - [`embedded`]: the embedded default's directory (a recovery contract), and the
//!   in-process gateway that repository commands start on loopback.
//! - [`reload`]: the key file and the TLS certificate read again on SIGHUP and when they
//!   change, without a restart.
//! - [`server`]: hyper and TLS (`tls`), `/healthz`, `/readyz`, `/metrics`, graceful shutdown
//!   (`server/route.rs`, `admin.rs`, `listen.rs`); `chunk_guard` bounds
//!   aws-chunked chunks before s3s buffers them.
//!
//! Nothing lives outside the upstream and the key file: the object header travels in the
//! body, user metadata is sealed into object metadata, and a multipart upload's secrets
//! travel inside the upload ID the client echoes back.

pub mod config;
pub mod credentials;
pub mod embedded;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod metrics;
pub mod powers;
pub mod reload;
pub mod server;
pub mod upstream;

mod body;
mod chunk_guard;
mod etag;
mod gateway;
mod host;
mod meta;
mod object;
mod s3;
mod tls;
mod upload_id;

pub use gateway::Gateway;
