//! The gateway's Prometheus `/metrics`, read by tests that count what the gateway did
//! (requests answered, upstream calls) rather than trust a log.

/// The sum of every sample whose line starts with `prefix` (a metric name, optionally with
/// the start of its labels, such as `kura_requests_total{operation="GetObject"`) in the
/// `/metrics` text of the gateway on `127.0.0.1:port`.
///
/// # Panics
/// When the gateway does not answer, or a matching sample is not a whole number.
#[must_use]
pub fn sum(port: u16, prefix: &str) -> u64 {
    let text = crate::net::http_get(port, "/metrics").expect("the gateway answers /metrics");
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .expect("a whole-number sample")
        })
        .sum()
}
