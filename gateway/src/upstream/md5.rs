//! Content-MD5 instead of the SDK's checksums. Backblaze B2 refuses every
//! `x-amz-checksum-*` header and `x-amz-sdk-checksum-algorithm` (400 "Unsupported header"),
//! yet aws-sdk-s3 adds a CRC32 to the calls for which S3 requires an integrity check
//! (DeleteObjects, PutObjectRetention, PutObjectLegalHold, PutBucketVersioning, ...) even
//! when checksums are set to "when required". Those calls have small bodies held in memory:
//! this interceptor gives every request with such a body Content-MD5 instead, which S3, B2
//! and the other stores accept, and sends no checksum header. Found by
//! `conformance/run --upstream b2-shaped`.

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use base64::Engine as _;
use s3s::crypto::{Checksum as _, Md5};

#[derive(Debug)]
pub(super) struct Md5InsteadOfChecksums;

fn is_checksum_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.starts_with("x-amz-checksum-") || name == "x-amz-sdk-checksum-algorithm"
}

/// Marks a request as carrying its own checksum, which makes the SDK's checksum
/// interceptor stand aside (it does for any `x-amz-checksum-*` header it finds when its
/// retry loop starts); removed again before signing.
const STAND_ASIDE: &str = "x-amz-checksum-kura-content-md5";

impl Intercept for Md5InsteadOfChecksums {
    fn name(&self) -> &'static str {
        "kura-md5-instead-of-checksums"
    }

    // Client-level interceptors run before the operation's own in each hook, so this sees
    // the request before the SDK's checksum interceptor decides whether to add a CRC32.
    fn modify_before_retry_loop(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let Some(bytes) = request.body().bytes().filter(|b| !b.is_empty()) else {
            // Streaming uploads: the SDK adds no checksum to them ("when required").
            return Ok(());
        };
        let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::checksum(bytes));
        if !request.headers().contains_key("content-md5") {
            request.headers_mut().insert("content-md5", md5);
        }
        request.headers_mut().insert(STAND_ASIDE, "1");
        Ok(())
    }

    // Before signing: the signature must cover the headers as they are sent.
    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let found: Vec<String> = request
            .headers()
            .iter()
            .map(|(name, _)| name.to_string())
            .filter(|name| is_checksum_header(name))
            .collect();
        for name in &found {
            request.headers_mut().remove(name.as_str());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::is_checksum_header;

    #[test]
    fn checksum_headers_are_told_from_others() {
        assert!(is_checksum_header("x-amz-checksum-crc32"));
        assert!(is_checksum_header("X-Amz-Sdk-Checksum-Algorithm"));
        assert!(!is_checksum_header("content-md5"));
        assert!(!is_checksum_header("x-amz-content-sha256"));
    }
}
