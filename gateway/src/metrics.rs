//! Prometheus metrics, rendered by hand in the text exposition format: requests by S3
//! operation and status, latency histograms by operation, operations and their errors,
//! plaintext bytes in and out, upstream requests, upstream errors and the upstream client's
//! retries. The retry tally is kept here, and the upstream's interceptor fills it, so that
//! the upstream depends on the metrics and not the other way round.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    operations: BTreeMap<String, u64>,
    operation_errors: BTreeMap<(String, String), u64>,
    upstream_requests: BTreeMap<String, u64>,
    upstream_errors: BTreeMap<(String, String), u64>,
    upstream_retries: Option<RetryTally>,
    bytes_in: u64,
    bytes_out: u64,
    connections_open: u64,
    connections_refused: u64,
    connections_timed_out: u64,
    /// Reloads by file (`keys`, `tls`) and result.
    reloads: BTreeMap<(&'static str, bool), u64>,
    /// When the key file in use was last modified (Unix seconds), as read when it loaded.
    key_file_modified: u64,
    /// The last readiness check's answer (`/readyz`); false until one ran.
    upstream_ready: bool,
}

/// Retries by operation name, shared by the upstream's interceptor and the metrics.
#[derive(Clone, Default, Debug)]
pub(crate) struct RetryTally(Arc<Mutex<BTreeMap<String, u64>>>);

