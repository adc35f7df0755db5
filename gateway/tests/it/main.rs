//! The gateway end to end, over real loopback sockets: aws-sdk-s3 as the client, the
//! gateway, and s3s-fs as a real S3 server behind it. One test binary, a module per topic.

mod harness;

mod auth;
mod copy;
mod integrity;
mod list;
mod multipart;
mod objects;
mod presign;
