//! Which object keys the gateway accepts: checked before a key reaches the upstream, as S3
//! would, since a filesystem upstream maps keys to paths.

use s3s::{S3Result, s3_error};

/// Checks an object key the way S3 would before it reaches a filesystem upstream.
pub(crate) fn check_key(key: &str) -> S3Result<()> {
    if key.is_empty() || key.len() > 1024 {
        return Err(s3_error!(
            KeyTooLongError,
            "object keys are 1 to 1024 bytes"
        ));
    }
    if key.trim().is_empty() {
        // aws-sdk-s3, the upstream client, takes such a key for none and fails the call
        // (it was a 500); S3 itself would store it.
        return Err(s3_error!(
            InvalidArgument,
            "object keys made only of white space are not accepted"
        ));
    }
    if key.split('/').any(|seg| seg == ".." || seg == ".") || key.starts_with('/') {
        // s3s-fs maps keys to paths; `..` would reach other buckets and its sidecar files.
        return Err(s3_error!(
            InvalidArgument,
            "object keys with `.` or `..` segments are not accepted"
        ));
    }
    Ok(())
}