impl RetryTally {
    /// Counts one retry of `op`.
    pub(crate) fn add(&self, op: &str) {
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

/// Where the S3 handler writes the name of the operation a request turned out to be, for the
/// HTTP layer that counts the request once it is answered. A request refused before any
/// operation ran (a bad signature, say) leaves it empty.
#[derive(Clone, Default)]
pub(crate) struct OperationSlot(Arc<OnceLock<&'static str>>);

impl OperationSlot {
    /// Records the operation; only the first call counts.
    pub(crate) fn set(&self, op: &'static str) {
        let _ = self.0.set(op);
    }

    /// The operation's name, or `none` when no operation ran.
    pub(crate) fn label(&self) -> &'static str {
        self.0.get().copied().unwrap_or("none")
    }
}

/// The gateway's counters; cheap to clone, shared by all requests.
#[derive(Clone, Default)]
pub struct Metrics(Arc<Mutex<Inner>>);

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut Inner)) {
        if let Ok(mut inner) = self.0.lock() {
            f(&mut inner);
        }
    }

    /// One HTTP request was answered; `operation` is the S3 operation's name (or an admin
    /// endpoint's, or `none`), `elapsed` the time to the response headers.
    pub fn request(&self, operation: &str, status: u16, elapsed: Duration) {
        self.with(|m| {
            *m.requests
                .entry((operation.to_string(), status))
                .or_default() += 1;
            let h = m.latency.entry(operation.to_string()).or_default();
            let s = elapsed.as_secs_f64();
            for (i, b) in BUCKETS.iter().enumerate() {
                if s <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += s;
            h.count += 1;
        });
    }

    /// An S3 operation ran; `error` is its S3 error code when it failed.
    pub fn operation(&self, op: &str, error: Option<&str>) {
        self.with(|m| {
            *m.operations.entry(op.to_string()).or_default() += 1;
            if let Some(code) = error {
                *m.operation_errors
                    .entry((op.to_string(), code.to_string()))
                    .or_default() += 1;
            }
        });
    }

    /// A call to the upstream.
    pub fn upstream_request(&self, op: &str) {
        self.with(|m| *m.upstream_requests.entry(op.to_string()).or_default() += 1);
    }

    /// A failed call to the upstream.
    pub fn upstream_error(&self, op: &str, code: &str) {
        self.with(|m| {
            *m.upstream_errors
                .entry((op.to_string(), code.to_string()))
                .or_default() += 1;
        });
    }

    /// Reports the retries `tally` counts (the upstream client's own interceptor fills it).
    pub(crate) fn upstream_retries_from(&self, tally: RetryTally) {
        self.with(|m| m.upstream_retries = Some(tally));
    }

    /// A client connection was accepted (`true`) or ended (`false`).
    pub(crate) fn connection(&self, opened: bool) {
        self.with(|m| {
            if opened {
                m.connections_open += 1;
            } else {
                m.connections_open = m.connections_open.saturating_sub(1);
            }
        });
    }

    /// A connection beyond the cap was answered 503 SlowDown (or, far beyond it, closed).
    pub(crate) fn connection_refused(&self) {
        self.with(|m| m.connections_refused += 1);
    }

    /// A connection was closed because its client sent or read nothing for the idle timeout.
    pub(crate) fn connection_timed_out(&self) {
        self.with(|m| m.connections_timed_out += 1);
    }

    /// A readiness check (`/readyz`) found the upstream ready, or not.
    pub(crate) fn upstream_ready(&self, ready: bool) {
        self.with(|m| m.upstream_ready = ready);
    }

    /// The key file in use was last modified at `secs` (Unix seconds).
    pub(crate) fn key_file_modified(&self, secs: u64) {
        self.with(|m| m.key_file_modified = secs);
    }

    /// A reload of `file` (`keys` or `tls`) loaded it, or was refused.
    pub(crate) fn reloaded(&self, file: &'static str, ok: bool) {
        self.with(|m| *m.reloads.entry((file, ok)).or_default() += 1);
    }

    /// Plaintext bytes received from clients.
    pub fn bytes_in(&self, n: u64) {
        self.with(|m| m.bytes_in += n);
    }

    /// Plaintext bytes sent to clients.
    pub fn bytes_out(&self, n: u64) {
        self.with(|m| m.bytes_out += n);
    }

    /// The metrics in Prometheus text format.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        let Ok(m) = self.0.lock() else { return out };
        render_connections(&mut out, &m);
        render_reloads(&mut out, &m);
        let _ = writeln!(
            out,
            "# HELP kura_requests_total HTTP requests by S3 operation and status.\n# TYPE kura_requests_total counter"
        );
        for ((op, status), n) in &m.requests {
            let _ = writeln!(
                out,
                "kura_requests_total{{operation=\"{op}\",status=\"{status}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP kura_request_duration_seconds Time to response headers by S3 operation.\n# TYPE kura_request_duration_seconds histogram"
        );
        for (op, h) in &m.latency {
            for (b, c) in BUCKETS.iter().zip(h.counts) {
                let _ = writeln!(
                    out,
                    "kura_request_duration_seconds_bucket{{operation=\"{op}\",le=\"{b}\"}} {c}"
                );
            }
            let _ = writeln!(
                out,
                "kura_request_duration_seconds_bucket{{operation=\"{op}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "kura_request_duration_seconds_sum{{operation=\"{op}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "kura_request_duration_seconds_count{{operation=\"{op}\"}} {}",
                h.count
            );
        }
        let _ = writeln!(
            out,
            "# HELP kura_operations_total S3 operations by name.\n# TYPE kura_operations_total counter"
        );
        for (op, n) in &m.operations {
            let _ = writeln!(out, "kura_operations_total{{operation=\"{op}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP kura_operation_errors_total Failed S3 operations by name and error code.\n# TYPE kura_operation_errors_total counter"
        );
        for ((op, code), n) in &m.operation_errors {
            let _ = writeln!(
                out,
                "kura_operation_errors_total{{operation=\"{op}\",code=\"{code}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP kura_upstream_requests_total Calls to the upstream by operation.\n# TYPE kura_upstream_requests_total counter"
        );
        for (op, n) in &m.upstream_requests {
            let _ = writeln!(
                out,
                "kura_upstream_requests_total{{operation=\"{op}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP kura_upstream_errors_total Failed upstream calls by operation and code.\n# TYPE kura_upstream_errors_total counter"
        );
        for ((op, code), n) in &m.upstream_errors {
            let _ = writeln!(
                out,
                "kura_upstream_errors_total{{operation=\"{op}\",code=\"{code}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP kura_upstream_retries_total Upstream attempts beyond the first of a call, by operation.\n# TYPE kura_upstream_retries_total counter"
        );
        for (op, n) in m
            .upstream_retries
            .as_ref()
            .map(RetryTally::snapshot)
            .unwrap_or_default()
        {
            let _ = writeln!(out, "kura_upstream_retries_total{{operation=\"{op}\"}} {n}");
        }
        render_bytes(&mut out, &m);
        out
    }
}

/// The plaintext byte counters.
fn render_bytes(out: &mut String, m: &Inner) {
    let _ = writeln!(
        out,
        "# HELP kura_bytes_in_total Plaintext bytes received from clients.\n# TYPE kura_bytes_in_total counter\nkura_bytes_in_total {}",
        m.bytes_in
    );
    let _ = writeln!(
        out,
        "# HELP kura_bytes_out_total Plaintext bytes sent to clients.\n# TYPE kura_bytes_out_total counter\nkura_bytes_out_total {}",
        m.bytes_out
    );
}

/// The reload counters, readiness, and when the key file in use last changed.
fn render_reloads(out: &mut String, m: &Inner) {
    let _ = writeln!(
        out,
        "# HELP kura_reloads_total Reloads of the key file and the TLS certificate, by file and result.\n# TYPE kura_reloads_total counter"
    );
    for file in ["keys", "tls"] {
        for (ok, result) in [(true, "ok"), (false, "failed")] {
            let n = m.reloads.get(&(file, ok)).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "kura_reloads_total{{file=\"{file}\",result=\"{result}\"}} {n}"
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP kura_upstream_ready Whether the last readiness check (/readyz) found the upstream answering (1) or not (0).\n# TYPE kura_upstream_ready gauge\nkura_upstream_ready {}",
        u8::from(m.upstream_ready)
    );
    let _ = writeln!(
        out,
        "# HELP kura_key_file_modified_timestamp_seconds When the key file in use was last modified, in Unix seconds (0: no key file is watched).\n# TYPE kura_key_file_modified_timestamp_seconds gauge\nkura_key_file_modified_timestamp_seconds {}",
        m.key_file_modified
    );
}

/// The connection gauge and counters.
fn render_connections(out: &mut String, m: &Inner) {
    let _ = writeln!(
        out,
        "# HELP kura_connections_open Client connections open now.\n# TYPE kura_connections_open gauge\nkura_connections_open {}",
        m.connections_open
    );
    let _ = writeln!(
        out,
        "# HELP kura_connections_refused_total Connections beyond the cap, answered SlowDown or closed.\n# TYPE kura_connections_refused_total counter\nkura_connections_refused_total {}",
        m.connections_refused
    );
    let _ = writeln!(
        out,
        "# HELP kura_connections_timed_out_total Connections closed for sending or reading nothing for the idle timeout.\n# TYPE kura_connections_timed_out_total counter\nkura_connections_timed_out_total {}",
        m.connections_timed_out
    );
}
