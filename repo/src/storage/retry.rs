//! Retrying a storage request while it fails transiently: the gateway restarting (a
//! rolling update, a sidecar restart), overloaded, or unreachable for a while. Each
//! request is retried with exponential backoff and jitter for a bounded time; refusals
//! and faults that repeat are not retried at all.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::error::{RepoError, Result};

/// How long transient failures of one request are retried by default: longer than a
/// gateway pod takes to restart.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_mins(5);

/// The bound on retries before the gateway ever answered: a wrong endpoint is then more
/// likely than a restart, and deserves its one line soon.
const FIRST_CONTACT: Duration = Duration::from_secs(10);

/// The first pause between attempts; each next one is twice as long, up to `MAX_PAUSE`,
/// and each is drawn between half and all of that (jitter, so that many clients that
/// failed at once do not come back at once).
const FIRST_PAUSE: Duration = Duration::from_millis(200);
const MAX_PAUSE: Duration = Duration::from_secs(10);

/// How many attempts of one request may end in a broken-off answer before it fails.
const CUT_TRIES: u32 = 3;

/// Whether, and why, a failed request may succeed when tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Retry {
    /// A refusal or a fault that repeats (4xx, a corrupt answer, a stored object that
    /// failed authentication).
    Never,
    /// The gateway answered, but could not serve now (5xx, 429, SlowDown).
    Answered,
    /// The answer broke off. A gateway killed mid-answer does that, but so does one that
    /// finds a segment of the stored object failing authentication after it began to send
    /// it, every time: retried only [`CUT_TRIES`] times in all.
    Cut,
    /// The gateway was not reached (connection refused or reset, a timeout).
    Unreached,
}

/// One failed attempt of a request.
pub(super) struct Failure {
    pub(super) error: RepoError,
    pub(super) retry: Retry,
}

impl From<RepoError> for Failure {
    fn from(error: RepoError) -> Self {
        Self {
            error,
            retry: Retry::Never,
        }
    }
}

/// The outcome of one attempt.
pub(super) type Attempt<T> = std::result::Result<T, Failure>;

/// The retry policy of one storage handle and its clones.
#[derive(Clone)]
pub(super) struct Retrier {
    /// How long a request's transient failures are retried.
    pub(super) bound: Duration,
    /// Whether the gateway has answered any request of this handle (or a clone) yet.
    answered: Arc<AtomicBool>,
}

impl Retrier {
    pub(super) fn new(bound: Duration) -> Self {
        Self {
            bound,
            answered: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Runs `attempt` until it succeeds, fails for good, or its transient failures have
    /// lasted the bound; the error of the last attempt then, saying how long it was
    /// retried. Also whether any attempt before the last one failed transiently (a
    /// conditional write's own first attempt may then have taken effect).
    pub(super) async fn run<T, F, Fut>(&self, mut attempt: F) -> Result<(T, bool)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        let start = Instant::now();
        let mut pause = FIRST_PAUSE;
        let mut tries = 0u32;
        let mut cuts = 0u32;
        loop {
            tries += 1;
            let failure = match attempt().await {
                Ok(v) => {
                    self.answered.store(true, Relaxed);
                    return Ok((v, tries > 1));
                }
                Err(f) => f,
            };
            if failure.retry != Retry::Unreached {
                self.answered.store(true, Relaxed);
            }
            let bound = if self.answered.load(Relaxed) {
                self.bound
            } else {
                self.bound.min(FIRST_CONTACT)
            };
            let left = bound.saturating_sub(start.elapsed());
            if failure.retry == Retry::Cut {
                cuts += 1;
            }
            if failure.retry == Retry::Never || cuts >= CUT_TRIES || left.is_zero() {
                return Err(gave_up(failure.error, tries, start.elapsed()));
            }
            tokio::time::sleep(jittered(pause).min(left)).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}

/// Whether an S3 error answer is worth another try: the gateway (or what stands behind
/// it) failed or was overloaded, not the request refused. `permanent` is the gateway's
/// own word that the error repeats (the `x-kura-error` header: a stored object that
/// failed authentication, or a key the gateway lacks).
pub(super) fn transient_answer(status: u16, code: &str, permanent: bool) -> bool {
    if permanent {
        return false;
    }
    (status >= 500 && status != 501)
        || status == 429
        || status == 408
        || matches!(
            code,
            "SlowDown" | "Throttling" | "ThrottlingException" | "RequestTimeout" | "InternalError"
        )
}

/// `error`, saying how long it was retried when it was.
fn gave_up(mut error: RepoError, tries: u32, took: Duration) -> RepoError {
    if tries > 1
        && let RepoError::Storage { detail, .. } = &mut error
    {
        let _ = write!(
            detail,
            " (gave up after {tries} attempts in {} s)",
            took.as_secs()
        );
    }
    error
}

/// `pause`, less a random part of up to half of it.
fn jittered(pause: Duration) -> Duration {
    let half = pause / 2;
    let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1);
    let random = kura_keys::rand::u64().unwrap_or(0) % nanos;
    half + Duration::from_nanos(random)
}

#[cfg(test)]
mod tests {
    use super::transient_answer;

    #[test]
    fn overload_and_server_errors_are_retried_refusals_are_not() {
        for (status, code) in [
            (500, "InternalError"),
            (502, "BadGateway"),
            (503, "SlowDown"),
            (503, "ServiceUnavailable"),
            (504, "GatewayTimeout"),
            (429, "TooManyRequests"),
            (400, "RequestTimeout"),
        ] {
            assert!(transient_answer(status, code, false), "{status} {code}");
        }
        for (status, code) in [
            (403, "AccessDenied"),
            (403, "SignatureDoesNotMatch"),
            (404, "NoSuchKey"),
            (400, "InvalidBucketName"),
            (412, "PreconditionFailed"),
            (501, "NotImplemented"),
        ] {
            assert!(!transient_answer(status, code, false), "{status} {code}");
        }
    }

    #[test]
    fn an_error_the_gateway_calls_permanent_is_not_retried() {
        assert!(!transient_answer(500, "InternalError", true));
    }
}
