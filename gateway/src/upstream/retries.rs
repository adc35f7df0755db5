//! The upstream client's retries, counted. aws-sdk-s3 retries an idempotent call on 5xx,
//! throttling and timeouts inside one SDK call, so the counting layer (`counted.rs`) sees
//! only the call; an interceptor sees every attempt, and each one after the first is a
//! retry.

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::retries::RequestAttempts;

use crate::metrics::RetryTally;

/// The interceptor that feeds a [`RetryTally`] (which the metrics own and report).
#[derive(Debug)]
pub(super) struct CountRetries(pub(super) RetryTally);

impl Intercept for CountRetries {
    fn name(&self) -> &'static str {
        "kura-count-retries"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // The orchestrator stores the attempt's number (from 1) before each attempt.
        let attempt = cfg
            .load::<RequestAttempts>()
            .map_or(1, RequestAttempts::attempts);
        if attempt > 1 {
            self.0
                .add(cfg.load::<Metadata>().map_or("unknown", Metadata::name));
        }
        Ok(())
    }
}
