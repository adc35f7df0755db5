//! Test helpers shared by the tests and benchmarks of every kura crate. Dev-only: no crate
//! depends on it outside `[dev-dependencies]`, and it is never published.
//!
//! One copy of each thing a test needs from outside the code under test:
//!
//! - [`data`]: reproducible, incompressible bytes.
//! - [`net`]: a free loopback port, and a plain HTTP GET for admin endpoints.
//! - [`process`]: a `kura gateway` process on a free port, started and waited for, then
//!   stopped with SIGTERM.
//! - [`metrics`]: `/metrics` scraped and summed.
//! - [`walk`]: every file under a directory (what an upstream stored).
//! - [`loopdev`]: a loop device over a file, detached on drop.
//! - `upstream` and `gateway` (feature `s3`): a real S3 server (s3s-fs, or the embedded
//!   default's store) over HTTP on loopback, and a loopback `GatewayConfig` in front of it.
//! - `fault` (feature `s3`): that upstream killing a `kura` process right after a chosen
//!   write, for crash tests.

pub mod data;
#[cfg(feature = "s3")]
pub mod fault;
#[cfg(feature = "s3")]
pub mod gateway;
pub mod loopdev;
pub mod metrics;
pub mod net;
pub mod process;
#[cfg(feature = "s3")]
pub mod upstream;
pub mod walk;
