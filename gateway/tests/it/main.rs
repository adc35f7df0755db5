//! The gateway end to end, over real loopback sockets: aws-sdk-s3 as the client, the
//! gateway, and s3s-fs as a real S3 server behind it. One test binary, a module per topic.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    reason = "sizes and part numbers in these tests are small"
)]

mod harness;

mod auth;
mod chunked;
mod copy;
mod integrity;
mod list;
mod load;
mod local;
mod lock;
mod multipart;
mod objects;
mod powers;
mod presign;
mod reload;
mod retry;
mod server;
mod vhost;
