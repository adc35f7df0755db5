//! A time limit on each attempt of the upstream calls that answer in about a round trip,
//! so that a hung upstream answer is cut and retried like a 5xx (the SDK takes a timeout
//! for a transient error) instead of hanging the client's request.
//!
//! The calls left unlimited are those whose length the gateway cannot bound: a streaming
//! upload (PutObject, UploadPart) lasts as long as its client sends, and a server-side
//! copy or completion (CopyObject, UploadPartCopy, CompleteMultipartUpload) as long as the
//! upstream takes to copy. One client serves both kinds, so the limit is set per call:
//! `s3s_aws::Proxy` makes the calls, and an interceptor is the one place that sees which.
//! A GetObject attempt ends when the response's headers arrive; the body that follows is
//! not limited, because a slow client is allowed to read it slowly.

use std::time::Duration;

use aws_sdk_s3::config::interceptors::BeforeSerializationInterceptorContextMut;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

/// Operations whose attempts run as long as they need.
const UNLIMITED: [&str; 5] = [
    "PutObject",
    "UploadPart",
    "CopyObject",
    "UploadPartCopy",
    "CompleteMultipartUpload",
];

/// The interceptor that limits every other operation's attempts to `limit`.
#[derive(Debug)]
pub(super) struct LimitAttempts {
    pub(super) limit: Duration,
}

impl Intercept for LimitAttempts {
    fn name(&self) -> &'static str {
        "kura-limit-attempts"
    }

    fn modify_before_serialization(
        &self,
        _context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg.load::<Metadata>().map_or("", Metadata::name);
        if !UNLIMITED.contains(&op) {
            // The orchestrator reads the attempt timeout from the bag before each attempt,
            // after this hook; the top layer wins, and the connect timeout is kept.
            let limited = cfg
                .load::<TimeoutConfig>()
                .map_or_else(TimeoutConfig::builder, TimeoutConfig::to_builder)
                .operation_attempt_timeout(self.limit)
                .build();
            cfg.interceptor_state().store_put(limited);
        }
        Ok(())
    }
}
