//! The upstream client's retries, counted. aws-sdk-s3 retries an idempotent call on 5xx,
//! throttling and timeouts inside one SDK call, so the counting layer (`counted.rs`) sees
//! only the call; an interceptor sees every attempt, and each one after the first is a
//! retry.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::retries::RequestAttempts;

/// Retries by operation name, shared by the upstream's interceptor and the metrics.
#[derive(Clone, Default, Debug)]
pub(crate) struct RetryTally(Arc<Mutex<BTreeMap<String, u64>>>);

impl RetryTally {
    pub(super) fn add(&self, op: &str) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(op.to_string()).or_default() += 1;
        }
    }

    /// The counts so far, by operation name.
    #[must_use]
    pub(crate) fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// The interceptor that feeds a [`RetryTally`].
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
